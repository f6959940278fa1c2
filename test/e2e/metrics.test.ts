/**
 * Operator surface on the real local fleet (2 simulated SGLang workers + relays + the edge under Miniflare):
 * `/metrics` scrapes parse with a strict Prometheus text-format parser and count what was sent;
 * the `kvedge` CLI's status, workers, explain (no load added) and replay work against the edge.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../scripts/local-fleet.ts";
// @ts-expect-error -- plain .mjs CLI without type declarations
import { run as runCli } from "../../scripts/kvedge.mjs";
import { parsePrometheusText, sampleValue, type ParsedFamily } from "../helpers/prom-parser.ts";

let fleet: Fleet;
let dir: string;

beforeAll(async () => {
  fleet = await startFleet({ workers: 2, log: process.env.KVEDGE_E2E_LOGS ? (l) => console.log(l) : undefined });
  dir = mkdtempSync(join(tmpdir(), "kvedge-metrics-e2e-"));
});
afterAll(async () => {
  await fleet?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

function prompt(seed: number): string {
  const words = ["edge", "cache", "block", "prefix", "worker", "token", "relay", "index"];
  let x = seed;
  const out = [`Topic ${seed}:`];
  for (let i = 0; i < 300; i++) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    out.push(words[x % words.length]!);
  }
  return out.join(" ");
}

const body = (seed: number, extra: Record<string, unknown> = {}) => ({ model: fleet.model, messages: [{ role: "user", content: prompt(seed) }], max_tokens: 4, ...extra });

async function chat(seed: number): Promise<{ worker: string; cached: number; prompt: number }> {
  const r = await fetch(`${fleet.edgeUrl}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body(seed)) });
  const j = (await r.json()) as { usage: { prompt_tokens: number; prompt_tokens_details?: { cached_tokens?: number } } };
  expect(r.status).toBe(200);
  return { worker: r.headers.get("x-kvedge-worker")!, cached: j.usage.prompt_tokens_details?.cached_tokens ?? 0, prompt: j.usage.prompt_tokens };
}

async function indexedBlocks(): Promise<number> {
  const w = (await fleet.admin(`/admin/workers?model=${encodeURIComponent(fleet.model)}`)) as { workers: { blocks: number }[] };
  return w.workers.reduce((a, x) => a + x.blocks, 0);
}

async function scrape(): Promise<{ text: string; families: Map<string, ParsedFamily> }> {
  const r = await fetch(`${fleet.edgeUrl}/metrics`, { headers: { authorization: `Bearer ${fleet.adminToken}` } });
  expect(r.status).toBe(200);
  expect(r.headers.get("content-type")).toBe("text/plain; version=0.0.4; charset=utf-8");
  const text = await r.text();
  return { text, families: parsePrometheusText(text) };
}

/** Settles run in waitUntil after the response: poll until the index has seen them all. */
async function scrapeWhen(pred: (f: Map<string, ParsedFamily>) => boolean): Promise<{ text: string; families: Map<string, ParsedFamily> }> {
  // Bounded by time, not polls: under load (two e2e files at a time) a scrape itself may take long.
  for (const deadline = Date.now() + 15_000; Date.now() < deadline; ) {
    const s = await scrape();
    if (pred(s.families)) return s;
    await new Promise((r) => setTimeout(r, 100));
  }
  return scrape();
}

function cli(args: string[]): Promise<{ code: number; out: string; err: string }> {
  const out: string[] = [];
  const err: string[] = [];
  const env = { KVEDGE_URL: fleet.edgeUrl, KVEDGE_ADMIN_TOKEN: fleet.adminToken };
  return runCli(args, env, { out: (s: string) => out.push(s), err: (s: string) => err.push(s) }).then((code: number) => ({ code, out: out.join("\n"), err: err.join("\n") }));
}

