/**
 * The last line of defence of the decode service's process: every request runs in its own async
 * scope, so an exception that escapes every handler (thrown in an event callback, outside any
 * promise) is charged to the request that caused it. That request is answered 500 and its sockets
 * closed; the process and every other request go on. An exception outside any request's scope
 * leaves the process in an unknown state: it exits, and the supervisor (supervisor.ts) starts a
 * new one. Rejections nobody handled are logged and dropped (they carry no half-done callback).
 */
import { AsyncLocalStorage } from "node:async_hooks";

interface RequestScope {
  /** Ends the request after an exception nobody handled (idempotent). */
  fail(e: unknown): void;
}

const scope = new AsyncLocalStorage<RequestScope>();

/** Runs `fn` (a request's handler) so that anything escaping from its callbacks ends only that request. */
export function inRequestScope<T>(fail: (e: unknown) => void, fn: () => T): T {
  let failed = false;
  return scope.run({ fail: (e) => (failed ? undefined : ((failed = true), fail(e))) }, fn);
}

/** Installs the process-wide handlers (once, in the service's entry point). */
export function installLastResort(log: (msg: string) => void): void {
  process.on("uncaughtException", (e) => {
    const req = scope.getStore();
    if (req) {
      log(`a request failed outside its handler (answered 500): ${(e as Error)?.stack ?? String(e)}`);
      try {
        req.fail(e);
      } catch (inner) {
        log(`and ending it failed too: ${String(inner)}`);
      }
      return;
    }
    log(`uncaught exception outside any request, exiting: ${(e as Error)?.stack ?? String(e)}`);
    process.exit(70);
  });
  process.on("unhandledRejection", (e) => {
    log(`unhandled rejection (dropped): ${(e as Error)?.stack ?? String(e)}`);
  });
}
