import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
// @ts-expect-error -- plain .mjs CLI without type declarations
import * as cli from "../../../scripts/kvedge.mjs";

const { parseCli, parseTrace, percentile, summarizeReplay, usageFromSse, formatExplain, renderTokens, run, UsageError } = cli as Record<string, any>;

function capture() {
  const out: string[] = [];
  const err: string[] = [];
  return { io: { out: (s: string) => out.push(s), err: (s: string) => err.push(s) }, out, err };
}

describe("kvedge CLI: arguments", () => {
  it("reads flags and env, flags win", () => {
    const o = parseCli(["workers", "--model", "m", "--url", "http://e:1/"], { KVEDGE_URL: "http://ignored", KVEDGE_ADMIN_TOKEN: "t" });
    expect(o).toMatchObject({ command: "workers", model: "m", url: "http://e:1", token: "t" });
    expect(parseCli(["replay", "t.jsonl", "--concurrency", "4", "--limit", "10"], {})).toMatchObject({ command: "replay", file: "t.jsonl", concurrency: 4, limit: 10 });
  });

  it("refuses missing commands, files, tokens and bad numbers", () => {
    for (const argv of [[], ["nope"], ["explain"], ["status", "extra"], ["status"], ["replay", "x", "--concurrency", "0"], ["status", "--frob"]])
      expect(() => parseCli(argv, {}), argv.join(" ")).toThrow(UsageError);
  });

  it("secrets never as flags (a command line is visible to other local users): --token and --api-key are refused, naming the variable", () => {
    expect(() => parseCli(["status", "--token", "t"], {})).toThrow(/--token is not accepted.*KVEDGE_ADMIN_TOKEN/);
    expect(() => parseCli(["replay", "t.jsonl", "--api-key", "k"], {})).toThrow(/--api-key is not accepted.*KVEDGE_API_KEY/);
    expect(parseCli(["replay", "t.jsonl"], { KVEDGE_API_KEY: "k" }).apiKey).toBe("k");
  });

  it("exit codes: usage 2, help 0, unreachable edge 1", async () => {
    const c = capture();
    expect(await run(["bogus"], {}, c.io)).toBe(2);
    expect(c.err.join("\n")).toMatch(/unknown command bogus[\s\S]*usage: kvedge/);
    expect(await run(["--help"], {}, capture().io)).toBe(0);
    const d = capture();
    expect(await run(["status", "--url", "http://127.0.0.1:9"], { KVEDGE_ADMIN_TOKEN: "t" }, d.io)).toBe(1);
    expect(d.err.join("")).toMatch(/^kvedge status: /);
  });
});

describe("kvedge CLI: replay helpers", () => {
  it("parses JSONL traces in both shapes and names the bad line", () => {
    const dir = mkdtempSync(join(tmpdir(), "kvedge-cli-"));
    const body = { model: "m", messages: [{ role: "user", content: "hi" }] };
    const text = [JSON.stringify(body), "", "// comment", JSON.stringify({ body }), JSON.stringify({ request: body })].join("\n");
    writeFileSync(join(dir, "t.jsonl"), text);
    expect(parseTrace(text)).toHaveLength(3);
    expect(() => parseTrace('{"model":"m"}\n')).toThrow(/line 1: no chat request/);
    expect(() => parseTrace("ok\n{}")).toThrow(/line 1: not JSON/);
  });

  it("nearest-rank percentiles", () => {
    const xs = Array.from({ length: 100 }, (_, i) => i + 1);
    expect([percentile(xs, 50), percentile(xs, 90), percentile(xs, 99), percentile(xs, 100)]).toEqual([50, 90, 99, 100]);
    expect(percentile([], 50)).toBeNull();
    expect(percentile([7], 99)).toBe(7);
  });

  it("summarises hit rate, overlap, workers and errors", () => {
    const ok = (w: string, prompt: number, cached: number, ms: number) => ({
      status: 200, latencyMs: ms, ttftMs: null, promptTokens: prompt, cachedTokens: cached, worker: w, overlapBlocks: cached / 16, totalBlocks: prompt / 16, routing: "exact",
    });
    const s = summarizeReplay([ok("w1", 160, 0, 10), ok("w1", 160, 160, 5), ok("w2", 320, 160, 20), { status: 503, latencyMs: 1, ttftMs: null, promptTokens: null, cachedTokens: null, worker: null, overlapBlocks: null, totalBlocks: null, routing: null }]);
    expect(s).toMatchObject({ requests: 4, ok: 3, errors: { 503: 1 }, promptTokens: 640, cachedTokens: 320, workers: { w1: 2, w2: 1 }, routing: { exact: 3 } });
    expect(s.hitRate).toBe(0.5);
    expect(s.predictedOverlap).toBe(0.5);
    expect(s.latencyMs).toEqual({ p50: 10, p90: 20, p99: 20, max: 20 });
  });

  it("finds usage in an SSE stream", () => {
    const sse = 'data: {"choices":[]}\n\ndata: {"choices":[],"usage":{"prompt_tokens":5}}\n\ndata: [DONE]\n\n';
    expect(usageFromSse(sse)).toEqual({ prompt_tokens: 5 });
    expect(usageFromSse("data: nope\n\n")).toBeNull();
  });
});

