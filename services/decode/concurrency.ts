/** Small concurrency tools for the decode service: a counting semaphore, single-flight, an LRU map. */

export class Semaphore {
  private active = 0;
  private readonly queue: (() => void)[] = [];
  readonly limit: number;
  constructor(limit: number) {
    this.limit = Math.max(1, limit);
  }
  get inUse(): number {
    return this.active;
  }
  get waiting(): number {
    return this.queue.length;
  }
  async run<T>(fn: () => Promise<T>): Promise<T> {
    if (this.active >= this.limit) await new Promise<void>((r) => this.queue.push(r));
    else this.active++;
    try {
      return await fn();
    } finally {
      const next = this.queue.shift();
      if (next) next();
      else this.active--;
    }
  }
}

/** Concurrent calls with one key share one execution (and its result or error). */
export class SingleFlight<T> {
  private readonly inflight = new Map<string, Promise<T>>();
  get size(): number {
    return this.inflight.size;
  }
  do(key: string, fn: () => Promise<T>): { promise: Promise<T>; shared: boolean } {
    const existing = this.inflight.get(key);
    if (existing) return { promise: existing, shared: true };
    const p = fn().finally(() => this.inflight.delete(key));
    this.inflight.set(key, p);
    return { promise: p, shared: false };
  }
}

export class LruCache<V> {
  private readonly map = new Map<string, V>();
  readonly capacity: number;
  constructor(capacity: number) {
    this.capacity = Math.max(0, capacity);
  }
  get size(): number {
    return this.map.size;
  }
  get(key: string): V | undefined {
    const v = this.map.get(key);
    if (v === undefined) return undefined;
    this.map.delete(key);
    this.map.set(key, v);
    return v;
  }
  set(key: string, value: V): void {
    if (this.capacity === 0) return;
    this.map.delete(key);
    this.map.set(key, value);
    while (this.map.size > this.capacity) this.map.delete(this.map.keys().next().value!);
  }
  delete(key: string): void {
    this.map.delete(key);
  }
}

/** Thrown when a bounded queue is full: the service answers 503 at once instead of queueing. */
export class QueueFullError extends Error {}

/**
 * A semaphore with a bounded wait queue and cancellation: a waiter whose signal aborts leaves the
 * queue without ever taking a slot.
 */
export class BoundedSemaphore {
  private active = 0;
  private readonly queue: { grant: () => void }[] = [];
  readonly limit: number;
  readonly maxQueue: number;
  private peak = 0;
  constructor(limit: number, maxQueue: number) {
    this.limit = Math.max(1, limit);
    this.maxQueue = Math.max(0, maxQueue);
  }
  get inUse(): number {
    return this.active;
  }
  get waiting(): number {
    return this.queue.length;
  }
  /** Most slots ever held at once. */
  get peakInUse(): number {
    return this.peak;
  }
  async run<T>(fn: () => Promise<T>, signal?: AbortSignal): Promise<T> {
    if (signal?.aborted) throw signal.reason;
    if (this.active >= this.limit) {
      if (this.queue.length >= this.maxQueue) throw new QueueFullError("queue full");
      await new Promise<void>((resolve, reject) => {
        const entry = {
          grant: () => {
            signal?.removeEventListener("abort", onAbort);
            resolve();
          },
        };
        const onAbort = (): void => {
          const i = this.queue.indexOf(entry);
          if (i !== -1) this.queue.splice(i, 1);
          reject(signal!.reason);
        };
        signal?.addEventListener("abort", onAbort, { once: true });
        this.queue.push(entry);
      });
    } else this.active++;
    this.peak = Math.max(this.peak, this.active);
    try {
      return await fn();
    } finally {
      const next = this.queue.shift();
      if (next) next.grant();
      else this.active--;
    }
  }
}

/**
 * Single-flight whose work is cancelled when every caller has gone: each caller joins with its own
 * signal; the shared work gets a signal that aborts when the last one leaves. A caller that leaves
 * gets its own rejection at once.
 */
export class CancellableFlight<T> {
  private readonly inflight = new Map<string, { promise: Promise<T>; ctrl: AbortController; callers: number }>();
  get size(): number {
    return this.inflight.size;
  }
  do(key: string, fn: (signal: AbortSignal) => Promise<T>, caller?: AbortSignal): { promise: Promise<T>; shared: boolean } {
    let f = this.inflight.get(key);
    const shared = f !== undefined;
    if (!f) {
      const ctrl = new AbortController();
      const entry = { promise: null as unknown as Promise<T>, ctrl, callers: 0 };
      entry.promise = fn(ctrl.signal).finally(() => {
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
      if (--flight.callers === 0) {
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
