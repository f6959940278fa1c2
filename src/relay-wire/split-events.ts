/**
 * A relay's fan-out to a sharded index (services/relay/shard-fanout.ts): one worker's event batch
 * split into per-shard batches by chain root (chain-shards.ts).
 */
import type { ChainRootRouter } from "./chain-shards.ts";
import type { RelayEvent } from "./relay-protocol.ts";

/**
 * Index k of `perShard` is shard k's batch, in order. `resync` is set when a stored chain names a
 * parent this router never placed; the events after it are still split (the index side drops what
 * it cannot place, as it would unsharded).
 */
export function splitRelayEvents(router: ChainRootRouter, events: readonly RelayEvent[]): { perShard: RelayEvent[][]; resync: boolean } {
  const perShard: RelayEvent[][] = Array.from({ length: router.shardCount }, () => []);
  let resync = false;
  for (const ev of events) {
    if (ev.t === "stored") {
      const r = router.routeStored(ev.parent, ev.blocks);
      if (!r.ok) {
        resync = true;
        continue;
      }
      // A block re-used in another shard's chain leaves its old shard; the engine evicted nothing.
      for (const m of r.moves) perShard[m.shard]!.push({ t: "removed", hashes: [m.hash], moved: true });
      perShard[r.shard]!.push(ev);
    } else if (ev.t === "removed") {
      // A relay move (moved: true, e.g. a re-parented block) stays a move in every shard it reaches.
      for (const [s, hashes] of router.routeRemoved(ev.hashes)) perShard[s]!.push(ev.moved ? { t: "removed", hashes, moved: true } : { t: "removed", hashes });
    } else {
      router.clear();
      for (const list of perShard) list.push({ t: "cleared" });
    }
  }
  return { perShard, resync };
}
