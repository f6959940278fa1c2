/** The one place the index counts what it drops from its relays (`dropReasons` on /metrics). */
import type { IndexCounters } from "../metrics/pool-snapshot.ts";

/** Counts `n` relay messages, events or blocks dropped under `reason`. */
export function countDropped(counters: IndexCounters, reason: string, n = 1): void {
  counters.eventsDropped += n;
  counters.dropReasons[reason] = (counters.dropReasons[reason] ?? 0) + n;
}
