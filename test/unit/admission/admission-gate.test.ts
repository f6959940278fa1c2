/**
 * Admission per pool through a real RoutingCore (registry, block views, load, router): requests wait
 * when every worker is at its KV bound and leave the queue in band (aged), tenant and overlap order;
 * none is lost or admitted twice; refusals carry a Retry-After from the drain rate.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { RoutingCore, type RouteDecision } from "../../../src/routing-index/routing-core.ts";
import { localBlockHashes } from "../../../src/blocks/block-hash.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { localHashToHex } from "../../../src/relay-wire/relay-protocol.ts";
import { AdmissionConfigSchema, type AdmissionConfig } from "../../../src/config/config.ts";
import type { AdmissionTicket, AdmitOutcome, Timers } from "../../../src/admission/admission-gate.ts";
import { BAND_DEFAULT, BAND_FLEX, BAND_PRIORITY, bandOf } from "../../../src/admission/bands.ts";
import { DrainRate } from "../../../src/admission/drain-rate.ts";

beforeAll(() => initHashing());

const BS = 4;
type Outcome = AdmitOutcome<RouteDecision>;

/** A manual clock and timer: the test moves time and fires what is due. */
class Clock implements Timers {
  now = 1_000_000;
  readonly #due = new Map<number, { at: number; fn: () => void }>();
  #seq = 0;
  set(fn: () => void, ms: number): unknown {
    const id = this.#seq++;
    this.#due.set(id, { at: this.now + ms, fn });
    return id;
  }
  clear(h: unknown): void {
    this.#due.delete(h as number);
  }
  advance(ms: number): void {
    this.now += ms;
    for (const [id, t] of [...this.#due]) if (t.at <= this.now) {
      this.#due.delete(id);
      t.fn();
    }
  }
  get pending(): number {
    return this.#due.size;
  }
}

function pool(opts: { workers: string[]; capacityTokens?: number; admission?: Partial<AdmissionConfig> }) {
  const clock = new Clock();
  const core = new RoutingCore({ blockSize: BS, random: () => 0, now: () => clock.now, timers: clock, admission: AdmissionConfigSchema.parse(opts.admission ?? {}) });
  for (const id of opts.workers)
    core.hello({ type: "hello", workerId: id, url: `http://${id}`, blockSize: BS, epoch: 1, modelName: "m", contract: null, kvEvents: true, ...(opts.capacityTokens ? { kvCapacityTokens: opts.capacityTokens } : {}) }, id);
  return { core, clock };
}

/** A prompt of `blocks` full blocks, distinct per `seed`. */
function prompt(seed: number, blocks = 10): number[] {
  return Array.from({ length: blocks * BS }, (_, i) => seed * 100_000 + i + 1);
}

function store(core: RoutingCore, id: string, tokens: number[]) {
  const locals = localBlockHashes(tokens, BS);
  const base = tokens[0]! * 100;
  const blocks = locals.map((l, i) => ({ h: String(base + i), p: i === 0 ? null : String(base + i - 1), l: localHashToHex(l) }));
  expect(core.applyDump(id, { type: "dump", epoch: 1, seq: 0, blocks }).ok).toBe(true);
}

let ticketSeq = 0;
function ticket(t: Partial<AdmissionTicket> = {}): AdmissionTicket {
  return { ticket: `t${ticketSeq++}`, band: BAND_DEFAULT, tenant: "anonymous", decodeBudget: 0, ...t };
}

/** Admits a request; records when its outcome arrives (a promise resolves in a microtask). */
function admit(core: RoutingCore, tokens: number[], t: AdmissionTicket, seen: Outcome[] = []) {
  const box: { outcome: Outcome | null; ticket: string } = { outcome: null, ticket: t.ticket };
  const r = core.admit({ localHashes: localBlockHashes(tokens, BS), isl: tokens.length }, t);
  const record = (o: Outcome) => {
    if (box.outcome !== null) throw new Error(`ticket ${t.ticket} answered twice`);
    box.outcome = o;
    seen.push(o);
  };
  if (r instanceof Promise) void r.then(record);
  else record(r);
  return box;
}

const settle = (core: RoutingCore, d: Outcome | null) => {
  if (d?.kind !== "routed") throw new Error(`not routed: ${JSON.stringify(d)}`);
  core.settle({ receiptId: d.decision.receiptId, promptTokens: null, cachedTokens: null, outcome: "ok" });
};
const flush = () => new Promise((r) => setTimeout(r, 0));

describe("admission under the bound", () => {
  it("never delays a request in a pool whose workers report no capacity (today's routing)", () => {
    const { core } = pool({ workers: ["a", "b"] });
    const boxes = Array.from({ length: 200 }, (_, k) => admit(core, prompt(k), ticket()));
    // Answered synchronously: no wait, no queue.
    expect(boxes.every((b) => b.outcome?.kind === "routed")).toBe(true);
    expect(core.admissionSnapshot().bands.map((b) => b.queued)).toEqual([0, 0, 0]);
    expect(core.admissionSnapshot().bands[BAND_DEFAULT]!.admittedImmediately).toBe(200);
  });

  it("routes at once while one worker has room, to a worker with room", () => {
    const { core } = pool({ workers: ["a", "b"], capacityTokens: 40 });
    store(core, "a", prompt(1));
    const first = admit(core, prompt(1), ticket());
    // b still has room: not crowded.
    expect(first.outcome).toMatchObject({ kind: "routed", decision: { workerId: "a" }, waited: false, crowded: false });
    // a is full (40 of 40 tokens): the same prefix goes to b, which has room, instead of queueing on a;
    // then no worker has room, and the next request queues.
    const second = admit(core, prompt(1), ticket());
    expect(second.outcome).toMatchObject({ kind: "routed", decision: { workerId: "b" }, waited: false, crowded: true });
  });

  it("with admission off, a pick that fills the last worker is not crowded (nothing will queue behind it)", () => {
    const { core } = pool({ workers: ["a"], capacityTokens: 40, admission: { enabled: false } });
    const first = admit(core, prompt(1), ticket());
    expect(first.outcome).toMatchObject({ kind: "routed", decision: { workerId: "a" }, waited: false, crowded: false });
    // a is full (40 of 40 tokens), and the next request is still routed at once, not crowded.
    expect(admit(core, prompt(2), ticket()).outcome).toMatchObject({ kind: "routed", decision: { workerId: "a" }, waited: false, crowded: false });
  });

  it("answers none (503 at the edge) when no worker is up", () => {
    const { core } = pool({ workers: [] });
    expect(admit(core, prompt(1), ticket()).outcome).toEqual({ kind: "none" });
  });
});

describe("admission queue", () => {
  it("holds requests past the bound and routes each exactly once as workers free room", async () => {
    const { core } = pool({ workers: ["a", "b"], capacityTokens: 40 });
    const seen: Outcome[] = [];
    const boxes = Array.from({ length: 12 }, (_, k) => admit(core, prompt(k), ticket(), seen));
    await flush();
    expect(boxes.filter((b) => b.outcome?.kind === "routed")).toHaveLength(2);
    expect(core.admissionSnapshot().bands[BAND_DEFAULT]!.queued).toBe(10);
    // Finish whatever runs, one at a time, until every request has run.
    const done = new Set<string>();
    for (let round = 0; round < 12; round++) {
      const running = seen.filter((o) => o.kind === "routed" && !done.has(o.decision.receiptId));
      expect(running.length).toBeLessThanOrEqual(2); // never more than the workers hold
      const next = running[0]!;
      if (next.kind === "routed") done.add(next.decision.receiptId);
      settle(core, next);
      await flush();
    }
    expect(done.size).toBe(12);
    expect(new Set(boxes.map((b) => (b.outcome?.kind === "routed" ? b.outcome.decision.receiptId : "none"))).size).toBe(12);
    expect(core.sizes().activeRequests).toBe(0);
    expect(core.admissionSnapshot().bands[BAND_DEFAULT]).toMatchObject({ admittedImmediately: 2, admittedAfterWait: 10, enqueued: 10 });
  });

  it("gives the freed worker the waiting request with the most cached blocks on it", async () => {
    const { core } = pool({ workers: ["a", "b"], capacityTokens: 40 });
    store(core, "a", prompt(7));
    store(core, "b", prompt(8));
    const onA = admit(core, prompt(7), ticket());
    const onB = admit(core, prompt(8), ticket());
    expect(onA.outcome).toMatchObject({ decision: { workerId: "a" } });
    expect(onB.outcome).toMatchObject({ decision: { workerId: "b" } });
    // Both full. Waiting, in arrival order: one cached on b, one cached nowhere, one cached on a.
    const forB = admit(core, prompt(8), ticket());
    const cold = admit(core, prompt(9), ticket());
    const forA = admit(core, prompt(7), ticket());
    settle(core, onA.outcome);
    await flush();
    expect(forA.outcome).toMatchObject({ kind: "routed", decision: { workerId: "a", overlapBlocks: 10 } });
    expect(forB.outcome).toBeNull();
    expect(cold.outcome).toBeNull();
    settle(core, onB.outcome);
    await flush();
    expect(forB.outcome).toMatchObject({ kind: "routed", decision: { workerId: "b", overlapBlocks: 10 } });
  });

  it("serves the priority band first, then default, then flex", async () => {
    const { core } = pool({ workers: ["a"], capacityTokens: 40 });
    const order: string[] = [];
    const running = admit(core, prompt(0), ticket());
    const seenFor = (name: string, band: number, seed: number) => {
      const b = admit(core, prompt(seed), ticket({ band }));
      return { name, b };
    };
    const waiting = [seenFor("flex", BAND_FLEX, 1), seenFor("default", BAND_DEFAULT, 2), seenFor("priority", BAND_PRIORITY, 3)];
    let current = running.outcome;
    for (let i = 0; i < 3; i++) {
      settle(core, current);
      await flush();
      const admitted = waiting.find((w) => w.b.outcome !== null && !order.includes(w.name))!;
      order.push(admitted.name);
      current = admitted.b.outcome;
    }
    expect(order).toEqual(["priority", "default", "flex"]);
  });

  it("ages a waiting request one band up per agingMs, so flex is not starved for ever", async () => {
    const { core, clock } = pool({ workers: ["a"], capacityTokens: 40, admission: { agingMs: 10_000, maxWaitMs: 120_000 } });
    const running = admit(core, prompt(0), ticket());
    const flex = admit(core, prompt(1), ticket({ band: BAND_FLEX }));
    clock.advance(15_000); // flex is aged one band: default
    const early = admit(core, prompt(2), ticket({ band: BAND_PRIORITY }));
    settle(core, running.outcome);
    await flush();
    expect(early.outcome?.kind).toBe("routed"); // a fresh priority request still goes first
    expect(flex.outcome).toBeNull();
    clock.advance(10_000); // 25 s: flex is aged two bands, level with a fresh priority request, and older
    const late = admit(core, prompt(3), ticket({ band: BAND_PRIORITY }));
    settle(core, early.outcome);
    await flush();
    expect(flex.outcome?.kind).toBe("routed");
    expect(late.outcome).toBeNull();
  });

  it("refuses past the deadline with a Retry-After, and the queue keeps no trace", async () => {
    const { core, clock } = pool({ workers: ["a"], capacityTokens: 40, admission: { maxWaitMs: 5_000 } });
    admit(core, prompt(0), ticket());
    const waiting = admit(core, prompt(1), ticket());
    const shorter = admit(core, prompt(2), ticket({ maxWaitMs: 1_000 }));
    clock.advance(1_000);
    await flush();
    expect(shorter.outcome).toMatchObject({ kind: "refused", reason: "deadline" });
    expect(waiting.outcome).toBeNull();
    clock.advance(4_000);
    await flush();
    expect(waiting.outcome).toMatchObject({ kind: "refused", reason: "deadline" });
    const o = waiting.outcome!;
    // Nothing drained yet: the wait the pool allows (5 s).
    if (o.kind === "refused") expect(o.retryAfterSeconds).toBe(5);
    expect(core.admissionSnapshot().bands.map((b) => b.queued)).toEqual([0, 0, 0]);
    expect(clock.pending).toBe(0);
    expect(core.admissionSnapshot().bands[BAND_DEFAULT]!.refused.deadline).toBe(2);
  });

  it("with no config every band waits 1 s; a band's own wait bounds it, and Retry-After falls back to it", async () => {
    expect(AdmissionConfigSchema.parse({}).maxWaitMs).toEqual({ priority: 1_000, default: 1_000, flex: 1_000 });
    const fresh = pool({ workers: ["a"], capacityTokens: 40 });
    admit(fresh.core, prompt(0), ticket());
    const waiting = admit(fresh.core, prompt(1), ticket({ band: BAND_FLEX }));
    fresh.clock.advance(999);
    await flush();
    expect(waiting.outcome).toBeNull();
    fresh.clock.advance(1);
    await flush();
    expect(waiting.outcome).toMatchObject({ kind: "refused", reason: "deadline", retryAfterSeconds: 1 });

    const { core, clock } = pool({ workers: ["a"], capacityTokens: 40, admission: { maxWaitMs: { priority: 1_000, default: 1_000, flex: 8_000 } } });
    admit(core, prompt(0), ticket());
    const priority = admit(core, prompt(1), ticket({ band: BAND_PRIORITY }));
    const interactive = admit(core, prompt(2), ticket());
    const flex = admit(core, prompt(3), ticket({ band: BAND_FLEX }));
    clock.advance(999);
    await flush();
    expect([priority.outcome, interactive.outcome, flex.outcome]).toEqual([null, null, null]);
    clock.advance(1);
    await flush();
    expect(priority.outcome).toMatchObject({ kind: "refused", reason: "deadline", retryAfterSeconds: 1 });
    expect(interactive.outcome).toMatchObject({ kind: "refused", reason: "deadline", retryAfterSeconds: 1 });
    expect(flex.outcome).toBeNull();
    clock.advance(7_000);
    await flush();
    expect(flex.outcome).toMatchObject({ kind: "refused", reason: "deadline", retryAfterSeconds: 8 });
  });

  it("maxWaitMs as one number sets every band; an object names the bands it changes", () => {
    expect(AdmissionConfigSchema.parse({ maxWaitMs: 30_000 }).maxWaitMs).toBe(30_000);
    expect(AdmissionConfigSchema.parse({ maxWaitMs: { flex: 60_000 } }).maxWaitMs).toEqual({ priority: 1_000, default: 1_000, flex: 60_000 });
    expect(AdmissionConfigSchema.safeParse({ maxWaitMs: { batch: 1 } }).success).toBe(false);
    expect(AdmissionConfigSchema.safeParse({ maxWaitMs: { default: -1 } }).success).toBe(false);
  });

  it("refuses past the queue bound; a higher band takes the newest lower-band place", async () => {
    const { core } = pool({ workers: ["a"], capacityTokens: 40, admission: { maxQueue: 2 } });
    admit(core, prompt(0), ticket());
    const f1 = admit(core, prompt(1), ticket({ band: BAND_FLEX }));
    const f2 = admit(core, prompt(2), ticket({ band: BAND_FLEX }));
    const f3 = admit(core, prompt(3), ticket({ band: BAND_FLEX }));
    await flush();
    expect(f3.outcome).toMatchObject({ kind: "refused", reason: "queue_full" });
    const p = admit(core, prompt(4), ticket({ band: BAND_PRIORITY }));
    await flush();
    expect(f2.outcome).toMatchObject({ kind: "refused", reason: "evicted" });
    expect(f1.outcome).toBeNull();
    expect(p.outcome).toBeNull();
    expect(core.admissionSnapshot().bands.map((b) => b.queued)).toEqual([1, 0, 1]);
  });

  it("a client that leaves the queue leaves no trace; one that leaves after admission is settled", async () => {
    const { core } = pool({ workers: ["a"], capacityTokens: 40 });
    const running = admit(core, prompt(0), ticket());
    const t = ticket();
    const gone = admit(core, prompt(1), t);
    const stays = admit(core, prompt(2), ticket());
    expect(core.leaveQueue(t.ticket)).toBe(true);
    await flush();
    expect(gone.outcome).toEqual({ kind: "left" });
    settle(core, running.outcome);
    await flush();
    expect(stays.outcome?.kind).toBe("routed");
    expect(core.sizes().activeRequests).toBe(1);
    // Leaves after its admission (the edge's call came too late): its load is released.
    expect(core.leaveQueue(stays.ticket)).toBe(true);
    expect(core.sizes().activeRequests).toBe(0);
    expect(core.leaveQueue("never-seen")).toBe(false);
  });

  it("two tenants, one bursting: each gets half the admissions while both wait (±1)", async () => {
    const { core } = pool({ workers: ["a", "b"], capacityTokens: 40 });
    const seen: Outcome[] = [];
    const tenantOf = new Map<string, string>();
    const burst = Array.from({ length: 40 }, (_, k) => ({ tenant: "burst", b: admit(core, prompt(k), ticket({ tenant: "burst", decodeBudget: 16 }), seen) }));
    const steady = Array.from({ length: 10 }, (_, k) => ({ tenant: "steady", b: admit(core, prompt(100 + k), ticket({ tenant: "steady", decodeBudget: 16 }), seen) }));
    for (const x of [...burst, ...steady]) tenantOf.set(x.b.ticket, x.tenant);
    await flush();
    const admittedOrder: string[] = [];
    const byReceipt = new Map<string, string>();
    const note = () => {
      for (const x of [...burst, ...steady])
        if (x.b.outcome?.kind === "routed" && !byReceipt.has(x.b.outcome.decision.receiptId)) {
          byReceipt.set(x.b.outcome.decision.receiptId, x.tenant);
          admittedOrder.push(x.tenant);
        }
    };
    note();
    expect(admittedOrder).toEqual(["burst", "burst"]); // the burst came first and took both workers
    // Run the pool: settle the oldest running request, one at a time, until steady's backlog is gone.
    const settled = new Set<string>();
    while (steady.some((x) => x.b.outcome === null)) {
      const o = seen.find((s) => s.kind === "routed" && !settled.has(s.decision.receiptId))!;
      if (o.kind === "routed") settled.add(o.decision.receiptId);
      settle(core, o);
      await flush();
      note();
    }
    const whileBoth = admittedOrder.slice(2);
    const steadyShare = whileBoth.filter((t) => t === "steady").length;
    const burstShare = whileBoth.length - steadyShare;
    expect(steadyShare).toBe(10);
    expect(Math.abs(steadyShare - burstShare)).toBeLessThanOrEqual(1);
  });
});

describe("session affinity", () => {
  const withKey = (core: RoutingCore, tokens: number[], key: string) =>
    core.admit({ localHashes: localBlockHashes(tokens, BS), isl: tokens.length, affinityKey: key }, ticket()) as Outcome;

  it("keeps a conversation on its worker under the load cap; exact overlap wins when it knows better", async () => {
    const { affinityKeyOf } = await import("../../../src/edge/chat/affinity.ts");
    const { core } = pool({ workers: ["a", "b"] });
    store(core, "b", prompt(1));
    const key = affinityKeyOf("tenant-1", { promptCacheKey: "conv-1", sessionHeader: null })!;
    const turn1 = withKey(core, prompt(1), key);
    expect(turn1).toMatchObject({ kind: "routed", decision: { workerId: "b", overlapBlocks: 10 } });
    // A cold prompt: b has a request in flight and a none, so routing alone would pick a; the key keeps it on b.
    expect(core.peek({ localHashes: localBlockHashes(prompt(2), BS), isl: 40 }).workerId).toBe("a");
    const turn2 = withKey(core, prompt(2), key);
    expect(turn2).toMatchObject({ kind: "routed", decision: { workerId: "b" } });
    // Another tenant's same prompt_cache_key is another key: routing decides.
    const other = affinityKeyOf("tenant-2", { promptCacheKey: "conv-1", sessionHeader: null })!;
    expect(other).not.toBe(key);
    expect(withKey(core, prompt(3), other)).toMatchObject({ decision: { workerId: "a" } });
    // a holds this prompt: exact overlap beats the prior, and the key follows it.
    store(core, "a", prompt(4));
    expect(withKey(core, prompt(4), key)).toMatchObject({ decision: { workerId: "a", overlapBlocks: 10 } });
    expect(withKey(core, prompt(5), key)).toMatchObject({ decision: { workerId: "a" } });
  });

  it("past the load cap the key yields to routing", () => {
    const { core } = pool({ workers: ["a", "b"] });
    const first = withKey(core, prompt(1), "k");
    const home = first.kind === "routed" ? first.decision.workerId : "";
    // Home holds 1, 2, 3 … while the other holds none: the cap is 2 × the others' mean + 2.
    const homes: string[] = [];
    for (let i = 2; i < 8; i++) {
      const o = withKey(core, prompt(i), "k");
      homes.push(o.kind === "routed" ? o.decision.workerId : "none");
    }
    expect(homes.filter((w) => w === home).length).toBeGreaterThanOrEqual(2);
    expect(homes.some((w) => w !== home)).toBe(true);
  });

  it("the key comes from prompt_cache_key, else x-session-id, else safety_identifier, else user", async () => {
    const { affinityKeyOf, MAX_SESSION_ID_CHARS } = await import("../../../src/edge/chat/affinity.ts");
    const t = "tenant";
    expect(affinityKeyOf(t, { sessionHeader: null })).toBeNull();
    const byUser = affinityKeyOf(t, { sessionHeader: null, user: "u" });
    expect(affinityKeyOf(t, { sessionHeader: null, user: "u", safetyIdentifier: "s" })).not.toBe(byUser);
    expect(affinityKeyOf(t, { sessionHeader: "h", user: "u", safetyIdentifier: "s" })).toBe(affinityKeyOf(t, { sessionHeader: "h" }));
    expect(affinityKeyOf(t, { promptCacheKey: "p", sessionHeader: "h" })).toBe(affinityKeyOf(t, { promptCacheKey: "p", sessionHeader: null }));
    expect(affinityKeyOf(t, { sessionHeader: "x".repeat(MAX_SESSION_ID_CHARS + 1) })).toBeNull();
    expect(byUser).toMatch(/^a-[0-9a-f]{32}$/);
  });
});

describe("drain", () => {
  it("a draining worker takes no new or waiting request; its running ones finish; its next life is up", async () => {
    const { core } = pool({ workers: ["a", "b"], capacityTokens: 40 });
    const first = admit(core, prompt(1), ticket());
    const second = admit(core, prompt(2), ticket());
    const waiting = admit(core, prompt(3), ticket());
    if (first.outcome?.kind !== "routed" || second.outcome?.kind !== "routed") throw new Error("both run at once");
    const drained = first.outcome.decision.workerId;
    const other = second.outcome.decision.workerId;
    expect(core.setStatus(drained, "draining")?.status).toBe("draining");
    settle(core, first.outcome); // the drained worker frees room, but takes nothing: the waiting request stays
    await flush();
    expect(waiting.outcome).toBeNull();
    settle(core, second.outcome);
    await flush();
    expect(waiting.outcome).toMatchObject({ kind: "routed", decision: { workerId: other } });
    expect(core.workers().find((w) => w.workerId === drained)).toMatchObject({ status: "draining", activeRequests: 0 });
    // Its relay reconnects to the same life (same epoch): still draining, still takes nothing.
    core.hello({ type: "hello", workerId: drained, url: `http://${drained}`, blockSize: BS, epoch: 1, modelName: "m", contract: null, kvEvents: true, kvCapacityTokens: 40 }, drained);
    expect(core.workers().find((w) => w.workerId === drained)?.status).toBe("draining");
    settle(core, waiting.outcome);
    const held = admit(core, prompt(5), ticket());
    expect(held.outcome).toMatchObject({ kind: "routed", decision: { workerId: other } });
    settle(core, held.outcome!);
    // Its restart: a new epoch's hello joins the pool up.
    core.hello({ type: "hello", workerId: drained, url: `http://${drained}`, blockSize: BS, epoch: 2, modelName: "m", contract: null, kvEvents: true, kvCapacityTokens: 40 }, drained);
    expect(admit(core, prompt(4), ticket()).outcome).toMatchObject({ kind: "routed", decision: { workerId: drained } });
  });
});

describe("bands and Retry-After", () => {
  it("maps service_tier and SGLang priority onto bands; priority only where allowed", () => {
    expect(bandOf({ priorityAllowed: false })).toBe(BAND_DEFAULT);
    expect(bandOf({ serviceTier: "flex", priorityAllowed: false })).toBe(BAND_FLEX);
    expect(bandOf({ serviceTier: "priority", priorityAllowed: true })).toBe(BAND_PRIORITY);
    expect(bandOf({ serviceTier: "fast", priorityAllowed: true })).toBe(BAND_PRIORITY);
    expect(bandOf({ serviceTier: "priority", priorityAllowed: false })).toBe(BAND_DEFAULT);
    expect(bandOf({ serviceTier: "scale", priorityAllowed: true })).toBe(BAND_DEFAULT);
    expect(bandOf({ serviceTier: "auto", priorityAllowed: true })).toBe(BAND_DEFAULT);
    expect(bandOf({ priority: 5, priorityAllowed: true })).toBe(BAND_PRIORITY);
    expect(bandOf({ priority: -1, priorityAllowed: true })).toBe(BAND_FLEX);
    expect(bandOf({ priority: 0, serviceTier: "priority", priorityAllowed: true })).toBe(BAND_PRIORITY);
    // Either field asking for flex is honoured.
    expect(bandOf({ priority: 5, serviceTier: "flex", priorityAllowed: true })).toBe(BAND_FLEX);
  });

  it("computes Retry-After as the time the queue ahead takes to drain, within 1…60 s", () => {
    const d = new DrainRate(10_000);
    const t0 = 5_000_000;
    expect(d.retryAfterSeconds(t0, 10, 30)).toBe(30); // nothing drained yet: the fallback
    for (let i = 0; i < 20; i++) d.record(t0 + i * 100); // 20 finished within the 10 s window: 2/s
    expect(d.perSecond(t0 + 2_000)).toBe(2);
    expect(d.retryAfterSeconds(t0 + 2_000, 10, 30)).toBe(5);
    expect(d.retryAfterSeconds(t0 + 2_000, 1_000, 30)).toBe(60);
    expect(d.retryAfterSeconds(t0 + 2_000, 0, 30)).toBe(1);
    expect(d.perSecond(t0 + 30_000)).toBe(0); // the window moved past them
  });
});

describe("admission signals", () => {
  it("exports queue depth, admissions, refusals and waits per band and tenant, summed over shards", async () => {
    const { renderMetrics } = await import("../../../src/metrics/pool-families.ts");
    const { mergeShardSnapshots } = await import("../../../src/metrics/merge-shards.ts");
    const { parsePrometheusText, sampleValue } = await import("../../helpers/prom-parser.ts");
    const { core, clock } = pool({ workers: ["a"], capacityTokens: 40, admission: { maxWaitMs: 1_000 } });
    const running = admit(core, prompt(0), ticket());
    const waits = admit(core, prompt(1), ticket({ tenant: "t-1", band: BAND_FLEX }));
    admit(core, prompt(2), ticket({ tenant: "t-2" }));
    admit(core, prompt(3), ticket({ tenant: "t-2" }));
    clock.advance(400);
    settle(core, running.outcome);
    await flush();
    expect(waits.outcome).toBeNull(); // default band before flex
    const one = core.metricsSnapshot();
    const f = parsePrometheusText(renderMetrics([{ model: "m", snapshot: one }]));
    expect(sampleValue(f, "kvedge_admission_queue_depth", { model: "m", band: "default" })).toBe(1);
    expect(sampleValue(f, "kvedge_admission_queue_depth", { model: "m", band: "flex" })).toBe(1);
    expect(sampleValue(f, "kvedge_admission_admitted_total", { model: "m", band: "default", wait: "immediate" })).toBe(1);
    expect(sampleValue(f, "kvedge_admission_admitted_total", { model: "m", band: "default", wait: "queued" })).toBe(1);
    expect(sampleValue(f, "kvedge_admission_wait_seconds_count", { model: "m", band: "default" })).toBe(1);
    expect(sampleValue(f, "kvedge_admission_wait_seconds_sum", { model: "m", band: "default" })).toBeCloseTo(0.4);
    expect(sampleValue(f, "kvedge_admission_tenant_queue_depth", { model: "m", tenant: "t-2" })).toBe(1);
    clock.advance(1_000);
    await flush();
    const later = parsePrometheusText(renderMetrics([{ model: "m", snapshot: core.metricsSnapshot() }]));
    expect(sampleValue(later, "kvedge_admission_refused_total", { model: "m", band: "flex", reason: "deadline" })).toBe(1);
    expect(sampleValue(later, "kvedge_admission_queue_depth", { model: "m", band: "flex" })).toBe(0);
    // Two shards' queues: depths and counters add up.
    const merged = mergeShardSnapshots([one, one]);
    expect(merged.admission!.bands[BAND_DEFAULT]).toMatchObject({ queued: 2, admittedImmediately: 2, admittedAfterWait: 2 });
    expect(merged.admission!.queuedByTenant["t-2"]).toBe(2);
  });
});