describe("kvedge CLI: explain rendering", () => {
  it("shows the token view, blocks, reason and candidates", () => {
    const text = formatExplain({
      model: "m", routing: "text_prefix", fallbackReason: "audio", eligibility: "text-prefix fallback (audio)",
      prompt: { chars: 10, mediaItems: ["audio"], mmHashes: null },
      tokens: { count: 40, routed: 32, head: [{ id: 1, text: "<|im_start|>" }, { id: 2, text: "user\n" }], tail: [{ id: 3, text: "end" }] },
      blocks: { blockSize: 16, total: 2, partialTailTokens: null, first: ["00000000000000aa", "00000000000000bb"], last: [] },
      decision: { workerId: "w1", overlapBlocks: 2, predictedCachedTokens: 32, tiedWith: [], reason: "longest cached prefix 2/2 blocks" },
      candidates: [{ workerId: "w1", overlapBlocks: 2, cost: 1.5, activePrefillTokens: 0, activeDecodeBlocks: 0 }],
      warnings: ["x"],
    });
    expect(text).toContain("routing      text_prefix (fallback: audio)");
    expect(text).toContain("first      <|im_start|>user\\n");
    expect(text).toContain("decision     w1: longest cached prefix 2/2 blocks");
    expect(text).toMatch(/w1\s+2\s+1\.50/);
    expect(text).toContain("warning: x");
    expect(renderTokens([{ id: 1, text: 'a"\t' }])).toBe('a\\"\\t');
  });
});

