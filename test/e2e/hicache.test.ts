/**
 * HiCache tiers on the real local fleet (simulated SGLang workers with `--enable-hierarchical-cache`,
 * real relays over ZMQ, the edge under workerd): a conversation whose prefix was evicted from its
 * worker's device tier but kept in host memory is still routed to that worker and reported cached —
 * the relay keeps the host tier (BlockStored/BlockRemoved with medium CPU_PINNED), the index credits
 * it, and the simulator loads it back (counted in cached tokens and in its prefill time). Both
 * workers share one `file` storage backend (L3): a prefix either wrote is credited to both, marked
 * approximate, and the other worker really serves it from storage.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../scripts/local-fleet.ts";
import { direct, sleep, trueLocalHashes, waitParity, waitUntil, words } from "./reliability-helpers.ts";
import { PendingRoutes } from "../../src/block-index/pending-routes.ts";

let fleet: Fleet;
const figures: Record<string, unknown> = {};
/** Small device tier (a few prompts), host memory 8× larger. */
const PENDING_TTL_MS = new PendingRoutes().ttlMs;
const hicacheArgs = ["--enable-hierarchical-cache", "--hicache-ratio", "8", "--hicache-storage-backend", "file"];
/** SGLang's file backend directory, shared by both workers (they inherit the environment). */
const storageDir = mkdtempSync(join(tmpdir(), "kvedge-hicache-"));

beforeAll(async () => {
  process.env.SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR = storageDir;
  fleet = await startFleet({
    workers: 2,
    capacityTokens: 1_500,
    workerArgs: [hicacheArgs, hicacheArgs],
    vars: { KVEDGE_ROUTING: JSON.stringify({ profileTtlMs: 0 }) },
  });
});
afterAll(async () => {
  await fleet?.stop();
  delete process.env.SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR;
  rmSync(storageDir, { recursive: true, force: true });
  console.log(`hicache: ${JSON.stringify(figures)}`);
});

interface Turn {
  status: number;
  worker: string | null;
  overlapBlocks: number;
  hostBlocks: number;
  cachedTokens: number;
  content: string;
}

async function send(messages: { role: string; content: string }[]): Promise<Turn> {
  const r = await fetch(`${fleet.edgeUrl}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: fleet.model, messages, max_tokens: 8 }),
  });
  const json = (await r.json()) as { choices?: { message: { content: string } }[]; usage?: { prompt_tokens_details?: { cached_tokens?: number } } };
  return {
    status: r.status,
    worker: r.headers.get("x-kvedge-worker"),
    overlapBlocks: Number(r.headers.get("x-kvedge-overlap-blocks") ?? "0"),
    hostBlocks: Number(r.headers.get("x-kvedge-host-blocks") ?? "0"),
    cachedTokens: json.usage?.prompt_tokens_details?.cached_tokens ?? 0,
    content: json.choices?.[0]?.message.content ?? "",
  };
}

describe("HiCache: a prefix evicted from the GPU but kept in host memory", () => {
  it("is routed to its worker, credited from the host tier and reported cached (load-back)", async () => {
    const conversations = [1, 2, 3];
    for (const seed of conversations) {
      const user = words(seed, 300);
      const w0 = fleet.workers.map((x) => x.url);
      const before = new Map(await Promise.all(w0.map(async (u) => [u, await trueLocalHashes(u)] as const)));
      const first = await send([{ role: "user", content: user }]);
      const routedBy = Date.now();
      expect(first.status).toBe(200);
      const w = fleet.workers.find((x) => x.id === first.worker)!;
      const onGpu = (await trueLocalHashes(w.url)).filter((h) => !before.get(w.url)!.includes(h));
      expect(onGpu.length).toBeGreaterThan(10);
      // Other prompts straight to that worker push the conversation out of its small device tier.
      let left = onGpu.length;
      for (let k = 0; k < 30 && left > 0; k++) {
        await direct(w, fleet.model, words(1000 + seed * 100 + k, 300));
        const after = await trueLocalHashes(w.url);
        left = onGpu.filter((h) => after.includes(h)).length;
      }
      expect(left, "conversation left the device tier").toBe(0);
      // The next turn, once the index mirrors the worker's device tier again (evictions applied).
      await waitParity(fleet, fleet.workers.indexOf(w));
      // A route counts as cached on its worker's GPU for PENDING_TTL_MS (events may lag): past it.
      await sleep(Math.max(0, routedBy + PENDING_TTL_MS + 100 - Date.now()));
      const t = await send([
        { role: "user", content: user },
        { role: "assistant", content: first.content },
        { role: "user", content: `Go on (${seed}).` },
      ]);
      expect(t.status).toBe(200);
      expect(t.hostBlocks).toBeGreaterThan(0);
      expect(t.worker).toBe(first.worker);
      expect(t.overlapBlocks).toBeGreaterThanOrEqual(t.hostBlocks);
      // The worker loaded the host pages back: they count as cached tokens.
      expect(t.cachedTokens).toBeGreaterThanOrEqual(t.hostBlocks * 16);
      figures[`conversation_${seed}`] = { worker: t.worker, overlapBlocks: t.overlapBlocks, hostBlocks: t.hostBlocks, cachedTokens: t.cachedTokens };
    }
  });
});

interface Explained {
  decision: { workerId: string; overlapBlocks: number; tiers?: { gpuBlocks: number; hostBlocks: number; storageBlocks: number; storageApproximate: boolean } };
  candidates: { workerId: string; overlapBlocks: number; hostBlocks?: number; storageBlocks?: number }[];
  /** With `?tokens=all`: the request's block hashes as the index keys them. */
  routed?: { blockHashes: string[] };
}

async function explain(messages: { role: string; content: string }[], allTokens = false): Promise<Explained> {
  const r = await fetch(`${fleet.edgeUrl}/admin/explain${allTokens ? "?tokens=all" : ""}`, {
    method: "POST",
    headers: { authorization: `Bearer ${fleet.adminToken}`, "content-type": "application/json" },
    body: JSON.stringify({ model: fleet.model, messages }),
  });
  return (await r.json()) as Explained;
}

/**
 * The request's leading blocks the writer holds on its GPU, from the engine itself: the simulator
 * caches a finished request before it answers, and write_through copies every GPU page to host
 * memory and the shared storage, so this is exactly what the index's storage view will hold of the
 * request once the writer's host-tier events have all arrived (they come in more than one batch).
 */
async function writerPrefixBlocks(writerUrl: string, messages: { role: string; content: string }[]): Promise<number> {
  const held = new Set(await trueLocalHashes(writerUrl));
  const hashes = (await explain(messages, true)).routed!.blockHashes;
  let n = 0;
  while (n < hashes.length && held.has(hashes[n]!)) n++;
  return n;
}

/** Explains `messages` until the storage view credits `expected` blocks to `workerId` (bounded: 10 s). */
async function waitStorageView(messages: { role: string; content: string }[], workerId: string, expected: number): Promise<Explained> {
  let e: Explained | null = null;
  const credited = () => e?.candidates.find((c) => c.workerId === workerId)?.storageBlocks ?? 0;
  await waitUntil(
    async () => {
      e = await explain(messages);
      return credited() === expected;
    },
    10_000,
    () => `the shared storage view to credit ${workerId} with the writer's ${expected} blocks of the request; last explain credited ${credited()}: ${JSON.stringify(e?.candidates)}`,
    50,
  );
  return e!;
}

