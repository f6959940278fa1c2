/**
 * Session affinity as a prior: a conversation's key (the edge derives it from prompt_cache_key,
 * x-session-id, safety_identifier or user, per tenant: src/edge/chat/affinity.ts) remembers the
 * worker that served it last, so every edge location sends the next turn there while:
 *  - that worker is up and under its admission bound (not full), and holds no more than twice the
 *    other workers' mean of in-flight requests plus two (the load cap);
 *  - no other worker has strictly more cached blocks of the request (exact overlap knows better).
 * Bounded: the oldest keys are forgotten past `maxKeys`, and a key unused for `ttlMs` is stale.
 */
export const DEFAULT_AFFINITY_KEYS = 100_000;
export const DEFAULT_AFFINITY_TTL_MS = 30 * 60_000;

export interface AffinityCandidate {
  workerId: string;
  overlapBlocks: number;
  activeRequests: number;
  full: boolean;
}

export class SessionAffinity {
  readonly #keys = new Map<string, { workerId: string; at: number }>();
  readonly #maxKeys: number;
  readonly #ttlMs: number;

  constructor(maxKeys = DEFAULT_AFFINITY_KEYS, ttlMs = DEFAULT_AFFINITY_TTL_MS) {
    this.#maxKeys = maxKeys;
    this.#ttlMs = ttlMs;
  }

  get size(): number {
    return this.#keys.size;
  }

  /** The worker the key should go to now, or null (no key, stale, over its cap, or beaten on overlap). */
  preferred(key: string, candidates: readonly AffinityCandidate[], now: number): string | null {
    const e = this.#keys.get(key);
    if (!e || now - e.at > this.#ttlMs) return null;
    const mine = candidates.find((c) => c.workerId === e.workerId);
    if (!mine || mine.full) return null;
    const others = candidates.filter((c) => c !== mine);
    const othersMean = others.length === 0 ? Infinity : others.reduce((s, c) => s + c.activeRequests, 0) / others.length;
    if (mine.activeRequests > 2 * othersMean + 2) return null;
    if (candidates.some((c) => c.overlapBlocks > mine.overlapBlocks)) return null;
    return mine.workerId;
  }

  /** The key's request went to `workerId`: the next turn is preferred there. */
  record(key: string, workerId: string, now: number): void {
    this.#keys.delete(key);
    this.#keys.set(key, { workerId, at: now });
    if (this.#keys.size > this.#maxKeys) this.#keys.delete(this.#keys.keys().next().value!);
  }

  /** A worker left the pool: its keys route afresh. */
  forgetWorker(workerId: string): void {
    for (const [k, e] of this.#keys) if (e.workerId === workerId) this.#keys.delete(k);
  }
}
