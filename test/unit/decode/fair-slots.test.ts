/**
 * FairSlots (services/decode/fair-slots.ts): the decode service's probe and download slots shared
 * by client label. One client holds at most its share of the slots and of the queue; a freed slot
 * goes to the waiting client holding the fewest; a waiter whose signal aborts leaves the queue.
 */
import { describe, expect, it } from "vitest";
import { FairSlots } from "../../../services/decode/fair-slots.ts";
import { QueueFullError } from "../../../services/decode/concurrency.ts";

/** Runs `fn` in a slot of `label`, as the service does (claim, work, release). */
async function inSlot<T>(slots: FairSlots, label: string | null, fn: () => Promise<T>, signal?: AbortSignal): Promise<T> {
  const key = await slots.claim(label, signal).granted;
  try {
    return await fn();
  } finally {
    slots.release(key);
  }
}

/** A task that runs until released; `started` lists task names in start order. */
function harness(slots: FairSlots) {
  const started: string[] = [];
  const release = new Map<string, () => void>();
  const run = (client: string | null, name: string, signal?: AbortSignal) =>
    inSlot(
      slots,
      client,
      () =>
        new Promise<string>((resolve) => {
          started.push(name);
          release.set(name, () => resolve(name));
        }),
      signal,
    );
  const done = (name: string) => release.get(name)!();
  return { started, run, done };
}
const tick = () => new Promise((r) => setTimeout(r, 0));

