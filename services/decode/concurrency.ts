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
