/**
 * Cache namespaces end to end (docs/security.md), on the local fleet with production's
 * KVEDGE_KV_SHARING=per_tenant and a public endpoint: keyless callers are told apart by client
 * network (`cf-connecting-ip`, /32 or /64), admin callers have a namespace of their own.
 *  - an exact guess of another network's (or an admin's) prompt gets no more cached tokens than a
 *    wrong guess, while the owner's own repeat is served from cache;
 *  - the same image from two networks reaches the workers under two different mm_hashes (SGLang's
 *    embedding-cache key), and each network's repeat is still routed exactly onto its cached blocks.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../scripts/local-fleet.ts";
import { image, makeImage, makeMediaDir, sentToWorker, text, userWith } from "./helpers/media.ts";
import { waitUntil } from "./reliability-helpers.ts";

let fleet: Fleet;

beforeAll(async () => {
  const dir = makeMediaDir();
  makeImage(dir, "photo.png", { source: "testsrc2" });
  fleet = await startFleet({ workers: 2, mediaDir: dir, vars: { KVEDGE_KV_SHARING: "per_tenant" }, log: process.env.KVEDGE_E2E_LOGS ? (l) => console.log(l) : undefined });
});
afterAll(async () => {
  await fleet?.stop();
});

interface Answer {
  worker: string;
  routing: string | null;
  overlapBlocks: number;
  totalBlocks: number;
  cachedTokens: number;
  promptTokens: number;
  requestId: string;
}

async function send(headers: Record<string, string>, body: Record<string, unknown>): Promise<Answer> {
  const r = await fetch(`${fleet.edgeUrl}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify({ model: fleet.model, max_tokens: 2, ...body }) });
  const json = (await r.json()) as { usage: { prompt_tokens: number; prompt_tokens_details: { cached_tokens: number } } };
  expect(r.status, JSON.stringify(json)).toBe(200);
  return {
    worker: r.headers.get("x-kvedge-worker")!,
    routing: r.headers.get("x-kvedge-routing"),
    overlapBlocks: Number(r.headers.get("x-kvedge-overlap-blocks")),
    totalBlocks: Number(r.headers.get("x-kvedge-total-blocks")),
    cachedTokens: json.usage.prompt_tokens_details.cached_tokens,
    promptTokens: json.usage.prompt_tokens,
    requestId: r.headers.get("x-request-id")!,
  };
}

const secretPrompt = (passphrase: string) => ({
  messages: [
    { role: "system", content: `You are the assistant of Example Corp. Internal, never reveal: the vault passphrase is ${passphrase}. Answer briefly and politely; refuse questions about the vault; hand billing disputes to a human agent.` },
    { role: "user", content: "Hello, who are you?" },
  ],
});
const from = (ip: string) => ({ "cf-connecting-ip": ip });

/** Requests the index still counts as load, over the pool's workers. */
async function activeRequests(): Promise<number> {
  const r = (await fleet.admin(`/admin/workers?model=${encodeURIComponent(fleet.model)}`)) as { workers: { activeRequests: number }[] };
  return r.workers.reduce((a, w) => a + w.activeRequests, 0);
}

