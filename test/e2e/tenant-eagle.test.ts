/**
 * End to end on the real local fleet (simulated SGLang workers + relays with per-worker keys +
 * the edge under Miniflare), API keys configured:
 *  - per_tenant (the default): two tenants with the same prompt never share blocks: the second
 *    tenant is predicted no overlap and the worker (whose radix cache namespaces by cache_salt, as
 *    SGLang's does) reports nothing cached; each tenant's own repeats hit;
 *  - shared: the second tenant reuses the first one's blocks (predicted and actually cached);
 *  - a LoRA adapter (`model: "<pool>:<adapter>"`) is its own namespace: never predicted to reuse
 *    the base model's blocks (SGLang's events carry no adapter; the edge salts adapter requests);
 *  - an EAGLE worker (`--speculative-algorithm EAGLE`: bigram radix keys, KV events with token pairs)
 *    gets repeats cached and routed like its plain neighbour;
 *  - `kvedge relay-key` issues (mode-0600 file), lists and revokes keys on the real edge;
 *  - `/admin/explain` explains in the namespace the request is routed in (the adapter from the body,
 *    the tenant from x-kvedge-tenant-key): it finds a tenant's or an adapter's blocks where the
 *    real requests put them, and none in the common namespace.
 * Predictions come from the index's receipts (/admin/stats), actual reuse from the worker's usage.
 */
import { mkdtempSync, readFileSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
// @ts-expect-error -- plain .mjs CLI without type declarations
import * as cliModule from "../../scripts/kvedge.mjs";
import { startFleet, type Fleet } from "../../scripts/local-fleet.ts";

const cli = cliModule as { run(argv: string[], env: Record<string, string>, io: { out(s: string): void; err(s: string): void }): Promise<number> };
const KEY_A = "tenant-a-key-0123456789";
const KEY_B = "tenant-b-key-0123456789";

function promptText(seed: number, words = 900): string {
  const vocab = ["router", "cache", "prefix", "token", "block", "worker", "tenant", "salt", "edge", "index", "eagle", "draft", "model", "prompt", "page", "event", "relay", "hash"];
  let x = (seed * 2654435761) >>> 0;
  const out: string[] = [`Tenant document ${seed}:`];
  for (let i = 0; i < words; i++) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    out.push(vocab[x % vocab.length]! + (x % 7 === 0 ? "." : ""));
  }
  return out.join(" ");
}

interface Receipt {
  receiptId: string;
  workerId: string;
  predictedOverlapBlocks: number;
  totalBlocks: number;
}

interface Answer {
  workerId: string;
  predictedBlocks: number;
  totalBlocks: number;
  promptTokens: number;
  cachedTokens: number;
}

async function receipts(fleet: Fleet): Promise<Receipt[]> {
  const s = (await fleet.admin(`/admin/stats?model=${encodeURIComponent(fleet.model)}`)) as { stats: { recentReceipts: Receipt[] } };
  return s.stats.recentReceipts;
}

/** One chat request with an API key; the routing prediction is read back from the index's receipt. */
async function ask(fleet: Fleet, key: string | null, text: string, model = fleet.model): Promise<Answer> {
  const seen = new Set((await receipts(fleet)).map((r) => r.receiptId));
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (key) headers.authorization = `Bearer ${key}`;
  const r = await fetch(`${fleet.edgeUrl}/v1/chat/completions`, {
    method: "POST",
    headers,
    body: JSON.stringify({ model, messages: [{ role: "user", content: text }], max_tokens: 4 }),
  });
  const json = (await r.json()) as { usage?: { prompt_tokens: number; prompt_tokens_details?: { cached_tokens?: number } } };
  expect(r.status, JSON.stringify(json)).toBe(200);
  // The settlement reaches the index after the answer (the edge's receipt outbox, up to RECEIPT_FLUSH_MS).
  let fresh: Receipt[] = [];
  for (const deadline = Date.now() + 10_000; fresh.length === 0 && Date.now() < deadline; ) {
    fresh = (await receipts(fleet)).filter((x) => !seen.has(x.receiptId));
    if (fresh.length === 0) await new Promise((done) => setTimeout(done, 10));
  }
  expect(fresh).toHaveLength(1);
  // Let the worker's KV events reach the index before the next request is routed.
  await fleet.waitForSync();
  return {
    workerId: fresh[0]!.workerId,
    predictedBlocks: fresh[0]!.predictedOverlapBlocks,
    totalBlocks: fresh[0]!.totalBlocks,
    promptTokens: json.usage!.prompt_tokens,
    cachedTokens: json.usage!.prompt_tokens_details?.cached_tokens ?? 0,
  };
}

