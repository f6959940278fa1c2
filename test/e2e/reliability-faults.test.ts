/**
 * Faults on the real local fleet (simulated SGLang workers, relays, decode service, the edge under Miniflare),
 * each followed by a check of what the index holds against the worker's true block set (local
 * hashes computed from the simulator's own `/debug/cache`):
 * - relay killed and restarted: the index keeps its last copy of the worker's blocks, marked
 *   approximate; the relay resumes its saved view (state file), replays only the batches
 *   it missed from the worker's replay buffer and dumps → parity (history beyond the buffer:
 *   test/e2e/relay-history-lost.test.ts);
 * - a sequence gap between worker and relay (a lossy ZMQ hop): replayed → parity; a gap the replay
 *   buffer cannot cover → the worker is marked approximate (not synced) and the index holds no
 *   block the worker lacks here (only stores were lost);
 * - worker restarted on the same ports (new epoch): its old blocks are fenced out, nothing routes
 *   on them, the index equals the new process's cache;
 * - decode service (media store) hung ("slow"): video URL requests are refused (400,
 *   media_store_unavailable; the URL is never forwarded to a worker) within the decode budget;
 *   exact routing returns when it answers again.
 * (A worker killed mid-load: test/e2e/worker-failure.test.ts; the index restarted, alone because load
 * beside it would move its 1 s bound: test/e2e/reliability-index-restart.test.ts.)
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../scripts/local-fleet.ts";
import { chat, makeMediaDir, makeVideo, text, userWith, video } from "./helpers/media.ts";
import { direct, indexLocalHashes, LogTap, LossyForwarder, sleep, trueLocalHashes, waitParity, waitUntil, words, workerRows, type WorkerRow } from "./reliability-helpers.ts";

const tap = new LogTap();
let fleet: Fleet;
const forwarders: LossyForwarder[] = [];
/** Figures for docs/reliability.md, printed at the end. */
const figures: Record<string, unknown> = {};

beforeAll(async () => {
  const dir = makeMediaDir();
  makeVideo(dir, "a.mp4", { seconds: 2 });
  makeVideo(dir, "b.mp4", { seconds: 2, source: "testsrc2" });
  // Shared: prompts sent to a worker directly (the common namespace) must be routable through the edge.
  fleet = await startFleet({ workers: 2, mediaDir: dir, log: tap.sink, vars: { KVEDGE_ROUTING: JSON.stringify({ profileTtlMs: 0 }), KVEDGE_KV_SHARING: "shared" } });
});
afterAll(async () => {
  fleet?.resumeRelays();
  fleet?.resumeDecode();
  for (const f of forwarders) await f.close();
  await fleet?.stop();
  console.log(`reliability faults: ${JSON.stringify(figures)}`);
});

const row = async (id: string): Promise<WorkerRow | undefined> => (await workerRows(fleet)).find((w) => w.workerId === id);
let seed = 1000;
const traffic = async (i: number, n: number) => {
  for (let k = 0; k < n; k++) await direct(fleet.workers[i]!, fleet.model, words(seed++));
};

/** Sends fresh prompts to worker i until its relay has caught up with the index (a message lost before the relay subscribed shows up as a gap only once the next one arrives). */
async function converge(i: number): Promise<{ ms: number; blocks: number }> {
  const start = Date.now();
  for (let attempt = 0; attempt < 20; attempt++) {
    await traffic(i, 1);
    try {
      const p = await waitParity(fleet, i, 1500);
      return { ms: Date.now() - start, blocks: p.blocks };
    } catch {
      // next prompt
    }
  }
  return waitParity(fleet, i, 5000);
}