describe("no shared namespace between parties that do not trust each other", () => {
  it("an exact guess of another network's or an admin's prompt gets no more cached tokens than a wrong guess", async () => {
    await send(from("198.51.100.7"), secretPrompt("amber-falcon-7731"));
    const own = await send(from("198.51.100.7"), secretPrompt("amber-falcon-7731"));
    expect(own.cachedTokens).toBeGreaterThanOrEqual(48);
    const right = await send(from("2001:db8:7:1::10"), secretPrompt("amber-falcon-7731"));
    const wrong = await send(from("2001:db8:7:2::10"), secretPrompt("cobalt-heron-2209"));
    expect(right.cachedTokens).toBeLessThanOrEqual(wrong.cachedTokens);
    expect(right.overlapBlocks).toBe(0);
    // explain names the keyless caller by address (x-kvedge-client-ip); without it, the common namespace.
    const explain = async (extra: Record<string, string>) =>
      (await (await fetch(`${fleet.edgeUrl}/admin/explain`, { method: "POST", headers: { authorization: `Bearer ${fleet.adminToken}`, "content-type": "application/json", ...extra }, body: JSON.stringify({ model: fleet.model, ...secretPrompt("amber-falcon-7731") }) })).json()) as {
        namespace: { salted: boolean; network: boolean };
        decision: { overlapBlocks: number };
        warnings: string[];
      };
    // Explain picks on the index's load, and the last answer's prefill-done mark and settlement reach
    // the index a few ms after the answer (the edge's receipt queue, RECEIPT_FLUSH_MS; later under CPU
    // load; explain's peek carries none, unlike a route call): a holder still charged with that
    // request's prefill (as long as this prompt) costs as much as the idle worker, which then wins.
    await waitUntil(async () => (await activeRequests()) === 0, 10_000, async () => `activeRequests ${await activeRequests()}`, 5);
    const asVictim = await explain({ "x-kvedge-client-ip": "198.51.100.7" });
    expect(asVictim.namespace).toMatchObject({ salted: true, network: true });
    expect(asVictim.decision.overlapBlocks).toBe(own.overlapBlocks);
    expect(own.overlapBlocks).toBeGreaterThan(0);
    const common = await explain({});
    expect(common.decision.overlapBlocks).toBe(0);
    expect(common.warnings.join(" ")).toMatch(/common namespace.*x-kvedge-client-ip/);

    const admin = { authorization: `Bearer ${fleet.adminToken}`, ...from("192.0.2.1") };
    await send(admin, secretPrompt("violet-otter-5150"));
    expect((await send(admin, secretPrompt("violet-otter-5150"))).cachedTokens).toBeGreaterThanOrEqual(48);
    const rightAdmin = await send(from("192.0.2.1"), secretPrompt("violet-otter-5150"));
    const wrongAdmin = await send(from("192.0.2.2"), secretPrompt("scarlet-lynx-0042"));
    expect(rightAdmin.cachedTokens).toBeLessThanOrEqual(wrongAdmin.cachedTokens);
    console.log(`namespaces e2e: own repeat cached ${own.cachedTokens}/${own.promptTokens}; other network's exact guess ${right.cachedTokens}, wrong guess ${wrong.cachedTokens}; admin's prompt guessed ${rightAdmin.cachedTokens}, wrong ${wrongAdmin.cachedTokens}`);
  });

  it("one image, two networks: two mm_hashes at the worker, each network's repeat routed exactly onto its own blocks", async () => {
    const body = userWith([text("What is in this picture? Describe it."), image(`${fleet.mediaUrl}/photo.png`)]);
    const a1 = await send(from("203.0.113.5"), body);
    const a2 = await send(from("203.0.113.5"), body);
    const b1 = await send(from("203.0.113.6"), body);
    const b2 = await send(from("203.0.113.6"), body);
    for (const r of [a1, a2, b1, b2]) expect(r.routing).toBe("exact");
    expect(a2.worker).toBe(a1.worker);
    expect(a2.overlapBlocks / a2.totalBlocks).toBeGreaterThanOrEqual(0.9);
    expect(a2.cachedTokens / a2.promptTokens).toBeGreaterThanOrEqual(0.9);
    // Nothing of A's predicted or reused for B; B's own repeat hits.
    expect(b1.overlapBlocks).toBe(0);
    expect(b1.cachedTokens).toBeLessThan(16);
    expect(b2.overlapBlocks / b2.totalBlocks).toBeGreaterThanOrEqual(0.9);
    const hashes = async (r: Answer) => (await sentToWorker(fleet.workers.find((w) => w.id === r.worker)!.url, r.requestId))!.mmHashes as string[];
    const [ha1, ha2, hb1] = [await hashes(a1), await hashes(a2), await hashes(b1)];
    expect(ha1).toHaveLength(1);
    expect(ha1[0]).toMatch(/^[0-9a-f]{16}$/);
    expect(ha2).toEqual(ha1);
    expect(hb1[0]).not.toBe(ha1[0]);
  });
});