describe("HiCache: a storage backend shared by both workers", () => {
  it("a prefix one worker wrote is credited to every attached worker, marked approximate, and served from storage", async () => {
    const user = words(77, 300);
    const first = await send([{ role: "user", content: user }]);
    expect(first.status).toBe(200);
    const other = fleet.workers.find((x) => x.id !== first.worker)!;
    const messages = [
      { role: "user", content: user },
      { role: "assistant", content: first.content },
      { role: "user", content: "And then?" },
    ];
    const writer = fleet.workers.find((x) => x.id === first.worker)!;
    const expected = await writerPrefixBlocks(writer.url, messages);
    expect(expected).toBeGreaterThanOrEqual(15);
    const e = await waitStorageView(messages, other.id, expected);
    const credited = e.candidates.find((c) => c.workerId === other.id)!;
    // The worker that never saw the conversation: its whole overlap is the shared storage view.
    expect(credited.overlapBlocks).toBe(0);
    // The writer holds it on its GPU: picked, and its GPU copy beats a load from storage.
    expect(e.decision.workerId).toBe(first.worker);
    // The other worker serves it from the shared backend (prefetched to host memory, loaded back).
    const r = await fetch(`${other.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${other.apiKey}` },
      body: JSON.stringify({ model: fleet.model, messages: [{ role: "user", content: user }], max_tokens: 2 }),
    });
    const usage = ((await r.json()) as { usage: { prompt_tokens_details?: { cached_tokens?: number } } }).usage;
    expect(usage.prompt_tokens_details?.cached_tokens ?? 0).toBeGreaterThanOrEqual(credited.storageBlocks! * 16 - 16);
    figures.storage = { credited: credited.storageBlocks, servedFromStorage: usage.prompt_tokens_details?.cached_tokens };
  });

  it("with the writer drained, the next turn goes to the other worker on the storage view: approximate, served from storage", async () => {
    const user = words(78, 300);
    const first = await send([{ role: "user", content: user }]);
    expect(first.status).toBe(200);
    const messages = [
      { role: "user", content: user },
      { role: "assistant", content: first.content },
      { role: "user", content: "More." },
    ];
    const other = fleet.workers.find((x) => x.id !== first.worker)!;
    const drained = await fetch(`${fleet.edgeUrl}/admin/workers/${first.worker}/drain?model=${encodeURIComponent(fleet.model)}`, { method: "POST", headers: { authorization: `Bearer ${fleet.adminToken}` } });
    expect(drained.status).toBe(200);
    // The writer's storage events reach the index through its relay after the answer, in more than
    // one batch: judge the decision once the shared view holds all the writer wrote of the request
    // (a view still growing would give the request below more blocks than this decision).
    const expected = await writerPrefixBlocks(fleet.workers.find((x) => x.id === first.worker)!.url, messages);
    expect(expected).toBeGreaterThan(0);
    const e = await waitStorageView(messages, other.id, expected);
    expect(e.decision.workerId).toBe(other.id);
    expect(e.decision.tiers).toMatchObject({ gpuBlocks: 0, hostBlocks: 0, storageApproximate: true });
    const r = await fetch(`${fleet.edgeUrl}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: fleet.model, messages, max_tokens: 4 }) });
    expect(r.status).toBe(200);
    expect(r.headers.get("x-kvedge-worker")).toBe(other.id);
    const storage = r.headers.get("x-kvedge-storage-blocks") ?? "";
    expect(storage).toMatch(/^\d+; approximate$/);
    const blocks = Number(storage.split(";")[0]);
    expect(blocks).toBe(e.decision.tiers!.storageBlocks);
    const cached = ((await r.json()) as { usage: { prompt_tokens_details?: { cached_tokens?: number } } }).usage.prompt_tokens_details?.cached_tokens ?? 0;
    expect(cached).toBeGreaterThanOrEqual(blocks * 16);
    figures.storageRouted = { worker: other.id, storageBlocks: blocks, cachedTokens: cached };
  });
});