describe("faults on the local fleet", () => {
  it("relay killed and restarted: the index keeps its last copy marked approximate, then matches the engine again", async () => {
    await traffic(0, 4);
    await traffic(1, 4);
    await waitParity(fleet, 0);
    await waitParity(fleet, 1);

    await sleep(1200); // the fleet's relays save their view every 500 ms: let one save include the traffic
    await fleet.killRelay(0);
    await waitUntil(async () => (await row("w1"))?.approximate === true, 10_000, async () => JSON.stringify(await row("w1")));
    expect(await row("w1"), "not synced while nobody watches the worker").toMatchObject({ synced: false });
    await traffic(0, 3); // the worker's cache changes while nobody watches

    const started = Date.now();
    await fleet.startRelay(0);
    const p = await waitParity(fleet, 0, 30_000);
    figures.relayRestartToParityMs = Date.now() - started;
    figures.relayRestartBlocks = p.blocks;
    expect(tap.records("relay-w1", "caught_up").length).toBeGreaterThanOrEqual(1);
    expect(tap.records("relay-w1", "state_resumed").at(-1)).toMatchObject({ verdict: "continue", approximate: null });
    expect(await row("w1")).toMatchObject({ synced: true, approximate: false });
  });

  it("a sequence gap between worker and relay is replayed: the index equals the engine", async () => {
    const fwd = await LossyForwarder.start(fleet.workers[0]!.kvPort);
    forwarders.push(fwd);
    await fleet.startRelay(0, ["--kv-endpoint", fwd.endpoint]);
    await converge(0);
    const gapsBefore = tap.records("relay-w1", "gap_recovered").length;

    fwd.drop(4);
    while (fwd.dropping > 0) await traffic(0, 1);
    await traffic(0, 1); // this batch gets through: the relay sees the gap and replays it
    const p = await waitParity(fleet, 0, 15_000);
    expect(fwd.dropped).toBeGreaterThanOrEqual(4);
    expect(tap.records("relay-w1", "gap_recovered").length).toBeGreaterThan(gapsBefore);

    // Junk on the wire (wrong frame count, a seq frame of the wrong size) is counted and ignored.
    await fwd.inject([new TextEncoder().encode("")]);
    await fwd.inject([new Uint8Array(0), new Uint8Array([1, 2, 3]), new Uint8Array([0x93])]);
    await traffic(0, 1);
    await waitParity(fleet, 0, 15_000);
    figures.gapReplay = { dropped: fwd.dropped, blocks: p.blocks, junkFrames: 2 };
  });

  it("a gap the replay buffer cannot cover: the worker is marked approximate, the index holds nothing the worker lacks, new prefixes come back", async () => {
    const w = await fleet.addWorker(["--buffer-steps", "2"]);
    const i = fleet.workers.indexOf(w);
    const fwd = await LossyForwarder.start(w.kvPort);
    forwarders.push(fwd);
    await fleet.startRelay(i, ["--kv-endpoint", fwd.endpoint]);
    await converge(i);
    await traffic(i, 2);
    await waitParity(fleet, i);

    fwd.drop(6);
    while (fwd.dropping > 0) await traffic(i, 1);
    await traffic(i, 1);
    await waitUntil(async () => tap.records(`relay-${w.id}`, "history_lost").length > 0, 10_000, () => "no history_lost");
    const fresh = words(seed++);
    await direct(w, fleet.model, fresh);
    await sleep(300);
    const index = await indexLocalHashes(fleet, w.id);
    const truth = await trueLocalHashes(w.url);
    const missing = [...truth];
    for (const h of index) {
      const k = missing.indexOf(h);
      expect(k, `index holds ${h}, which the worker does not`).toBeGreaterThanOrEqual(0);
      missing.splice(k, 1);
    }
    expect(missing.length, "blocks stored before the lost history are not claimed").toBeGreaterThan(0);
    expect(index.length, "the fresh prompt's blocks are indexed").toBeGreaterThan(0);
    expect(await row(w.id), "not synced while the view may be wrong").toMatchObject({ synced: false, approximate: true });
    figures.historyLost = { engineBlocks: truth.length, indexBlocks: index.length };
    // Leave the pool as it was: the relay reports its dead worker down before it goes too.
    await fleet.killWorker(i);
    await waitUntil(async () => (await row(w.id))?.status === "down", 15_000, async () => JSON.stringify(await row(w.id)));
    await fleet.killRelay(i);
  });

  it("worker restarted on the same ports (new epoch): old blocks fenced out, no stale routing", async () => {
    await fleet.startRelay(0); // back to the direct feed
    await converge(0);
    const explainOverlap = async (prompt: string, id: string): Promise<number> => {
      const r = (await fetch(`${fleet.edgeUrl}/admin/explain`, {
        method: "POST",
        headers: { authorization: `Bearer ${fleet.adminToken}`, "content-type": "application/json" },
        body: JSON.stringify({ model: fleet.model, messages: [{ role: "user", content: prompt }] }),
      }).then((x) => x.json())) as { candidates: { workerId: string; overlapBlocks: number }[] };
      return r.candidates.find((c) => c.workerId === id)?.overlapBlocks ?? -1;
    };
    const newEpoch = async (before: number, nudge: boolean): Promise<number> => {
      let epoch = before;
      await waitUntil(
        async () => {
          if (nudge) await traffic(1, 1); // the new process's first KV event reveals the restart
          const r = await row("w2");
          epoch = r?.epoch ?? before;
          return !!r && r.epoch > before && r.status === "up" && r.synced;
        },
        30_000,
        async () => JSON.stringify(await row("w2")),
        100,
      );
      return epoch;
    };
    const epochs: number[] = [(await row("w2"))!.epoch];

    // The relay sees the KV publisher's connection close the moment the process ends (kv-feed.ts),
    // reports the worker down, and starts a new life when its health check answers again. The
    // second restart is faster than two of that relay's health checks (4 s apart) and sends no
    // traffic: health checks alone miss it, and the new process's sequence, which may already be
    // past the old one's, would have passed for a gap.
    for (const [downMs, nudge, healthEveryMs] of [[2500, false, null], [200, false, 4000]] as const) {
      if (healthEveryMs !== null) {
        await fleet.startRelay(1, ["--health-interval-ms", String(healthEveryMs)]);
        await converge(1);
        const now = (await row("w2"))!.epoch;
        if (now !== epochs.at(-1)) epochs.push(now);
      }
      const prompt = words(seed++, 400);
      await direct(fleet.workers[1]!, fleet.model, prompt);
      await waitParity(fleet, 1);
      expect(await explainOverlap(prompt, "w2")).toBeGreaterThan(10);

      await fleet.restartWorker(1, downMs);
      epochs.push(await newEpoch(epochs[epochs.length - 1]!, nudge));
      expect(await explainOverlap(prompt, "w2"), `after a restart with ${downMs} ms down`).toBe(0);
      await waitParity(fleet, 1, 10_000, true);
      // Through the edge: whichever worker serves it, no one claims the old cache.
      const r = await chat(fleet.edgeUrl, { model: fleet.model, messages: [{ role: "user", content: prompt }] });
      expect(r.status).toBe(200);
      expect(r.overlapBlocks).toBe(0);
      expect(r.cachedTokens).toBe(0);
    }
    figures.newEpochs = epochs;
  });

  it("decode service hung: video URL requests are refused within the budget, never forwarded", async () => {
    const vid = (n: string) => video(`${fleet.mediaUrl}/${n}.mp4`);
    const ok = await chat(fleet.edgeUrl, { model: fleet.model, ...userWith([text("before"), vid("a")]) });
    expect(ok.status, JSON.stringify(ok.body)).toBe(200);
    expect(ok.routing).toBe("exact");

    fleet.pauseDecode();
    const started = Date.now();
    const slow = await chat(fleet.edgeUrl, { model: fleet.model, ...userWith([text("decode hung"), vid("b")]) });
    const tookMs = Date.now() - started;
    fleet.resumeDecode();
    expect(slow.status, JSON.stringify(slow.body)).toBe(503);
    expect((slow.body as { error: { code: string } }).error.code).toBe("media_store_unavailable");
    // The decode budget is 15 s (src/media/decode-client.ts); the request must not wait much longer.
    expect(tookMs).toBeLessThan(15_000 + 5_000);
    figures.decodeHungFallbackMs = tookMs;

    const again = await chat(fleet.edgeUrl, { model: fleet.model, ...userWith([text("after"), vid("b")]) });
    expect(again.status).toBe(200);
    expect(again.routing).toBe("exact");
  });
});
