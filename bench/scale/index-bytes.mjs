// Bytes per (worker, block) of the routing index at scale (docs/scale.md §4a): W workers each hold
// chains of B blocks (shared system-prompt heads, then private turns), stored through the wire path
// the Durable Object uses; reports the index's own typed-array storage and the V8 heap after GC.
// `npx node --expose-gc bench/scale/index-bytes.mjs [workers] [blocksPerWorker]`
import { RadixIndex } from "../../src/block-index/radix-index.ts";

const W = Number(process.argv[2] ?? 32);
const PER = Number(process.argv[3] ?? 30_000);
const gc = globalThis.gc ?? (() => {});
const hex = (n) => BigInt.asUintN(64, BigInt(n) * 0x9e3779b97f4a7c15n).toString(16).padStart(16, "0");
gc();
const before = process.memoryUsage().heapUsed;
const idx = new RadixIndex();
let engine = 1;
for (let w = 0; w < W; w++) {
  idx.ensureWorker(w);
  let held = 0;
  for (let c = 0; held < PER; c++) {
    // 64 shared heads of 20 blocks (system prompts), then 40 private blocks per chain.
    const head = c % 64;
    const rows = [];
    let parent = null;
    for (let i = 0; i < 60 && held < PER; i++, held++) {
      const local = i < 20 ? head * 1000 + i : 1e9 + w * 1e7 + c * 100 + i;
      const h = String(engine++);
      rows.push({ h, p: parent, l: hex(local) });
      parent = h;
    }
    idx.applyDumpWire(w, rows);
  }
}
gc();
const heap = process.memoryUsage().heapUsed - before;
console.log(JSON.stringify({ workers: W, blocksPerWorker: PER, entries: idx.size, nodes: idx.nodeCount, storageBytesPerEntry: +(idx.storageBytes() / idx.size).toFixed(1), heapBytesPerEntry: +(heap / idx.size).toFixed(1) }));