interface Explained {
  namespace: { salted: boolean; tenant: boolean; adapter: string | null };
  decision: { workerId: string | null; overlapBlocks: number };
  blocks: { total: number };
  warnings: string[];
}

/** POST /admin/explain of the same request `ask` sends, as the tenant of `tenantKey` (header) or as the admin alone. */
async function explain(fleet: Fleet, tenantKey: string | null, text: string, model = fleet.model): Promise<{ status: number; body: Explained }> {
  const headers: Record<string, string> = { "content-type": "application/json", authorization: `Bearer ${fleet.adminToken}` };
  if (tenantKey) headers["x-kvedge-tenant-key"] = tenantKey;
  const r = await fetch(`${fleet.edgeUrl}/admin/explain`, { method: "POST", headers, body: JSON.stringify({ model, messages: [{ role: "user", content: text }], max_tokens: 4 }) });
  return { status: r.status, body: (await r.json()) as Explained };
}

const logs = process.env.KVEDGE_E2E_LOGS ? (l: string) => console.log(l) : undefined;

describe("per-tenant KV isolation and an EAGLE worker", () => {
  let fleet: Fleet;
  afterAll(async () => {
    await fleet?.stop();
  });

  it("starts: a plain worker and an EAGLE worker, API keys, per_tenant sharing (production's default; the local fleet's is shared)", async () => {
    const models = [{ id: "Qwen/Qwen3-VL-8B-Instruct", family: "qwen3_vl", templateId: "qwen3vl-instruct", blockSize: 16, loraAdapters: ["sql-x"] }];
    fleet = await startFleet({
      workers: 2,
      workerArgs: [[], ["--speculative-algorithm", "EAGLE"]],
      vars: { KVEDGE_API_KEYS: `${KEY_A},${KEY_B}`, KVEDGE_MODELS: JSON.stringify(models), KVEDGE_KV_SHARING: "per_tenant" },
      log: logs,
    });
    expect(fleet.workers).toHaveLength(2);
  });

  it("two tenants with the same prompt never share blocks; each tenant's repeats hit", async () => {
    const p = promptText(1);
    const a1 = await ask(fleet, KEY_A, p);
    expect(a1.promptTokens).toBeGreaterThan(800);
    const a2 = await ask(fleet, KEY_A, p);
    expect(a2.workerId).toBe(a1.workerId);
    expect(a2.predictedBlocks).toBeGreaterThan(0.8 * a2.totalBlocks);
    expect(a2.cachedTokens / a2.promptTokens).toBeGreaterThanOrEqual(0.9);

    // Tenant B: nothing predicted, nothing reused, on whichever worker it lands.
    const b1 = await ask(fleet, KEY_B, p);
    expect(b1.predictedBlocks).toBe(0);
    expect(b1.cachedTokens).toBe(0);
    const b2 = await ask(fleet, KEY_B, p);
    expect(b2.workerId).toBe(b1.workerId);
    expect(b2.cachedTokens / b2.promptTokens).toBeGreaterThanOrEqual(0.9);
    // A's blocks are still A's.
    const a3 = await ask(fleet, KEY_A, p);
    expect(a3.workerId).toBe(a1.workerId);
    expect(a3.cachedTokens / a3.promptTokens).toBeGreaterThanOrEqual(0.9);
    // explain routes in the namespace the real request used: as A it finds A's blocks where A's
    // requests went; as the admin alone (the pool's common namespace) it finds none, and says why.
    const asA = await explain(fleet, KEY_A, p);
    expect(asA.status).toBe(200);
    expect(asA.body.namespace).toMatchObject({ salted: true, tenant: true, adapter: null });
    expect(asA.body.decision.workerId).toBe(a1.workerId);
    expect(asA.body.decision.overlapBlocks).toBeGreaterThan(0.8 * asA.body.blocks.total);
    const asAdmin = await explain(fleet, null, p);
    expect(asAdmin.body.namespace.salted).toBe(false);
    expect(asAdmin.body.decision.overlapBlocks).toBe(0);
    expect(asAdmin.body.warnings.join(" ")).toMatch(/common namespace.*x-kvedge-tenant-key/);
    expect((await explain(fleet, "not-a-configured-key", p)).status).toBe(400);
    const ratio = (x: Answer) => (x.cachedTokens / x.promptTokens).toFixed(3);
    console.log(
      `per_tenant: ${a1.promptTokens} prompt tokens; A repeat cached ${ratio(a2)} (predicted ${a2.predictedBlocks}/${a2.totalBlocks} blocks); ` +
        `B first cached ${ratio(b1)} (predicted ${b1.predictedBlocks}); B repeat ${ratio(b2)}; A again ${ratio(a3)}`,
    );
  });

  it("a LoRA adapter's request never reuses the base model's blocks, nor the reverse; its repeats hit", async () => {
    const p = promptText(3);
    const base = await ask(fleet, KEY_A, p);
    const lora = `${fleet.model}:sql-x`;
    const x1 = await ask(fleet, KEY_A, p, lora);
    expect(x1.predictedBlocks).toBe(0);
    expect(x1.cachedTokens).toBe(0);
    const x2 = await ask(fleet, KEY_A, p, lora);
    expect(x2.workerId).toBe(x1.workerId);
    // explain of the adapter's request finds the adapter's blocks, in its own namespace.
    const explained = await explain(fleet, KEY_A, p, lora);
    expect(explained.body.namespace).toMatchObject({ salted: true, tenant: true, adapter: "sql-x" });
    expect(explained.body.decision.workerId).toBe(x1.workerId);
    expect(explained.body.decision.overlapBlocks).toBeGreaterThan(0.8 * explained.body.blocks.total);
    expect(x2.cachedTokens / x2.promptTokens).toBeGreaterThanOrEqual(0.9);
    const base2 = await ask(fleet, KEY_A, p);
    expect(base2.workerId).toBe(base.workerId);
    expect(base2.cachedTokens / base2.promptTokens).toBeGreaterThanOrEqual(0.9);
    // The reverse: the adapter first, then the base model with the same prompt.
    const q = promptText(4);
    await ask(fleet, KEY_A, q, lora);
    const qBase = await ask(fleet, KEY_A, q);
    expect(qBase.predictedBlocks).toBe(0);
    expect(qBase.cachedTokens).toBe(0);
    // The adapter is listed, by the name a request selects it with.
    const listed = (await (await fetch(`${fleet.edgeUrl}/v1/models`, { headers: { authorization: `Bearer ${KEY_A}` } })).json()) as { data: { id: string; parent?: string }[] };
    expect(listed.data).toContainEqual(expect.objectContaining({ id: lora, parent: fleet.model }));
    // An adapter the pool does not list is refused.
    const r = await fetch(`${fleet.edgeUrl}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${KEY_A}` },
      body: JSON.stringify({ model: `${fleet.model}:nope`, messages: [{ role: "user", content: "x" }] }),
    });
    expect(r.status).toBe(404);
  });

  it("the EAGLE worker (bigram KV events) gets repeats cached and routed like the plain one", async () => {
    const eagle = fleet.workers[1]!.id;
    const plain = fleet.workers[0]!.id;
    const first = new Map<number, string>();
    // New prompts go to the idle worker with the least recurring load (the earlier tests' repeats
    // leave some), so which one takes them is not left to chance: the plain worker is drained while
    // the first five are sent (they must go to the EAGLE worker), then serves again for the rest.
    const workerAction = async (id: string, action: "drain" | "undrain") => {
      const res = await fetch(`${fleet.edgeUrl}/admin/workers/${id}/${action}?model=${encodeURIComponent(fleet.model)}`, { method: "POST", headers: { authorization: `Bearer ${fleet.adminToken}` } });
      expect(res.status).toBe(200);
      await res.arrayBuffer();
    };
    await workerAction(plain, "drain");
    try {
      for (let i = 0; i < 5; i++) {
        const r = await ask(fleet, KEY_A, promptText(100 + i, 600));
        expect(r.workerId, `prompt ${i} while ${plain} drains`).toBe(eagle);
        first.set(i, r.workerId);
      }
    } finally {
      await workerAction(plain, "undrain");
    }
    for (let i = 5; i < 10; i++) first.set(i, (await ask(fleet, KEY_A, promptText(100 + i, 600))).workerId);
    // The repeats return to their first worker, the EAGLE one included, with their prefix cached.
    const onEagle: number[] = [];
    for (const [i, worker] of first) {
      const r = await ask(fleet, KEY_A, promptText(100 + i, 600));
      expect(r.workerId, `prompt ${i}`).toBe(worker);
      expect(r.predictedBlocks, `prompt ${i}`).toBeGreaterThan(0.8 * r.totalBlocks);
      expect(r.cachedTokens / r.promptTokens, `prompt ${i}`).toBeGreaterThanOrEqual(0.9);
      if (r.workerId === eagle) onEagle.push(i);
    }
    console.log(`EAGLE: ${onEagle.length}/${first.size} prompts on the EAGLE worker; repeats all returned to their first worker with ≥ 0.9 cached`);
    expect(onEagle.length).toBeGreaterThanOrEqual(5);
    const workers = (await fleet.admin(`/admin/workers?model=${encodeURIComponent(fleet.model)}`)) as { workers: { workerId: string; blocks: number }[] };
    expect(workers.workers.find((w) => w.workerId === eagle)!.blocks).toBeGreaterThan(0);
  });

  it("issue (to a mode-0600 file, never echoed), list, revoke", async () => {
    const out: string[] = [];
    const io = { out: (x: string) => out.push(x), err: (x: string) => out.push(x) };
    const env = { KVEDGE_URL: fleet.edgeUrl, KVEDGE_ADMIN_TOKEN: fleet.adminToken };
    const file = join(mkdtempSync(join(tmpdir(), "kvedge-key-")), "w9.key");
    expect(await cli.run(["relay-key", "issue", "--worker", "w9", "--worker-url", "https://w9.example:30000", "--out", file], env, io)).toBe(0);
    const cred = readFileSync(file, "utf8").trim();
    expect(cred).toMatch(/^kvr1\.[A-Za-z0-9_-]{22}\.[0-9a-f]{64}$/);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(out.join("\n")).not.toContain(cred.split(".")[2]);
    const keyId = cred.split(".")[1]!;
    out.length = 0;
    expect(await cli.run(["relay-key", "list"], env, io)).toBe(0);
    expect(out.join("\n")).toMatch(new RegExp(`${keyId}\\s+w9\\s+https://w9.example:30000`));
    out.length = 0;
    expect(await cli.run(["relay-key", "revoke", keyId], env, io)).toBe(0);
    expect(out.join("\n")).toMatch(/revoked .* \(worker w9\); 0 relay socket\(s\) closed/);
    // ftp: is never bound (the fleet's development flag allows plain http for its simulators, nothing else).
    out.length = 0;
    expect(await cli.run(["relay-key", "issue", "--worker", "w9", "--worker-url", "ftp://w9.example/"], env, io)).toBe(1);
    expect(out.join("\n")).toMatch(/HTTP 400: worker URL must be https/);
  });
});

describe("shared KV between tenants", () => {
  let fleet: Fleet;
  afterAll(async () => {
    await fleet?.stop();
  });

  it("a second tenant reuses the first one's blocks under KVEDGE_KV_SHARING=shared", async () => {
    fleet = await startFleet({ workers: 2, vars: { KVEDGE_API_KEYS: `${KEY_A},${KEY_B}`, KVEDGE_KV_SHARING: "shared" }, log: logs });
    const p = promptText(2);
    const a1 = await ask(fleet, KEY_A, p);
    const b1 = await ask(fleet, KEY_B, p);
    expect(b1.workerId).toBe(a1.workerId);
    expect(b1.predictedBlocks).toBeGreaterThan(0.8 * b1.totalBlocks);
    expect(b1.cachedTokens / b1.promptTokens).toBeGreaterThanOrEqual(0.9);
    console.log(`shared: B's first request cached ${(b1.cachedTokens / b1.promptTokens).toFixed(3)} of A's prefix (predicted ${b1.predictedBlocks}/${b1.totalBlocks} blocks)`);
  });
});
