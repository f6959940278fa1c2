/** Small concurrency tools for the decode service: cancellable single-flight, the queue-full error (slots: fair-slots.ts). */

/** Thrown when a bounded queue is full: the service answers 503 at once instead of queueing. */
export class QueueFullError extends Error {}

/**
 * Single-flight whose work is cancelled when every caller has gone: each caller joins with its own
 * signal; the shared work gets a signal that aborts when the last one leaves. A caller that leaves
 * gets its own rejection at once. Work that can no longer be stopped (a probe that has started)
 * calls `commit()`: from then on it stays joinable until it settles, whoever leaves, so a caller
 * arriving later shares it instead of starting it again.
 */
export class CancellableFlight<T> {
  private readonly inflight = new Map<string, { promise: Promise<T>; ctrl: AbortController; callers: number; committed: boolean }>();
  get size(): number {
    return this.inflight.size;
  }
  do(key: string, fn: (signal: AbortSignal, commit: () => void) => Promise<T>, caller?: AbortSignal): { promise: Promise<T>; shared: boolean } {
    // A caller already gone starts nothing.
    if (caller?.aborted) return { promise: Promise.reject(caller.reason as Error), shared: false };
    let f = this.inflight.get(key);
    const shared = f !== undefined;
    if (!f) {
      const ctrl = new AbortController();
      const entry = { promise: null as unknown as Promise<T>, ctrl, callers: 0, committed: false };
      entry.promise = fn(ctrl.signal, () => void (entry.committed = true)).finally(() => {
        if (this.inflight.get(key) === entry) this.inflight.delete(key);
      });
      entry.promise.catch(() => {});
      this.inflight.set(key, entry);
      f = entry;
    }
    const flight = f;
    flight.callers++;
    if (!caller) return { promise: flight.promise, shared };
    let left = false;
    const leave = (): void => {
      if (left) return;
      left = true;
      if (--flight.callers === 0 && !flight.committed) {
        flight.ctrl.abort(caller.reason);
        if (this.inflight.get(key) === flight) this.inflight.delete(key);
      }
    };
    const promise = new Promise<T>((resolve, reject) => {
      const onAbort = (): void => {
        leave();
        reject(caller.reason);
      };
      if (caller.aborted) return onAbort();
      caller.addEventListener("abort", onAbort, { once: true });
      flight.promise.then(
        (v) => {
          caller.removeEventListener("abort", onAbort);
          left = true;
          resolve(v);
        },
        (e: unknown) => {
          caller.removeEventListener("abort", onAbort);
          left = true;
          reject(e);
        },
      );
    });
    return { promise, shared };
  }
}
