/**
 * A route's overlaps against a plain model of what each view holds, walked block by block over
 * every view: the index's shortcuts (views that hold nothing skipped, the approximate index read
 * only when a worker needs it, one walk kept for a peek and the route after it at the same instant,
 * chain ends continued from the walk's prefix keys) must never change an answer. Random stored,
 * removed and cleared events (GPU and host tier), routes, relays going and coming back with a dump,
 * and time passing are interleaved with looks at the same request arrays.
 */
import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { RoutingCore } from "../../../src/routing-index/routing-core.ts";
import { localHashToHex, HOST_TIER } from "../../../src/relay-wire/relay-protocol.ts";

const BLOCK = 4;
/** Workers with KV events, then one without (approximate mode). */
const EVENT_WORKERS = ["a", "b", "c"];
const APPROX_WORKER = "x";
const APPROX_TTL_MS = 8_000;
const PENDING_TTL_MS = 5_000;
/** A small alphabet of local hashes, so that chains share prefixes. */
const ALPHABET = [1n, 2n, 3n, 0xffff_ffff_0000_0001n, 0x8000_0000_0000_0000n];

type Path = readonly bigint[];
const keyOf = (p: Path) => p.join(",");

/** What one worker's relay has told the index, block by block (engine hash → path from the root). */
class WorkerModel {
  gpu = new Map<string, Path>();
  host = new Map<string, Path>();
  /** Approximate view: the index kept its last copy after the relay went. */
  approximate = false;
  /** The relay is gone until its next dump: its events are dropped. */
  gone = false;
  epoch = 1;
}

/** Engine hash of a path for one worker: one per path (as SGLang's chained hash), so no aliases. */
function engineHashOf(worker: string, tier: string, path: Path): string {
  let h = 1469598103934665603n;
  for (const c of `${worker}/${tier}/${keyOf(path)}`) h = BigInt.asUintN(63, (h ^ BigInt(c.charCodeAt(0))) * 1099511628211n);
  return String(h + 1n);
}

/** Leading blocks of `q` whose every prefix is in `held`. */
function run(q: Path, held: (prefix: Path) => boolean): number {
  let d = 0;
  while (d < q.length && held(q.slice(0, d + 1))) d++;
  return d;
}

const opArb = fc.oneof(
  fc.record({ t: fc.constant("store" as const), w: fc.nat(2), tier: fc.boolean(), from: fc.nat(20), blocks: fc.array(fc.nat(ALPHABET.length - 1), { minLength: 1, maxLength: 6 }) }),
  // A worker caching (a prefix of) one of the requests asked about.
  fc.record({ t: fc.constant("cache" as const), w: fc.nat(2), tier: fc.boolean(), q: fc.nat(5), upto: fc.integer({ min: 1, max: 9 }) }),
  fc.record({ t: fc.constant("remove" as const), w: fc.nat(2), tier: fc.boolean(), pick: fc.array(fc.nat(40), { minLength: 1, maxLength: 3 }) }),
  fc.record({ t: fc.constant("clear" as const), w: fc.nat(2) }),
  fc.record({ t: fc.constant("route" as const), q: fc.nat(5), only: fc.nat(4), peekFirst: fc.boolean() }),
  fc.record({ t: fc.constant("look" as const), q: fc.nat(5) }),
  fc.record({ t: fc.constant("time" as const), ms: fc.constantFrom(0, 1, 3_000, 6_000, 9_000) }),
  fc.record({ t: fc.constant("gone" as const), w: fc.nat(2) }),
  fc.record({ t: fc.constant("dump" as const), w: fc.nat(2) }),
  fc.record({ t: fc.constant("restart" as const), w: fc.nat(2) }),
);