describe("metrics and CLI on the local fleet", () => {
  const served = new Map<number, string>();

  it("/metrics needs the admin token and counts what went through the edge", async () => {
    expect((await fetch(`${fleet.edgeUrl}/metrics`)).status).toBe(401);
    expect((await fetch(`${fleet.edgeUrl}/metrics`, { headers: { authorization: "Bearer not-the-admin-token" } })).status).toBe(401);

    for (const s of [1, 2, 3]) served.set(s, (await chat(s)).worker);
    // Repeats must find their prefix: wait until the relays have reported the first round's blocks.
    for (const deadline = Date.now() + 15_000; Date.now() < deadline && (await indexedBlocks()) < 3 * 16; ) await new Promise((r) => setTimeout(r, 100));
    let cached = 0;
    for (const s of [1, 2, 3]) {
      const r = await chat(s);
      expect(r.worker).toBe(served.get(s));
      cached += r.cached;
    }
    expect(cached).toBeGreaterThan(0);

    const m = { model: fleet.model };
    const { text, families: f } = await scrapeWhen((x) => sampleValue(x, "kvedge_requests_total", { ...m, outcome: "ok" }) >= 6);
    console.log(`metrics scrape: ${text.length} bytes, ${f.size} families, ${text.split("\n").length - 1} lines`);
    expect(sampleValue(f, "kvedge_pool_up", m)).toBe(1);
    expect(sampleValue(f, "kvedge_requests_total", { ...m, outcome: "ok" })).toBe(6);
    expect(sampleValue(f, "kvedge_requests_total", { ...m, outcome: "error" })).toBe(0);
    const decisions = f.get("kvedge_routing_decisions_total")!.samples.reduce((a, s) => a + s.value, 0);
    expect(decisions).toBe(6);
    expect(sampleValue(f, "kvedge_routing_overlap_blocks_count", m)).toBe(6);
    expect(sampleValue(f, "kvedge_routing_overlap_blocks_sum", m)).toBeGreaterThan(0);
    expect(sampleValue(f, "kvedge_edge_overhead_seconds_count", m)).toBe(6);
    const actual = f.get("kvedge_receipt_actual_cached_tokens_total")!.samples.reduce((a, s) => a + s.value, 0);
    const predicted = f.get("kvedge_receipt_predicted_cached_tokens_total")!.samples.reduce((a, s) => a + s.value, 0);
    expect(actual).toBe(cached);
    expect(predicted).toBeGreaterThan(0);
    expect(sampleValue(f, "kvedge_workers", { ...m, state: "up" })).toBe(2);
    for (const w of fleet.workers) expect(sampleValue(f, "kvedge_worker_synced", { ...m, worker: w.id })).toBe(1);
    expect(sampleValue(f, "kvedge_index_blocks", m)).toBeGreaterThanOrEqual(3 * 16);
    expect(sampleValue(f, "kvedge_index_events_applied_total", m)).toBeGreaterThan(0);
    expect(sampleValue(f, "kvedge_index_gaps_total", m)).toBe(0);
    expect(sampleValue(f, "kvedge_pool_block_size_tokens", m)).toBe(16);
    // Cohort: exactly one state is set, and exact media routing is on only when the workers agree.
    const states = f.get("kvedge_cohort_state")!.samples.filter((s) => s.labels["model"] === fleet.model && s.value === 1);
    expect(states).toHaveLength(1);
    expect(sampleValue(f, "kvedge_cohort_exact_media", m)).toBe(states[0]!.labels["state"] === "agree" ? 1 : 0);
    const digests = new Set(f.get("kvedge_worker_info")!.samples.map((s) => s.labels["contract_digest"]));
    if (states[0]!.labels["state"] === "agree") expect(digests.size).toBe(1);
  });

  it("kvedge status and workers show both workers", async () => {
    const st = await cli(["status"]);
    expect(st.code, st.err).toBe(0);
    expect(st.out).toContain(fleet.model);
    expect(st.out).toMatch(/workers\s+2\/2 up/);
    expect(st.out).toMatch(/requests\s+ok 6/);
    const ws = await cli(["workers"]);
    expect(ws.code, ws.err).toBe(0);
    for (const w of fleet.workers) expect(ws.out).toMatch(new RegExp(`^${w.id}\\s+up\\s+yes`, "m"));
  });

  it("kvedge explain shows the pick without sending the request or adding load", async () => {
    const file = join(dir, "req.json");
    writeFileSync(file, JSON.stringify(body(2)));
    const before = (await scrape()).families;
    const r = await cli(["explain", file, "--json"]);
    expect(r.code, r.err).toBe(0);
    const e = JSON.parse(r.out) as { routing: string; tokens: { count: number; head: { text: string }[] }; blocks: { total: number }; decision: { workerId: string; overlapBlocks: number; reason: string } };
    expect(e.routing).toBe("exact");
    expect(e.tokens.head[0]!.text).toBe("<|im_start|>");
    expect(e.blocks.total).toBe(Math.floor(e.tokens.count / 16));
    expect(e.decision.workerId).toBe(served.get(2));
    expect(e.decision.overlapBlocks).toBe(e.blocks.total);
    expect(e.decision.reason).toMatch(/longest cached prefix/);
    const text = await cli(["explain", file]);
    expect(text.out).toMatch(/decision\s+w\d: longest cached prefix/);
    const after = (await scrape()).families;
    const m = { model: fleet.model };
    expect(sampleValue(after, "kvedge_routing_overlap_blocks_count", m)).toBe(sampleValue(before, "kvedge_routing_overlap_blocks_count", m));
    expect(sampleValue(after, "kvedge_index_active_requests", m)).toBe(0);
  });

  it("kvedge replay sends a JSONL trace and reports hit rate and latency", async () => {
    const trace = join(dir, "trace.jsonl");
    const lines = [body(1), body(3), { body: body(1, { stream: true }) }, body(4), body(4)].map((b) => JSON.stringify(b));
    writeFileSync(trace, lines.join("\n") + "\n");
    const r = await cli(["replay", trace, "--json"]);
    expect(r.code, r.err).toBe(0);
    const s = JSON.parse(r.out) as { requests: number; ok: number; hitRate: number; latencyMs: { p50: number; p99: number }; ttftMs: { p50: number | null } };
    expect(s).toMatchObject({ requests: 5, ok: 5 });
    expect(s.hitRate).toBeGreaterThan(0.5);
    expect(s.latencyMs.p50).toBeGreaterThan(0);
    expect(s.latencyMs.p99).toBeGreaterThanOrEqual(s.latencyMs.p50);
    expect(s.ttftMs.p50).not.toBeNull();
    const text = await cli(["replay", trace]);
    expect(text.out).toMatch(/hit rate\s+\d+\.\d%/);
  });
});
