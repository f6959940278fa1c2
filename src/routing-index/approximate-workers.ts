/**
 * Workers whose indexed blocks may be wrong, and why. A worker with KV events is normally exact
 * (its relay mirrors every event); it becomes approximate when
 *  - "relay": its relay lost history (the worker's replay buffer no longer reached back) and kept a
 *    view that may hold blocks the worker evicted meanwhile (the relay's dump says `approximate`);
 *  - "budget": this index object was full and refused some of its blocks (block-budget.ts);
 *  - "silent": nothing has come from its relay for longer than a few of the relay's pings, so the
 *    path may be dead without a close (half-open socket) and events lost: cleared by the next
 *    message from the relay (a dead path ends in the relay's own liveness timeout and a new dump).
 * An approximate worker is not reported synced, and is routed like a worker without events as well
 * (routed blocks assumed cached for the approximate-mode TTL), on top of whatever the index holds.
 */
export type ApproximateSource = "relay" | "budget" | "silent";

export class ApproximateWorkers {
  readonly #reasons = new Map<string, Map<ApproximateSource, string>>();
  /** Told of every mark, repeated ones included. */
  readonly #onMark: (workerId: string) => void;

  constructor(onMark: (workerId: string) => void = () => {}) {
    this.#onMark = onMark;
  }

  mark(workerId: string, source: ApproximateSource, reason: string): void {
    let m = this.#reasons.get(workerId);
    if (!m) this.#reasons.set(workerId, (m = new Map()));
    m.set(source, reason);
    this.#onMark(workerId);
  }

  /** Clears one source (or all of them). */
  clear(workerId: string, source?: ApproximateSource): void {
    if (source === undefined) {
      this.#reasons.delete(workerId);
      return;
    }
    const m = this.#reasons.get(workerId);
    if (!m) return;
    m.delete(source);
    if (m.size === 0) this.#reasons.delete(workerId);
  }

  /** Whether the worker is approximate (for `source`, when given). */
  has(workerId: string, source?: ApproximateSource): boolean {
    return source === undefined ? this.#reasons.has(workerId) : this.#reasons.get(workerId)?.has(source) === true;
  }

  reasons(workerId: string): string[] {
    return [...(this.#reasons.get(workerId)?.values() ?? [])];
  }
}