describe("route overlaps against a block-by-block model of every view", () => {
  it("peek and route report each worker's overlap and host blocks as the full walk finds them", () => {
    fc.assert(
      fc.property(fc.array(fc.array(fc.nat(ALPHABET.length - 1), { minLength: 1, maxLength: 9 }), { minLength: 6, maxLength: 6 }), fc.array(opArb, { maxLength: 50, size: "max" }), fc.boolean(), (queryDigits, ops, typed) => {
        let now = 1_000_000;
        const core = new RoutingCore({ blockSize: BLOCK, random: () => 0.5, now: () => now, approx: { ttlMs: APPROX_TTL_MS } });
        const model = new Map<string, WorkerModel>();
        for (const id of EVENT_WORKERS) {
          core.hello({ type: "hello", workerId: id, url: `http://${id}`, blockSize: BLOCK, epoch: 1, modelName: "m", contract: null, kvEvents: true }, id);
          core.applyDump(id, { type: "dump", epoch: 1, seq: 0, blocks: [] });
          model.set(id, new WorkerModel());
        }
        core.hello({ type: "hello", workerId: APPROX_WORKER, url: "http://x", blockSize: BLOCK, epoch: 1, modelName: "m", contract: null, kvEvents: false }, APPROX_WORKER);
        const slots = [...EVENT_WORKERS, APPROX_WORKER];
        // Routed chains per worker (pending routes) and assumed blocks per worker (approximate mode), with their expiry.
        const pending: { worker: string; path: Path; expiresAt: number }[] = [];
        const assumed = new Map<string, Map<string, number>>(slots.map((s) => [s, new Map()]));
        // The same request objects are asked about again and again (the index keeps walks by identity).
        const paths = queryDigits.map((ds) => ds.map((d) => ALPHABET[d]!));
        const queries = paths.map((p) => (typed ? BigUint64Array.from(p) : [...p]));
        let seq = 1;

        const expected = (q: Path, worker: string) => {
          const m = model.get(worker);
          const pendingRun = Math.max(0, ...pending.filter((c) => c.worker === worker && c.expiresAt > now).map((c) => run(q, (p) => p.length <= c.path.length && p.every((x, i) => c.path[i] === x))));
          const approxHeld = assumed.get(worker)!;
          const approxRun = run(q, (p) => (approxHeld.get(keyOf(p)) ?? -Infinity) > now);
          if (!m) return { overlap: Math.max(approxRun, pendingRun), host: 0 };
          const gpuPaths = new Set([...m.gpu.values()].map(keyOf));
          const hostPaths = new Set([...m.host.values()].map(keyOf));
          const gpuRun = run(q, (p) => gpuPaths.has(keyOf(p)));
          const overlap = Math.max(m.approximate ? Math.max(gpuRun, approxRun) : gpuRun, pendingRun);
          return { overlap, host: Math.max(0, run(q, (p) => hostPaths.has(keyOf(p))) - overlap) };
        };
        const check = (k: number, candidates: readonly { workerId: string; overlapBlocks: number; hostBlocks?: number }[]) => {
          for (const c of candidates) {
            const e = expected(paths[k]!, c.workerId);
            expect({ worker: c.workerId, overlap: c.overlapBlocks, host: c.hostBlocks ?? 0 }).toEqual({ worker: c.workerId, overlap: e.overlap, host: e.host });
          }
        };
        const expireAssumed = () => {
          for (const held of assumed.values()) for (const [p, at] of held) if (at <= now) held.delete(p);
        };

        for (const op of ops) {
          if (op.t === "cache") {
            const id = EVENT_WORKERS[op.w]!;
            const m = model.get(id)!;
            if (m.gone) continue;
            const tier = op.tier ? HOST_TIER : undefined;
            const chain = paths[op.q]!.slice(0, op.upto);
            const blocks = chain.map((l, i) => ({ h: engineHashOf(id, tier ?? "gpu", chain.slice(0, i + 1)), l: localHashToHex(l) }));
            expect(core.applyEvents(id, { type: "events", epoch: m.epoch, seq: seq++, events: [{ t: "stored", parent: null, blocks, ...(tier ? { tier } : {}) }] }).ok).toBe(true);
            for (let i = 0; i < chain.length; i++) (tier ? m.host : m.gpu).set(blocks[i]!.h, chain.slice(0, i + 1));
          } else if (op.t === "store" || op.t === "remove" || op.t === "clear") {
            const id = EVENT_WORKERS[op.w]!;
            const m = model.get(id)!;
            if (m.gone) continue;
            const tier = op.t !== "clear" && op.tier ? HOST_TIER : undefined;
            const held = tier ? m.host : m.gpu;
            if (op.t === "store") {
              // Below one of the worker's blocks of that tier (or at the root), a chain of new positions.
              const parents = [...held.entries()];
              const parent = op.from < parents.length ? parents[op.from]! : null;
              let path: Path = parent ? parent[1] : [];
              const blocks = op.blocks.map((d) => {
                path = [...path, ALPHABET[d]!];
                return { h: engineHashOf(id, tier ?? "gpu", path), l: localHashToHex(ALPHABET[d]!), path };
              });
              if (new Set(blocks.map((b) => b.h)).size < blocks.length) continue;
              const r = core.applyEvents(id, { type: "events", epoch: m.epoch, seq: seq++, events: [{ t: "stored", parent: parent ? parent[0] : null, blocks: blocks.map(({ h, l }) => ({ h, l })), ...(tier ? { tier } : {}) }] });
              expect(r.ok).toBe(true);
              for (const b of blocks) held.set(b.h, b.path);
            } else if (op.t === "remove") {
              const known = [...held.keys()];
              const hashes = op.pick.map((i) => (i < known.length ? known[i]! : String(900_000 + i)));
              core.applyEvents(id, { type: "events", epoch: m.epoch, seq: seq++, events: [{ t: "removed", hashes, ...(tier ? { tier } : {}) }] });
              for (const h of hashes) held.delete(h);
            } else {
              core.applyEvents(id, { type: "events", epoch: m.epoch, seq: seq++, events: [{ t: "cleared" }] });
              m.gpu.clear();
              m.host.clear();
              m.approximate = false;
            }
          } else if (op.t === "gone") {
            const id = EVENT_WORKERS[op.w]!;
            const m = model.get(id)!;
            core.relayGone(id);
            if (m.gpu.size > 0 || m.approximate) m.approximate = true;
            m.gone = true;
          } else if (op.t === "dump") {
            // The relay is back with an exact dump of what the worker holds (parents first; an orphan row is refused).
            const id = EVENT_WORKERS[op.w]!;
            const m = model.get(id)!;
            const rows: { h: string; p: string | null; l: string; tier?: typeof HOST_TIER }[] = [];
            const next = { gpu: new Map<string, Path>(), host: new Map<string, Path>() };
            for (const [tier, held] of [["gpu", m.gpu], ["host", m.host]] as const) {
              for (const [h, path] of [...held].sort((x, y) => x[1].length - y[1].length)) {
                const p = path.length > 1 ? engineHashOf(id, tier, path.slice(0, -1)) : null;
                if (p !== null && !next[tier].has(p)) continue;
                next[tier].set(h, path);
                rows.push({ h, p, l: localHashToHex(path[path.length - 1]!), ...(tier === "host" ? { tier: HOST_TIER } : {}) });
              }
            }
            expect(core.applyDump(id, { type: "dump", epoch: m.epoch, seq: seq++, blocks: rows }).ok).toBe(true);
            m.gpu = next.gpu;
            m.host = next.host;
            m.approximate = false;
            m.gone = false;
          } else if (op.t === "restart") {
            // A new worker life: everything believed about it is forgotten, routed chains included.
            const id = EVENT_WORKERS[op.w]!;
            const m = model.get(id)!;
            m.epoch++;
            expect(core.hello({ type: "hello", workerId: id, url: `http://${id}`, blockSize: BLOCK, epoch: m.epoch, modelName: "m", contract: null, kvEvents: true }, id).ok).toBe(true);
            expect(core.applyDump(id, { type: "dump", epoch: m.epoch, seq: seq++, blocks: [] }).ok).toBe(true);
            model.set(id, Object.assign(new WorkerModel(), { epoch: m.epoch }));
            for (let i = pending.length - 1; i >= 0; i--) if (pending[i]!.worker === id) pending.splice(i, 1);
            assumed.get(id)!.clear();
          } else if (op.t === "time") {
            now += op.ms;
            expireAssumed();
          } else if (op.t === "look") {
            check(op.q, core.peek({ localHashes: queries[op.q]!, isl: paths[op.q]!.length * BLOCK }).candidates);
          } else {
            // A first pick with an affinity key looks first, then routes, at the same instant.
            const q = queries[op.q]!;
            const isl = paths[op.q]!.length * BLOCK;
            const only = op.only < slots.length ? [slots[op.only]!] : undefined;
            if (op.peekFirst) check(op.q, core.peek({ localHashes: q, isl }).candidates);
            const d = core.route({ localHashes: q, isl, ...(only ? { onlyWorkers: only } : {}) });
            if (!d) continue;
            check(op.q, d.candidates);
            const chosen = d.workerId;
            pending.push({ worker: chosen, path: paths[op.q]!, expiresAt: now + PENDING_TTL_MS });
            if (chosen === APPROX_WORKER || model.get(chosen)?.approximate) {
              expireAssumed();
              const held = assumed.get(chosen)!;
              for (let i = 1; i <= paths[op.q]!.length; i++) held.set(keyOf(paths[op.q]!.slice(0, i)), now + APPROX_TTL_MS);
            }
            core.settle({ receiptId: d.receiptId, promptTokens: isl, cachedTokens: 0, outcome: "ok" });
          }
        }
        for (let k = 0; k < queries.length; k++) check(k, core.peek({ localHashes: queries[k]!, isl: paths[k]!.length * BLOCK }).candidates);
      }),
      {
        numRuns: 300,
        examples: [
          // A worker whose relay went is read in the approximate index too, in a route that asks about it alone.
          [
            [[0, 1, 2], [0], [1], [2], [3], [4]],
            [
              { t: "cache", w: 0, tier: false, q: 0, upto: 1 },
              { t: "gone", w: 0 },
              { t: "route", q: 0, only: 0, peekFirst: false },
              { t: "time", ms: 6_000 },
              { t: "route", q: 0, only: 0, peekFirst: false },
            ],
            true,
          ],
          // Host blocks stored between two looks at the same request, at the same instant.
          [
            [[0, 1], [0], [1], [2], [3], [4]],
            [
              { t: "look", q: 0 },
              { t: "cache", w: 1, tier: true, q: 0, upto: 2 },
              { t: "look", q: 0 },
            ],
            false,
          ],
        ],
      },
    );
  });
});
