// Routing with the radix index's walk memo (src/block-index/walk-memo.ts) against the same pool
// whose index walks every request from the root: seeded traces of growing conversations routed and
// settled between stored and removed blocks, a worker without KV events (approximate mode), a relay
// gone, quarantines, restarts and removals. Every decision and preview must be equal.
import { describe, expect, it } from "vitest";
import { RadixIndex } from "../../../src/block-index/radix-index.ts";
import { RoutingCore } from "../../../src/routing-index/routing-core.ts";
import { localHashToHex } from "../../../src/relay-wire/relay-protocol.ts";
import { mulberry32 as rng } from "../support/tokenizer-fuzz.ts";

const BLOCK = 16;

function runTrace(seed: number, steps: number): number {
  const random = rng(seed);
  const int = (n: number) => Math.floor(random() * n);
  const block = (): bigint => (random() < 0.2 ? BigInt(1 + int(3)) : (BigInt(int(2 ** 30)) << 32n) | BigInt(int(2 ** 30)));
  let now = 1_000_000;
  const make = (index: RadixIndex) => new RoutingCore({ blockSize: BLOCK, random: () => 0.5, now: () => now, index });
  // Every walk kept, however short (the traces' conversations are).
  const cores = [make(new RadixIndex({ walkMemoMinBlocks: 1 })), make(new RadixIndex({ walkMemo: false }))];
  const both = <T>(fn: (core: RoutingCore) => T): T => {
    const [a, b] = cores.map(fn);
    expect(a).toEqual(b);
    return a!;
  };
  const epochs = new Map<string, number>();
  const seqs = new Map<string, number>();
  const join = (id: string, kvEvents: boolean) => {
    const epoch = (epochs.get(id) ?? 0) + 1;
    epochs.set(id, epoch);
    seqs.set(id, 0);
    both((c) => c.hello({ type: "hello", workerId: id, url: `http://${id}`, blockSize: BLOCK, epoch, modelName: "m", contract: null, kvEvents }, id).ok);
    if (kvEvents) both((c) => c.applyDump(id, { type: "dump", epoch, seq: -1, blocks: [] }));
  };
  const ids = ["w0", "w1", "w2", "w3", "w4"];
  for (const id of ids) join(id, true);
  join("ax", false);
  const system = Array.from({ length: 4 }, block);
  const convs: bigint[][] = Array.from({ length: 4 }, () => [...system, ...Array.from({ length: 2 + int(6) }, block)]);
  /** Per worker and conversation: engine hashes of the positions it stored (for parents and removals). */
  const held = new Map<string, Map<number, string[]>>(ids.map((id) => [id, new Map()]));
  let engine = 1;
  let routes = 0;
  const send = (id: string, events: unknown[]) => {
    const seq = seqs.get(id)!;
    seqs.set(id, seq + 1);
    both((c) => c.applyEvents(id, { type: "events", epoch: epochs.get(id)!, seq, events } as Parameters<RoutingCore["applyEvents"]>[1]));
  };
  for (let step = 0; step < steps; step++) {
    now += 1 + int(400);
    const r = random();
    const id = ids[int(ids.length)]!;
    if (r < 0.3) {
      const c = int(convs.length);
      const conv = convs[c]!;
      const mine = held.get(id)!.get(c) ?? [];
      const from = Math.min(mine.length, conv.length - 1);
      const to = Math.min(conv.length, from + 1 + int(10));
      const blocks = conv.slice(from, to).map((l) => ({ h: String(engine++), l: localHashToHex(l) }));
      send(id, [{ t: "stored", parent: from > 0 ? mine[from - 1]! : null, blocks }]);
      held.get(id)!.set(c, [...mine.slice(0, from), ...blocks.map((b) => b.h)]);
    } else if (r < 0.4) {
      const entries = [...held.get(id)!.entries()];
      if (entries.length === 0) continue;
      const [c, mine] = entries[int(entries.length)]!;
      const at = int(mine.length);
      send(id, [{ t: "removed", hashes: mine.slice(at).reverse() }]);
      held.get(id)!.set(c, mine.slice(0, at));
    } else if (r < 0.43) {
      const k = random();
      if (k < 0.3) both((c) => c.quarantine(id) !== undefined);
      else if (k < 0.5) both((c) => c.relayGone(id));
      else if (k < 0.8) {
        // A restart: a new life, an empty dump.
        join(id, true);
        held.set(id, new Map());
      } else {
        both((c) => c.removeWorker(id));
        join(id, true);
        held.set(id, new Map());
      }
    } else if (r < 0.46) {
      const src = convs[int(convs.length)]!;
      convs.push([...src.slice(0, 1 + int(src.length)), ...Array.from({ length: 1 + int(4) }, block)]);
    } else {
      // A conversation's next turn (grown), or the same prompt again; an admission's peek first now and then.
      const conv = convs[int(convs.length)]!;
      if (random() < 0.6) for (let i = 1 + int(8); i > 0; i--) conv.push(block());
      const localHashes = BigUint64Array.from(conv);
      const isl = conv.length * BLOCK + int(BLOCK);
      if (random() < 0.3) both((c) => c.peek({ localHashes, isl }));
      const d = both((c) => c.route({ localHashes, isl }));
      routes++;
      if (d && random() < 0.7) both((c) => c.settle({ receiptId: d.receiptId, promptTokens: isl, cachedTokens: d.overlapBlocks * BLOCK, outcome: "ok" }));
    }
  }
  return routes;
}

describe("routing with the walk memo", () => {
  it("decides as a pool whose index walks every request from the root", () => {
    for (let seed = 1; seed <= 12; seed++) expect(runTrace(seed, 500)).toBeGreaterThan(100);
  });
});
