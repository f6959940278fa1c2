// Suite "hashing": xxh3-64 (hash-wasm through src/util/hash.ts, as the router calls it) inside
// workerd vs a plain copy of the same buffer (the memory-bandwidth limit), plus Node for reference.
import { startBenchWorker } from "../lib/workerd.mjs";
import { barChart } from "../lib/svg.mjs";

const SIZES = [
  ["4 KiB", 4096],
  ["1 MiB", 1 << 20],
  ["16 MiB", 16 << 20],
];

function nodeHash(xxh3_64, size, minMs) {
  const src = new Uint8Array(size);
  for (let i = 0; i < size; i++) src[i] = (i * 2654435761) >>> 24;
  const dst = new Uint8Array(size);
  let iters = 1;
  let sink = 0n;
  for (;;) {
    const t = performance.now();
    for (let i = 0; i < iters; i++) sink ^= xxh3_64(src, 1337n);
    const ms = performance.now() - t;
    if (ms >= minMs) {
      let t2 = performance.now();
      for (let i = 0; i < iters; i++) dst.set(src);
      const copyMs = performance.now() - t2;
      return { iters, xxh3Ms: ms, copyMs, sink };
    }
    iters *= 2;
  }
}

export default {
  name: "hashing",
  title: "xxh3 throughput vs memory copy",
  async run(ctx) {
    const minMs = ctx.tiny ? 20 : ctx.quick ? 150 : 400;
    const w = await startBenchWorker();
    const rows = {};
    try {
      await w.call("/hash?size=65536&minMs=50"); // JIT + wasm warm-up
      for (const [label, size] of SIZES) {
        ctx.progress(Object.keys(rows).length / (SIZES.length + 1), `hashing workerd ${label}`);
        const r = await w.call(`/hash?size=${size}&minMs=${minMs}`);
        const gb = (size * r.iters) / 1e9;
        rows[label] = { size, iters: r.iters, workerdXxh3GBs: gb / (r.xxh3Ms / 1000), workerdCopyGBs: gb / (Math.max(1, r.copyMs) / 1000) };
      }
    } finally {
      await w.dispose();
    }
    ctx.progress(0.8, "hashing node");
    const { initHashing, xxh3_64 } = await import("../../src/util/hash.ts");
    await initHashing();
    nodeHash(xxh3_64, 65536, 30);
    for (const [label, size] of SIZES) {
      const r = nodeHash(xxh3_64, size, minMs / 2);
      const gb = (size * r.iters) / 1e9;
      rows[label].nodeXxh3GBs = gb / (r.xxh3Ms / 1000);
      rows[label].nodeCopyGBs = gb / (r.copyMs / 1000);
    }
    const summary = SIZES.map(([label]) => {
      const r = rows[label];
      return {
        metric: `xxh3 in workerd, ${label}: hash / copy (ratio)`,
        value: `${r.workerdXxh3GBs.toFixed(2)} / ${r.workerdCopyGBs.toFixed(1)} (${((100 * r.workerdXxh3GBs) / r.workerdCopyGBs).toFixed(0)} %)`,
        unit: "GB/s",
        goal: "",
        pass: null,
      };
    });
    summary.push({ metric: "xxh3 in Node, 1 MiB", value: rows["1 MiB"].nodeXxh3GBs.toFixed(2), unit: "GB/s", goal: "", pass: null });
    const plot = barChart({
      title: "xxh3-64 vs plain memory copy (workerd, 1 ms clock; batches ≥ " + minMs + " ms)",
      unit: "GB/s",
      log: true,
      bars: SIZES.flatMap(([label]) => [
        { label: `${label} xxh3`, value: rows[label].workerdXxh3GBs, group: "xxh3 (hash-wasm)" },
        { label: `${label} copy`, value: rows[label].workerdCopyGBs, group: "Uint8Array.set copy" },
      ]),
    });
    return { summary, details: { minBatchMs: minMs, sizes: rows }, plots: [{ file: "hashing.svg", svg: plot }] };
  },
};
