/**
 * Bench Worker (bundled by bench/lib/workerd.mjs, run in workerd through Miniflare) for the suites
 * "hashing" and "scale": xxh3 throughput and RoutingCore decision rate inside the real runtime. The
 * edge's request path is measured through the real Worker instead (bench/lib/edge-fleet.mjs). Not deployed.
 */
import "../../functions/wasm-shim.ts";
import { initHashing, xxh3_64 } from "../../src/util/hash.ts";
import { createIndexFixture, type IndexFixture } from "../lib/index-fixture.ts";

let state: IndexFixture | null = null;

const json = (v: unknown): Response => new Response(JSON.stringify(v), { headers: { "content-type": "application/json" } });

function need(): IndexFixture {
  if (!state) throw new Error("POST /setup first");
  return state;
}

/** workerd coarsens timers; report how many distinct values a 5 ms busy loop sees. */
function clockProbe(): { distinct: number; spins: number; stepMs: number } {
  const seen = new Set<number>();
  const t0 = performance.now();
  let spins = 0;
  while (performance.now() - t0 < 5 && spins < 5e7) {
    seen.add(performance.now());
    spins++;
  }
  const v = [...seen].sort((a, b) => a - b);
  const steps = v.slice(1).map((x, i) => x - v[i]!);
  return { distinct: seen.size, spins, stepMs: steps.length ? Math.min(...steps) : NaN };
}

/** xxh3 (the router's wrapper: init/update/digest → BigInt) vs a plain copy of the same buffer. */
function hashBench(size: number, minMs: number): { size: number; iters: number; xxh3Ms: number; copyMs: number } {
  const src = new Uint8Array(size);
  for (let i = 0; i < size; i++) src[i] = (i * 2654435761) >>> 24;
  const dst = new Uint8Array(size);
  let sink = 0n;
  // Calibrate the iteration count so each side runs ≥ minMs (timers here tick in whole ms).
  let iters = 1;
  for (;;) {
    const t = Date.now();
    for (let i = 0; i < iters; i++) sink ^= xxh3_64(src, 1337n);
    if (Date.now() - t >= 20 || iters > 1e8) break;
    iters *= 4;
  }
  const per = 20 / iters;
  iters = Math.max(iters, Math.ceil(minMs / Math.max(per, 1e-6)));
  let t = Date.now();
  for (let i = 0; i < iters; i++) sink ^= xxh3_64(src, 1337n);
  const xxh3Ms = Date.now() - t;
  t = Date.now();
  for (let i = 0; i < iters; i++) {
    dst.set(src);
    src[i % size] = dst[(i * 7) % size]! ^ 1; // keep the copy observable
  }
  const copyMs = Date.now() - t;
  if (sink === 42n) console.log("");
  return { size, iters, xxh3Ms, copyMs };
}

/** RoutingCore.route() calls per second inside the isolate: 64-block prompts, each cached on one worker. */
function routeRate(s: IndexFixture, ms: number): { decisions: number; ms: number } {
  const t0 = Date.now();
  let n = 0;
  while (Date.now() - t0 < ms) {
    for (let i = 0; i < 100; i++) {
      const d = s.core.route({ localHashes: s.chains[(n + i) % s.chains.length]!, isl: 1024 });
      if (d) s.core.settle({ receiptId: d.receiptId, promptTokens: 1024, cachedTokens: 0, outcome: "ok" });
    }
    n += 100;
  }
  return { decisions: n, ms: Date.now() - t0 };
}

export default {
  async fetch(request: Request): Promise<Response> {
    await initHashing();
    const url = new URL(request.url);
    const q = (k: string, d: number): number => Number(url.searchParams.get(k) ?? d);
    switch (url.pathname) {
      case "/clock":
        return json(clockProbe());
      case "/setup": {
        state = createIndexFixture(q("workers", 16), q("blocks", 20_000));
        return json({ indexedBlocks: state.indexedBlocks });
      }
      case "/hash":
        return json(hashBench(q("size", 4096), q("minMs", 200)));
      case "/route-rate":
        return json(routeRate(need(), q("ms", 1000)));
      default:
        return new Response("not found", { status: 404 });
    }
  },
} satisfies ExportedHandler;
