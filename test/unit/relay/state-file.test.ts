/**
 * Relay state across restarts (services/relay/state-file.ts, state-keeper.ts) on real sockets: a
 * fake worker (HTTP + ZMQ PUB + replay ROUTER) and a fake index. The parity rule: after a relay
 * restart the index's view either equals the worker's blocks, or the dump that set it said
 * `approximate` — never an unflagged dump with wrong blocks.
 */
import { mkdtempSync, readFileSync, writeFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { silentLogger } from "../../../services/relay/log.ts";
import { startRelay, type Relay } from "../../../services/relay/relay.ts";
import { loadRelayState, resumeVerdict, saveRelayState, type RelayState } from "../../../services/relay/state-file.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { FakeIndex, FakeWorker, indexView, storeEvents, testRelayOptions, waitFor, type IndexConn } from "./fakes.ts";

const SECRET = "test-secret";
beforeAll(() => initHashing());

const open: { close(): unknown }[] = [];
afterEach(async () => {
  for (const o of open.splice(0).reverse()) await o.close();
});

const toks = (n: number, start: number): number[] => Array.from({ length: n }, (_, i) => start + i);
const lastDump = (c: IndexConn | undefined) => (c?.messages ?? []).filter((m) => m.type === "dump").at(-1) as { approximate?: boolean; seq: number } | undefined;

function state(over: Partial<RelayState> = {}): RelayState {
  return { v: 1, workerId: "w1", model: "m", blockSize: 4, epoch: 5, startTimeMs: null, lastSeq: 3, lastBatchSha256: "a".repeat(64), approximate: null, savedAt: 0, blocks: [], ...over };
}

describe("state file", () => {
  it("round-trips, replaces atomically, refuses a view over its byte bound and keeps the old file", () => {
    const dir = mkdtempSync(join(tmpdir(), "relay-state-"));
    const path = join(dir, "w1.json");
    expect(loadRelayState(path, 1e6)).toEqual({ ok: false, reason: "missing" });
    const s = state({ blocks: [{ h: "1", p: null, l: "00000000000000aa" }] });
    expect(saveRelayState(path, s, 1e6)).toMatchObject({ ok: true });
    expect(loadRelayState(path, 1e6)).toEqual({ ok: true, state: s });
    const big = state({ lastSeq: 9, blocks: Array.from({ length: 100 }, (_, i) => ({ h: String(i + 1), p: null, l: "00000000000000aa" })) });
    expect(saveRelayState(path, big, 2000)).toMatchObject({ ok: false, reason: "too_large" });
    expect(loadRelayState(path, 1e6)).toEqual({ ok: true, state: s });
    expect(existsSync(`${path}.tmp-${process.pid}`)).toBe(false);
    writeFileSync(path, "{\"v\":1,");
    expect(loadRelayState(path, 1e6)).toMatchObject({ ok: false, reason: "unreadable" });
    writeFileSync(path, JSON.stringify({ ...s, lastSeq: "x" }));
    expect(loadRelayState(path, 1e6)).toMatchObject({ ok: false, reason: "invalid" });
    expect(loadRelayState(path, 10)).toMatchObject({ ok: false, reason: "too_large" });
  });

  it("resume verdicts: same batch → continue; buffer moved on → gap; another stream → other", () => {
    const s = state();
    expect(resumeVerdict(s, null, { seq: 3, sha256: "a".repeat(64) })).toBe("continue");
    expect(resumeVerdict(s, null, { seq: 3, sha256: "b".repeat(64) })).toBe("other");
    expect(resumeVerdict(s, null, { seq: 9, sha256: "b".repeat(64) })).toBe("gap");
    expect(resumeVerdict(s, null, { seq: 1, sha256: "b".repeat(64) })).toBe("other");
    expect(resumeVerdict(s, null, null)).toBe("other");
    expect(resumeVerdict(state({ startTimeMs: 10 }), 11, { seq: 3, sha256: "a".repeat(64) })).toBe("other");
  });
});

describe("relay restart with a state file", () => {
  async function relayWith(worker: FakeWorker, index: FakeIndex, path: string, extra = {}): Promise<Relay> {
    const relay = await startRelay(testRelayOptions(worker, index, SECRET, { stateFile: path, stateIntervalMs: 100, ...extra }), silentLogger);
    open.push(relay);
    return relay;
  }

  /** A worker, an index and a relay with a state file, after the relay applied one stored chain `a`. */
  async function firstLife(): Promise<{ worker: FakeWorker; index: FakeIndex; path: string; a: ReturnType<typeof storeEvents>; seqA: number; r1: Relay }> {
    const worker = await FakeWorker.create();
    const index = await FakeIndex.create(SECRET);
    open.push(worker, index);
    const path = join(mkdtempSync(join(tmpdir(), "relay-state-")), "w1.json");
    const a = storeEvents(toks(8, 1));
    const r1 = await relayWith(worker, index, path);
    const seqA = await worker.pub.publish(a.events);
    await waitFor(() => r1.stats().lastSeq === seqA, "a applied");
    return { worker, index, path, a, seqA, r1 };
  }

  it("resumes the saved view and replays only the missed range: exact", async () => {
    const { worker, index, path, a, seqA, r1 } = await firstLife();
    // Saved periodically while running (a SIGKILLed relay leaves this file behind).
    await waitFor(() => existsSync(path) && JSON.parse(readFileSync(path, "utf8")).lastSeq === seqA, "periodic save");
    await r1.close(); // and on shutdown
    const epoch1 = JSON.parse(readFileSync(path, "utf8")).epoch as number;

    const b = storeEvents(toks(4, 100), a.hashes[1]!);
    const seqB = await worker.pub.publish(b.events); // nobody listens: only the buffer has it
    worker.pub.replayRequests.length = 0;
    const before = index.conns.length;
    const r2 = await relayWith(worker, index, path);
    await waitFor(() => r2.stats().lastSeq === seqB && index.conns.length > before && lastDump(index.last) !== undefined, "resumed");
    expect(worker.pub.replayRequests[0]).toBe(seqA); // from the saved batch, not from 0
    expect(r2.stats()).toMatchObject({ approximate: null, epoch: epoch1, state: { resumed: "continue" } });
    await waitFor(() => indexView(index.last!).size === 3, "index has a + b");
    expect(lastDump(index.last!)!.approximate).toBeUndefined();
    expect([...indexView(index.last!).keys()].sort()).toEqual([...a.hashes, ...b.hashes].map(String).sort());
  });

  it("history really lost: resumes its saved view, marked approximate; flush makes it exact", async () => {
    const { worker, index, path, a, r1 } = await firstLife();
    await r1.close();

    // While the relay is down the worker evicts a's last block and stores more than its buffer holds.
    await worker.pub.publish([["BlockRemoved", [a.hashes[1]!], "GPU"]]);
    const c = storeEvents(toks(4, 300));
    const seqC = await worker.pub.publish(c.events);
    worker.pub.buffer = worker.pub.buffer.filter((x) => x.seq === seqC);
    worker.flushBusy = 1; // the first flush finds requests running and is retried
    const before = index.conns.length;
    const r2 = await relayWith(worker, index, path, { onHistoryLost: "flush", flushRetryMs: 50 });
    await waitFor(() => r2.stats().lastSeq === seqC && index.conns.length > before && lastDump(index.last) !== undefined, "resumed");
    // The index view now holds a's evicted block: allowed only because the dump says approximate.
    const dump = lastDump(index.last!)!;
    expect(dump.approximate).toBe(true);
    expect(r2.stats().approximate).toMatch(/history lost|no longer holds/);
    expect(r2.stats().state?.resumed).toBe("gap");
    // --on-history-lost flush: the relay asked the worker to reset its cache.
    await waitFor(() => worker.flushes === 1 && r2.stats().flushes === 2, "flush_cache retried once, then done");
    const cleared = await worker.pub.publish([["AllBlocksCleared"]]);
    await waitFor(() => r2.stats().lastSeq === cleared, "cleared");
    expect(r2.stats().approximate).toBeNull();
    await waitFor(() => indexView(index.last!).size === 0, "index exact (empty)");
  });

  it("another worker process (seq restarted): the saved view is discarded", async () => {
    const worker = await FakeWorker.create();
    const index = await FakeIndex.create(SECRET);
    open.push(worker, index);
    const path = join(mkdtempSync(join(tmpdir(), "relay-state-")), "w1.json");
    const r1 = await relayWith(worker, index, path);
    const a = storeEvents(toks(8, 1));
    await worker.pub.publish(a.events);
    const seqA2 = await worker.pub.publish(storeEvents(toks(4, 50)).events);
    await waitFor(() => r1.stats().lastSeq === seqA2, "applied");
    await r1.close();
    worker.pub.restart();
    const n = storeEvents(toks(4, 700));
    await worker.pub.publish(n.events);
    const r2 = await relayWith(worker, index, path);
    await waitFor(() => indexView(index.last!).size === 1, "fresh view");
    expect([...indexView(index.last!).keys()]).toEqual([n.hashes[0]!.toString()]);
    expect(r2.stats()).toMatchObject({ approximate: null, state: { resumed: null } });
  });
});