describe("kvedge CLI: explain --tokens", () => {
  it("asks for the whole routed sequence and prints it as one JSON line, with spans and block hashes", async () => {
    const { formatRouted } = cli as Record<string, any>;
    expect(parseCli(["explain", "--tokens", "r.json"], { KVEDGE_ADMIN_TOKEN: "t" }).tokens).toBe(true);
    expect(() => parseCli(["status", "--tokens"], { KVEDGE_ADMIN_TOKEN: "t" })).toThrow(/explain option/);
    const routed = { ids: [151644, 872, 1000007, 1000007], items: [{ kind: "image", start: 2, end: 4, padValue: 1000007, mmHash: "0000000000000007" }], blockHashes: ["00000000000000aa"] };
    const text = formatRouted(routed);
    expect(text.split("\n")[1]).toBe("[151644,872,1000007,1000007]");
    expect(text).toContain("#0 image [2, 4) pad 1000007 mm_hash 0000000000000007");
    expect(text).toContain("block hashes 1\n  00000000000000aa");
    const paths: string[] = [];
    const dir = mkdtempSync(join(tmpdir(), "kvedge-cli-tokens-"));
    try {
      writeFileSync(join(dir, "r.json"), "{}");
      const fetchImpl = async (url: string) => {
        paths.push(new URL(url).pathname + new URL(url).search);
        return new Response(JSON.stringify({ routed }), { status: 200 });
      };
      const out: string[] = [];
      const code = await run(["explain", "--tokens", join(dir, "r.json"), "--json"], { KVEDGE_ADMIN_TOKEN: "t" }, { out: (s: string) => out.push(s), err: () => {} }, fetchImpl);
      expect(code).toBe(0);
      expect(paths).toEqual(["/admin/explain?tokens=all"]);
      expect(JSON.parse(out[0]!).routed.ids).toEqual(routed.ids);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("kvedge CLI: explain --as-tenant", () => {
  it("sends the tenant's key in a header (never the URL) and prints the namespace the edge routed in", async () => {
    expect(() => parseCli(["explain", "--as-tenant", "r.json"], { KVEDGE_ADMIN_TOKEN: "t" })).toThrow(/needs the tenant's key/);
    expect(() => parseCli(["status", "--as-tenant"], { KVEDGE_ADMIN_TOKEN: "t", KVEDGE_API_KEY: "k" })).toThrow(/explain option/);
    const seen: { url: string; tenant: string | null; client?: string | null }[] = [];
    const dir = mkdtempSync(join(tmpdir(), "kvedge-cli-tenant-"));
    try {
      writeFileSync(join(dir, "r.json"), "{}");
      const answer = {
        model: "m", routing: "exact", fallbackReason: null, eligibility: "exact",
        namespace: { salted: true, tenant: true, adapter: "sql-x", sharing: "per_tenant" },
        prompt: { chars: 1, mediaItems: [], mmHashes: null },
        tokens: { count: 16, routed: 16, head: [], tail: [] },
        blocks: { blockSize: 16, total: 1, partialTailTokens: 0, first: ["00000000000000aa"], last: [] },
        decision: { workerId: "w1", overlapBlocks: 1, predictedCachedTokens: 16, tiedWith: [], reason: "r" },
        candidates: [],
        warnings: [],
      };
      const fetchImpl = async (url: string, init: RequestInit) => {
        const h = new Headers(init.headers);
        seen.push({ url, tenant: h.get("x-kvedge-tenant-key"), client: h.get("x-kvedge-client-ip") });
        return new Response(JSON.stringify(answer), { status: 200 });
      };
      const out: string[] = [];
      const io = { out: (x: string) => out.push(x), err: (x: string) => out.push(x) };
      expect(await run(["explain", "--as-tenant", join(dir, "r.json")], { KVEDGE_ADMIN_TOKEN: "t", KVEDGE_API_KEY: "tenant-key-1" }, io, fetchImpl)).toBe(0);
      expect(seen).toEqual([{ url: "http://127.0.0.1:8787/admin/explain", tenant: "tenant-key-1", client: null }]);
      expect(out.join("\n")).toContain("namespace    the tenant's own, adapter sql-x (salted; sharing per_tenant)");
      // Without --as-tenant the key stays home.
      expect(await run(["explain", join(dir, "r.json")], { KVEDGE_ADMIN_TOKEN: "t", KVEDGE_API_KEY: "tenant-key-1" }, io, fetchImpl)).toBe(0);
      expect(seen[1]!.tenant).toBeNull();
      expect(seen[1]!.client).toBeNull();
      // A keyless caller named by address: its network's namespace.
      answer.namespace = { salted: true, tenant: false, network: true, adapter: null, sharing: "per_tenant" } as never;
      expect(await run(["explain", "--as-client", "203.0.113.7", join(dir, "r.json")], { KVEDGE_ADMIN_TOKEN: "t" }, io, fetchImpl)).toBe(0);
      expect(seen[2]).toEqual({ url: "http://127.0.0.1:8787/admin/explain", tenant: null, client: "203.0.113.7" });
      expect(out.join("\n")).toContain("namespace    the client network's own (salted; sharing per_tenant)");
      expect(() => parseCli(["status", "--as-client", "203.0.113.7"], { KVEDGE_ADMIN_TOKEN: "t" })).toThrow(/explain option/);
      expect(() => parseCli(["explain", "--as-client", "203.0.113.7", "--as-tenant", "r.json"], { KVEDGE_ADMIN_TOKEN: "t", KVEDGE_API_KEY: "k" })).toThrow(/give one/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("kvedge CLI: workers rendering", () => {
  it("shows a sharded pool's per-shard block split, and plain counts otherwise", () => {
    const { formatWorkers } = cli as Record<string, any>;
    const base = { workerId: "w1", status: "up", synced: true, activeRequests: 0, activePrefillTokens: 0, activeDecodeBlocks: 0, kvEvents: true, contractDigest: null, url: "http://w1" };
    expect(formatWorkers("m", [{ ...base, blocks: 315, blocksPerShard: [90, 135, 90] }])).toContain("315 (90/135/90)");
    const plain = formatWorkers("m", [{ ...base, blocks: 12 }]);
    expect(plain).toMatch(/yes\s+12\s+0/);
    expect(plain).not.toContain("(");
    // A worker with events whose view may be wrong (relay lost history, index full) says so.
    const approx = formatWorkers("m", [{ ...base, synced: false, approximate: true, blocks: 7 }]);
    expect(approx).toMatch(/no\s+7\s.*approx!/);
  });
});