describe("FairSlots", () => {
  it("shares: at least one, the floor of total × share otherwise", () => {
    expect(new FairSlots({ limit: 8, maxQueue: 64, share: 0.5 })).toMatchObject({ perClient: 4, perClientQueue: 32 });
    expect(new FairSlots({ limit: 2, maxQueue: 1, share: 0.5 })).toMatchObject({ perClient: 1, perClientQueue: 1 });
    expect(new FairSlots({ limit: 1, maxQueue: 3, share: 0.5 })).toMatchObject({ perClient: 1, perClientQueue: 1 });
    expect(new FairSlots({ limit: 8, maxQueue: 0, share: 0.5 })).toMatchObject({ perClient: 4, perClientQueue: 0 });
    expect(new FairSlots({ limit: 8, maxQueue: 8, share: 1 })).toMatchObject({ perClient: 8, perClientQueue: 8 });
  });

  it("one client cannot take every slot: the rest stay free for the next client", async () => {
    const slots = new FairSlots({ limit: 4, maxQueue: 8, share: 0.5 });
    const h = harness(slots);
    const a = [1, 2, 3, 4].map((i) => h.run("a", `a${i}`));
    await tick();
    expect(h.started).toEqual(["a1", "a2"]);
    expect(slots).toMatchObject({ inUse: 2, waiting: 2 });
    // A second client starts at once, although a's calls came first.
    const b = h.run("b", "b1");
    await tick();
    expect(h.started).toEqual(["a1", "a2", "b1"]);
    h.done("a1");
    await tick();
    expect(h.started).toEqual(["a1", "a2", "b1", "a3"]);
    for (const n of ["a2", "a3", "b1"]) h.done(n);
    await tick();
    h.done("a4");
    expect(await Promise.all([...a, b])).toEqual(["a1", "a2", "a3", "a4", "b1"]);
    expect(slots).toMatchObject({ inUse: 0, waiting: 0, clients: 0, peakInUse: 3 });
  });

  it("with share 1 one client may hold every slot (the old exposure); a freed slot still goes to the client holding fewest", async () => {
    const slots = new FairSlots({ limit: 2, maxQueue: 8, share: 1 });
    const h = harness(slots);
    const a = [1, 2, 3].map((i) => h.run("a", `a${i}`));
    const b = h.run("b", "b1");
    await tick();
    expect(h.started).toEqual(["a1", "a2"]);
    h.done("a1");
    await tick();
    expect(h.started).toEqual(["a1", "a2", "b1"]);
    h.done("a2");
    await tick();
    expect(h.started).toEqual(["a1", "a2", "b1", "a3"]);
    for (const n of ["a3", "b1"]) h.done(n);
    await Promise.all([...a, b]);
  });

  it("a freed slot goes to the waiting client holding the fewest, its oldest call first", async () => {
    const slots = new FairSlots({ limit: 3, maxQueue: 9, share: 1 });
    const h = harness(slots);
    const all = [h.run("a", "a1"), h.run("a", "a2"), h.run("b", "b1"), h.run("a", "a3"), h.run("a", "a4"), h.run("c", "c1"), h.run("b", "b2")];
    await tick();
    expect(h.started).toEqual(["a1", "a2", "b1"]);
    // Waiting a3 a4, c1, b2. a1 ends: a holds 1, b 1, c 0 → c1.
    h.done("a1");
    await tick();
    expect(h.started.at(-1)).toBe("c1");
    // a2 ends: a holds 0, b 1, c 1 → a3 (a's oldest).
    h.done("a2");
    await tick();
    expect(h.started.at(-1)).toBe("a3");
    // b1 ends: a 1, b 0, c 1 → b2, although a4 waited longer.
    h.done("b1");
    await tick();
    expect(h.started.at(-1)).toBe("b2");
    for (const n of ["c1", "a3", "b2"]) h.done(n);
    await tick();
    h.done("a4");
    await Promise.all(all);
  });

  it("one client fills at most its share of the queue; the whole queue is bounded too", async () => {
    // 2 slots, 1 per client; 4 waiting, 2 per client.
    const slots = new FairSlots({ limit: 2, maxQueue: 4, share: 0.5 });
    const h = harness(slots);
    const a = [h.run("a", "a1"), h.run("a", "a2"), h.run("a", "a3")];
    await expect(h.run("a", "a4")).rejects.toBeInstanceOf(QueueFullError);
    const others = [h.run("b", "b1"), h.run("c", "c1"), h.run("b", "b2")];
    await expect(h.run("d", "d1")).rejects.toBeInstanceOf(QueueFullError);
    await tick();
    expect(h.started).toEqual(["a1", "b1"]);
    expect(slots).toMatchObject({ inUse: 2, waiting: 4, clients: 3 });
    // b1 ends: a2 waited longest, but a holds a slot and c holds none.
    h.done("b1");
    await tick();
    expect(h.started.at(-1)).toBe("c1");
    // a1 ends: a and b hold none; a2 is older than b2.
    h.done("a1");
    await tick();
    expect(h.started.at(-1)).toBe("a2");
    for (const n of ["c1", "a2"]) h.done(n);
    await tick();
    expect(h.started.slice(-2).sort()).toEqual(["a3", "b2"]);
    for (const n of ["a3", "b2"]) h.done(n);
    await Promise.all([...a, ...others]);
    expect(slots).toMatchObject({ inUse: 0, waiting: 0, clients: 0 });
  });

  it("a waiter whose signal aborts leaves the queue without ever taking a slot", async () => {
    const slots = new FairSlots({ limit: 1, maxQueue: 4, share: 1 });
    const h = harness(slots);
    const first = h.run("a", "a1");
    const ctrl = new AbortController();
    const gone = h.run("b", "b1", ctrl.signal);
    const next = h.run("c", "c1");
    await tick();
    expect(slots.waiting).toBe(2);
    ctrl.abort(new Error("caller left"));
    await expect(gone).rejects.toThrow("caller left");
    expect(slots.waiting).toBe(1);
    h.done("a1");
    await tick();
    expect(h.started).toEqual(["a1", "c1"]);
    h.done("c1");
    await Promise.all([first, next]);
    await expect(inSlot(slots, "x", async () => 1, AbortSignal.abort(new Error("already")))).rejects.toThrow("already");
    expect(slots).toMatchObject({ inUse: 0, waiting: 0 });
  });

  it("unlabeled calls (no x-kvedge-client: an operator, a local fleet) are not capped per client, only by the totals", async () => {
    const slots = new FairSlots({ limit: 4, maxQueue: 4, share: 0.5 });
    const h = harness(slots);
    const anon = [1, 2, 3, 4, 5, 6, 7].map((i) => h.run(null, `n${i}`));
    await tick();
    expect(h.started).toEqual(["n1", "n2", "n3", "n4"]);
    expect(slots.waiting).toBe(3);
    // A labeled client waits in line with them; it holds none, so it goes first.
    const b = h.run("b", "b1");
    await expect(h.run(null, "n8")).rejects.toBeInstanceOf(QueueFullError);
    h.done("n1");
    await tick();
    expect(h.started.at(-1)).toBe("b1");
    for (const n of ["n2", "n3", "n4", "b1"]) h.done(n);
    await tick();
    for (const n of ["n5", "n6", "n7"]) h.done(n);
    await Promise.all([...anon, b]);
    expect(slots).toMatchObject({ inUse: 0, waiting: 0, clients: 0 });
  });

  it("a claim joined by another client starts from whichever line reaches it first, charged to that client", async () => {
    const slots = new FairSlots({ limit: 4, maxQueue: 8, share: 0.5 });
    const h = harness(slots);
    // a holds its share (2); its claim for shared work waits in a's line.
    const a = [h.run("a", "a1"), h.run("a", "a2")];
    await tick();
    const claim = slots.claim("a");
    let charged: string | null = null;
    void claim.granted.then((k) => (charged = k));
    await tick();
    expect(charged).toBeNull();
    expect(slots.waiting).toBe(1);
    // b wants the same work and holds nothing: the work starts at once, in b's share.
    claim.join("b");
    await tick();
    expect(charged).toBe("b");
    expect(slots).toMatchObject({ inUse: 3, waiting: 0 });
    slots.release("b");
    // Joined while both lines are full: the first line to reach it wins, and the other entry leaves.
    const c = [h.run("c", "c1"), h.run("c", "c2")];
    await tick();
    const both = slots.claim("a");
    both.join("c");
    expect(slots.waiting).toBe(2);
    h.done("c1");
    expect(await both.granted).toBe("c");
    expect(slots.waiting).toBe(0);
    slots.release("c");
    for (const n of ["a1", "a2", "c2"]) h.done(n);
    await Promise.all([...a, ...c]);
    expect(slots).toMatchObject({ inUse: 0, waiting: 0, clients: 0 });
  });

  it("a joined claim is dropped only when every waiter's signal has aborted", async () => {
    const slots = new FairSlots({ limit: 1, maxQueue: 8, share: 1 });
    const h = harness(slots);
    const first = h.run("x", "x1");
    const ca = new AbortController();
    const cb = new AbortController();
    const claim = slots.claim("a", ca.signal);
    claim.join("b", cb.signal);
    expect(slots.waiting).toBe(2);
    ca.abort(new Error("a left"));
    expect(slots.waiting).toBe(1);
    cb.abort(new Error("b left"));
    await expect(claim.granted).rejects.toThrow("b left");
    expect(slots.waiting).toBe(0);
    // A claim whose line is full fails at once.
    const full = new FairSlots({ limit: 1, maxQueue: 0, share: 1 });
    await full.claim("a").granted;
    await expect(full.claim("b").granted).rejects.toBeInstanceOf(QueueFullError);
    h.done("x1");
    await first;
  });

  it("a task that throws gives its slot back", async () => {
    const slots = new FairSlots({ limit: 1, maxQueue: 1, share: 1 });
    await expect(inSlot(slots, "a", async () => Promise.reject(new Error("boom")))).rejects.toThrow("boom");
    expect(await inSlot(slots, "a", async () => 7)).toBe(7);
    expect(slots).toMatchObject({ inUse: 0, clients: 0 });
  });
});
