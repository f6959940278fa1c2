/**
 * A FairSlots (fair-slots.ts) whose waiting claims can be found by the key of the work they wait
 * for: a caller who joins a flight (concurrency.ts CancellableFlight) still waiting for a slot
 * joins its claim too, so the work may start in that caller's share.
 */
import type { FairSlots, SlotClaim } from "./fair-slots.ts";

export class JoinableSlots {
  /** Claims of flights still waiting for a slot, by flight key. */
  private readonly waiting = new Map<string, SlotClaim>();

  readonly slots: FairSlots;

  constructor(slots: FairSlots) {
    this.slots = slots;
  }

  /** Runs `work` in a slot claimed for `label`, joinable under `key` until granted, given back when the work ends. */
  async run<R>(key: string, label: string | null, signal: AbortSignal, work: () => Promise<R>): Promise<R> {
    const claim = this.slots.claim(label, signal);
    this.waiting.set(key, claim);
    let charged: string;
    try {
      charged = await claim.granted;
    } finally {
      if (this.waiting.get(key) === claim) this.waiting.delete(key);
    }
    try {
      // Everyone may have left between the grant and now: the slot goes back unused.
      signal.throwIfAborted();
      return await work();
    } finally {
      this.slots.release(charged);
    }
  }

  /** Another caller wants the work under `key`: if it still waits for a slot, it may start in this caller's share. */
  join(key: string, label: string | null, signal: AbortSignal): void {
    this.waiting.get(key)?.join(label, signal);
  }
}
