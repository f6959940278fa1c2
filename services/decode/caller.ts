/** Who a call of the decode service is for, and the signal that says it stopped waiting. */

/** Who a call is for (the edge's client label, fair-slots.ts) and when it stops waiting. */
export interface Caller {
  /** null: no label (not capped per client). */
  client: string | null;
  signal: AbortSignal;
}

/** The caller went away before the answer: its share of any work is dropped. */
export class CallerGone extends Error {}
