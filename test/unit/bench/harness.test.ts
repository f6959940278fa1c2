/**
 * Smoke test of `npm run bench`: the harness runs the suites on a tiny configuration (edge with its
 * one-worker fleet in Miniflare; not scale, media) and writes its JSON, table and SVG plots. No
 * timing is asserted.
 */
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";

const ROOT = join(import.meta.dirname, "../../..");
const out = mkdtempSync(join(tmpdir(), "kvedge-bench-"));
afterAll(() => rmSync(out, { recursive: true, force: true }));

function run(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [join(ROOT, "scripts/bench.mjs"), ...args], { cwd: ROOT, timeout: 240_000, maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
      const code = err ? (typeof (err as { code?: unknown }).code === "number" ? ((err as { code: number }).code) : 1) : 0;
      resolve({ code, stdout, stderr });
    });
  });
}

describe("bench harness", () => {
  it("rejects an unknown suite", async () => {
    const r = await run(["--tiny", "--only", "nope", "--out", out]);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain("unknown suite nope");
  });

  it("runs the suites on a tiny configuration and writes results", { timeout: 300_000 }, async () => {
    // Two bench runs side by side, each with its own --out (one latest.json holding its suites): the
    // edge suite, which mostly waits (fleet starts, quiet windows; ~11 s of CPU), with admission
    // (~9 s of CPU, no waits), and the others (~22 s of CPU). One run of all took up to its 240 s
    // limit on a loaded two-core host.
    const runs = [["edge", "admission"], ["tokenizer", "index", "hashing", "routing", "fleet-shapes", "layout"]];
    const suites = runs.flat();
    const outs = runs.map((_, i) => join(out, `run-${i}`));
    const results = await Promise.all(runs.map((only, i) => run(["--tiny", "--only", only.join(","), "--out", outs[i]!])));
    const latest = { suites: {} as Record<string, any> };
    for (const [i, r] of results.entries()) {
      expect(r.stderr).toContain("100%");
      expect(r.code, r.stdout + r.stderr).toBe(0);
      expect(r.stdout).toMatch(/\| suite\s+\| metric/);
      const written = JSON.parse(readFileSync(join(outs[i]!, "latest.json"), "utf8"));
      expect(written.mode).toBe("tiny");
      expect(Object.keys(written.suites)).toEqual(runs[i]);
      expect(readdirSync(join(outs[i]!, "runs")).length).toBe(1);
      Object.assign(latest.suites, written.suites);
    }
    for (const s of suites) {
      expect(latest.suites[s].ok, `${s}: ${latest.suites[s].error}`).toBe(true);
      expect(latest.suites[s].summary.length).toBeGreaterThan(0);
    }
    // The tokenizer suite checks exactness on the golden cases inside the bench run.
    expect(latest.suites.tokenizer.details.goldenCases).toBeGreaterThan(0);
    expect(latest.suites.tokenizer.details.kvExact).toBe(latest.suites.tokenizer.details.goldenCases);
    // Every routing policy was replayed on every trace, against the infinite-cache ceiling; the
    // media-blind peers on the vision trace (on text they make kvedge's and session-sticky's choices).
    const routing = latest.suites.routing.details;
    const mediaBlind = ["text-prefix", "url-keyed"];
    expect(routing.policies).toEqual(expect.arrayContaining(["kvedge", "approximate", "dynamo-blocks", "llm-d", "session-sticky", "least-loaded", "round-robin", ...mediaBlind]));
    for (const trace of ["chat", "agent", "docqa", "mooncake", "vision"]) {
      const policies = trace === "vision" ? routing.policies : routing.policies.filter((p: string) => !mediaBlind.includes(p));
      expect(Object.keys(routing.traces[trace].byCapacity["1"])).toEqual(policies);
      expect(routing.traces[trace].ceiling.mean).toBeGreaterThan(0);
    }
    // The vision trace repeats media across turns and users, some under other URLs; a router that
    // sees only the text before the first media item finds less of it cached than kvedge.
    const vision = routing.traces.vision;
    expect(vision.seeds[0].shape.media.repeatShare).toBeGreaterThan(0);
    expect(vision.seeds[0].shape.media.repeatUnderOtherUrlShare).toBeGreaterThan(0);
    expect(vision.byCapacity["1"]["text-prefix"].hitRate.mean).toBeLessThan(vision.byCapacity["1"].kvedge.hitRate.mean);
    // Many long chats taking turns at the index: each pool's turns were timed; the one under a small
    // budget has every worker approximate, the one without KV events routes on assumed blocks only.
    const turns = latest.suites.index.details.chatsTakingTurns;
    for (const pool of ["exact", "approximate", "withoutKvEvents"]) expect(turns[pool].routeMs.p50, pool).toBeGreaterThan(0);
    expect(turns.exact.approximateWorkers).toBe(0);
    expect(turns.approximate.approximateWorkers).toBe(turns.approximate.workers);
    expect(turns.withoutKvEvents.sizes.indexedBlocks).toBe(0);
    expect(turns.withoutKvEvents.sizes.assumedBlocks).toBeGreaterThan(0);
    // Admission: every policy at every load, each offered request served or refused, on workers bounded by their KV.
    const admission = latest.suites.admission.details;
    expect(admission.capacityRps).toBeGreaterThan(0);
    expect(admission.rows.map((row: { load: number; policy: string }) => `${row.load} ${row.policy}`)).toEqual(
      [1, 2].flatMap((load) => ["route-everything", "fifo", "kvedge", "kvedge (loadFactor 2)", "kvedge (maxWaitMs 30 s)", "kvedge (flex maxWaitMs 8 s)"].map((p) => `${load} ${p}`)),
    );
    for (const row of admission.rows) expect(row.served + row.refused).toBe(row.offered);
    // Fleet shapes: the unified fleet and every PD shape at every bandwidth replayed on agent and chat;
    // the PD pool moves KV (transfer time > 0); on the DP pool the rank-aware index finds more of the
    // prompt cached than a router that sees rank 0 only and lets SGLang pick the rank.
    const shapes = latest.suites["fleet-shapes"].details;
    expect(shapes.configs).toEqual(["2 unified", "1P+1D @25 GB/s"]);
    for (const trace of ["agent", "chat"]) {
      const t = shapes.traces[trace];
      expect(Object.keys(t.shapes)).toEqual(shapes.configs);
      expect(t.shapes["1P+1D @25 GB/s"].transferP50.mean).toBeGreaterThan(0);
      expect(t.shapes["2 unified"].transferP50.mean).toBe(0);
      expect(Object.keys(t.dp)).toEqual(["rank-aware", "rank0-index", "round-robin"]);
    }
    expect(shapes.traces.chat.dp["rank-aware"].hitRate.mean).toBeGreaterThan(shapes.traces.chat.dp["rank0-index"].hitRate.mean);
    // The edge's figures come from the real handler: every case has an edge − direct overhead, text,
    // images and a video among them (--tiny: text to 8k, a 24-frame video).
    for (const c of Object.values(latest.suites.edge.details.cases) as { overheadP50: number }[]) expect(Number.isFinite(c.overheadP50)).toBe(true);
    expect([...new Set(Object.keys(latest.suites.edge.details.cases).map((k) => k.split("-")[0]))]).toEqual(["text", "image", "video"]);
    // Beside the edge process's CPU, its isolate thread's: part of it (the thread is one of the
    // process's, read in the same pass; the slack is for a thread exiting between reads), and not
    // nothing (the thread serves).
    type Cpu = { n?: number; edgeCpuP50: number; edgeIsolateCpuP50: number; floorCpuP50: number; floorIsolateCpuP50: number; ownCpuP50: number };
    const conversationBins = Object.values(latest.suites.edge.details.conversations?.kinds ?? {}).flatMap((k) => Object.values((k as { bins: Record<string, Cpu> }).bins));
    const withThread = [...(Object.values(latest.suites.edge.details.cases) as Cpu[]), ...conversationBins.filter((b) => b.n! > 0)];
    expect(withThread.length).toBeGreaterThan(Object.keys(latest.suites.edge.details.cases).length);
    for (const c of withThread) {
      expect(c.edgeIsolateCpuP50).toBeGreaterThan(0);
      expect(c.edgeIsolateCpuP50).toBeLessThanOrEqual(c.edgeCpuP50 + 0.05);
      // The proxy floor beside each: its CPU in the same process (not nothing: it serves), and
      // kvedge's own share, edge − floor per request.
      expect(c.floorCpuP50).toBeGreaterThan(0);
      expect(c.floorIsolateCpuP50).toBeGreaterThan(0);
      expect(c.floorIsolateCpuP50).toBeLessThanOrEqual(c.floorCpuP50 + 0.05);
      expect(Number.isFinite(c.ownCpuP50)).toBe(true);
    }
    // The budget-pressured pass: every shape's later turns, hits and misses together, with their hit
    // rates; its rows beside the all-hits pass's, the per-run p50 and p99 rows, every cache budget
    // listed (the media views' among them), and no always-passing growth ratio.
    type Pressured = { turnChainHitRate: number; promptPrefixHitRate: number; all: { n: number; edgeCpuP50: number; edgeCpuP99: number; edgeCpuMean: number; edgeIsolateCpuP50: number } };
    const pressured = latest.suites.edge.details.conversations.pressured as { kinds: Record<string, Pressured> };
    expect(Object.keys(pressured.kinds)).toEqual(["chat", "agent", "vision"]);
    for (const k of Object.values(pressured.kinds)) {
      expect(k.all.n).toBeGreaterThan(0);
      for (const x of [k.all.edgeCpuP50, k.all.edgeCpuP99, k.all.edgeCpuMean, k.all.edgeIsolateCpuP50]) expect(x).toBeGreaterThan(0);
      for (const r of [k.turnChainHitRate, k.promptPrefixHitRate]) expect(r >= 0 && r <= 1, String(r)).toBe(true);
    }
    const edgeMetrics = (latest.suites.edge.summary as { metric: string }[]).map((row) => row.metric);
    for (const kind of ["chat", "agent", "vision"]) {
      expect(edgeMetrics.some((m) => m.startsWith(`conversations ${kind}, budget-pressured pass`)), kind).toBe(true);
      expect(edgeMetrics.some((m) => m.startsWith(`conversations ${kind}: warm turns' edge-process CPU per run`)), kind).toBe(true);
    }
    const budgetRow = (latest.suites.edge.summary as { metric: string; value: string }[]).find((row) => row.metric.startsWith("edge caches' budgets"));
    for (const cache of ["turn_chain", "prompt_prefix", "media_views"]) expect(budgetRow?.value).toContain(cache);
    expect(edgeMetrics.some((m) => m.includes("sub-linear") || m.includes("÷ at 1k"))).toBe(false);
    const floorRpc = latest.suites.edge.details.floorRpc;
    expect(floorRpc.withRpcCpuP50).toBeGreaterThan(0);
    expect(floorRpc.fetchOnlyCpuP50).toBeGreaterThan(0);
    expect(floorRpc.withRateLimitTakeCpuP50).toBeGreaterThan(0);
    // Rate limiting off vs on (the default limiter, its objects in the index process): every case's
    // figures are there and finite (their values are the run's).
    const rateLimit = latest.suites.edge.details.rateLimit as Record<string, Record<string, number>>;
    expect(Object.keys(rateLimit)).toEqual(["text-1k warm", "text-1k warm stream", "chat turn 8k"]);
    for (const r of Object.values(rateLimit))
      for (const k of ["offCpuP50", "onCpuP50", "onMinusOffCpuP50", "onMinusOffCpuMean", "offIsolateCpuP50", "onIsolateCpuP50", "offIndexCpuP50", "onIndexCpuP50", "indexOnMinusOffCpuP50"]) expect(Number.isFinite(r[k]), k).toBe(true);
    const plots = outs.flatMap((dir) => readdirSync(join(dir, "plots")).filter((f) => f.endsWith(".svg")).map((f) => ({ dir, f })));
    expect(plots.map((p) => p.f)).toEqual(expect.arrayContaining(["edge.svg", "tokenizer.svg", "index.svg", "hashing.svg", "routing-hit-rate.svg", "routing-goodput.svg", "routing-ttft.svg", "fleet-shapes-ttft.svg", "fleet-shapes-goodput.svg", "fleet-shapes-dp.svg", "layout.svg"]));
    for (const p of plots) expect(readFileSync(join(p.dir, "plots", p.f), "utf8")).toMatch(/^<svg [^>]*xmlns="http:\/\/www.w3.org\/2000\/svg"[\s\S]*<\/svg>\n$/);
  });
});
