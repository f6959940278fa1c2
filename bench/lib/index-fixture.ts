/**
 * A routing index holding synthetic traffic for the decision-rate benchmarks (suite "scale", in Node
 * and inside workerd): `workers` synced workers with `blocksPerWorker` blocks each, in chains of 64
 * (random contents: they occupy the index like real traffic but never match a real prompt).
 */
import { localHashToHex } from "../../src/relay-wire/relay-protocol.ts";
import { RoutingCore } from "../../src/routing-index/routing-core.ts";

export interface IndexFixture {
  core: RoutingCore;
  indexedBlocks: number;
  /** Some of the indexed chains (local hashes in order), for realistic matching queries. */
  chains: bigint[][];
}

/** A seeded 64-bit mixer for synthetic block hashes. */
function mix(x: bigint): bigint {
  x = BigInt.asUintN(64, (x ^ (x >> 33n)) * 0xff51afd7ed558ccdn);
  x = BigInt.asUintN(64, (x ^ (x >> 33n)) * 0xc4ceb9fe1a85ec53n);
  return x ^ (x >> 33n);
}

/** Engine-hash stand-in for a block chain: deterministic in the prefix, decimal int64 like SGLang's. */
function engineChain(localHashes: readonly bigint[], salt: bigint): string[] {
  const out: string[] = [];
  let h = salt;
  for (const l of localHashes) {
    h = mix(h ^ l);
    out.push(BigInt.asIntN(64, h).toString());
  }
  return out;
}

export function createIndexFixture(workers: number, blocksPerWorker: number, seed = 1): IndexFixture {
  const blockSize = 16;
  // A real clock: time-based state in the core (pending routes, load expiry) must age as in production.
  const core = new RoutingCore({ blockSize, random: () => 0.5, now: () => Date.now() });
  const chains: bigint[][] = [];
  let x = BigInt(seed);
  for (let w = 0; w < workers; w++) {
    const workerId = `w${w + 1}`;
    const hello = core.hello(
      { type: "hello", workerId, url: `http://127.0.0.1:${9000 + w}`, blockSize, epoch: 1, modelName: "Qwen/Qwen3-VL-8B-Instruct", contract: null, kvEvents: true },
      workerId,
    );
    if (!hello.ok) throw new Error(hello.reason);
    const blocks: { h: string; p: string | null; l: string }[] = [];
    for (let c = 0; blocks.length < blocksPerWorker; c++) {
      const locals: bigint[] = [];
      for (let i = 0; i < 64 && blocks.length + locals.length < blocksPerWorker; i++) locals.push(mix((x += 0x9e3779b97f4a7c15n)));
      const engines = engineChain(locals, BigInt(w * 1_000_003 + c));
      if (c < 16 && locals.length === 64) chains.push(locals);
      locals.forEach((l, i) => blocks.push({ h: engines[i]!, p: i === 0 ? null : engines[i - 1]!, l: localHashToHex(l) }));
    }
    const r = core.applyDump(workerId, { type: "dump", epoch: 1, seq: -1, blocks });
    if (!r.ok) throw new Error(r.reason);
  }
  return { core, indexedBlocks: core.sizes().indexedBlocks, chains };
}
