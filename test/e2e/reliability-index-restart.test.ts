/**
 * Index restarted on the real local fleet (the edge process restarted on the same state directory,
 * relays paused meanwhile): registry and contracts come back from SQLite; blocks come back from the
 * relays' dumps within 1 s of their reconnect, and routing uses them. Runs alone (project
 * e2e-serial): load beside it would move the 1 s bound. The other faults on the fleet:
 * test/e2e/reliability-faults.test.ts.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../scripts/local-fleet.ts";
import { chat } from "./helpers/media.ts";
import { direct, LogTap, waitParity, words, workerRows, type WorkerRow } from "./reliability-helpers.ts";

const tap = new LogTap();
let fleet: Fleet;
/** Figures for docs/reliability.md, printed at the end. */
const figures: Record<string, unknown> = {};

beforeAll(async () => {
  // Shared: prompts sent to a worker directly (the common namespace) must be routable through the edge.
  fleet = await startFleet({ workers: 2, log: tap.sink, vars: { KVEDGE_ROUTING: JSON.stringify({ profileTtlMs: 0 }), KVEDGE_KV_SHARING: "shared" } });
});
afterAll(async () => {
  fleet?.resumeRelays();
  await fleet?.stop();
  console.log(`reliability index restart: ${JSON.stringify(figures)}`);
});

let seed = 1000;
const traffic = async (i: number, n: number) => {
  for (let k = 0; k < n; k++) await direct(fleet.workers[i]!, fleet.model, words(seed++));
};

describe("index restarted on the local fleet", () => {
  it("registry and contracts from SQLite, blocks from relay dumps within 1 s of reconnect", async () => {
    await traffic(0, 2);
    await traffic(1, 2);
    await waitParity(fleet, 0);
    await waitParity(fleet, 1);
    const key = (rows: WorkerRow[]) =>
      rows.filter((w) => w.status === "up").map(({ workerId, url, epoch, contractDigest }) => ({ workerId, url, epoch, contractDigest }));
    const registry = key(await workerRows(fleet));
    expect(registry).toHaveLength(2);
    expect(registry.every((w) => w.contractDigest !== null)).toBe(true);

    fleet.pauseRelays();
    const welcomesBefore = { w1: tap.records("relay-w1", "index_welcome").length, w2: tap.records("relay-w2", "index_welcome").length };
    const restartStarted = Date.now();
    await fleet.restartEdge();
    figures.edgeRestartMs = Date.now() - restartStarted;
    const restored = await workerRows(fleet);
    expect(key(restored)).toEqual(registry);
    for (const w of restored.filter((x) => x.workerId === "w1" || x.workerId === "w2")) expect(w).toMatchObject({ blocks: 0, synced: false });

    fleet.resumeRelays();
    const resumedAt = Date.now();
    const parityAt: Record<string, number> = {};
    await Promise.all(
      (["w1", "w2"] as const).map(async (id, i) => {
        await waitParity(fleet, i, 30_000);
        parityAt[id] = Date.now();
      }),
    );
    const reconnectToRestored: Record<string, number> = {};
    for (const id of ["w1", "w2"] as const) {
      const welcomes = tap.records(`relay-${id}`, "index_welcome");
      expect(welcomes.length).toBeGreaterThan(welcomesBefore[id]);
      const welcomeAt = Date.parse(String(welcomes[welcomes.length - 1]!.t));
      reconnectToRestored[id] = parityAt[id]! - welcomeAt;
      expect(reconnectToRestored[id], `${id}: blocks restored ${reconnectToRestored[id]} ms after the relay's welcome`).toBeLessThan(1000);
    }
    figures.indexRestart = { resumeToParityMs: Math.max(...Object.values(parityAt)) - resumedAt, reconnectToRestoredMs: reconnectToRestored };

    // Routing uses the restored blocks: a prompt already cached on w1 is routed with overlap.
    const prompt = words(seed++, 400);
    await direct(fleet.workers[0]!, fleet.model, prompt);
    await waitParity(fleet, 0);
    const r = await chat(fleet.edgeUrl, { model: fleet.model, messages: [{ role: "user", content: prompt }] });
    expect(r.status).toBe(200);
    expect(r.worker).toBe("w1");
    expect(r.overlapBlocks).toBeGreaterThan(10);
  });
});
