/**
 * The receipt queue in real workerd (Miniflare), requests in one isolate: request A's settlement
 * waits for request B and rides B's route call (src/edge/chat/route.ts), B concurrent (its call
 * answers after A's flush timer) or B one client's next turn, sent after A's answer; a turn no
 * other request follows sends its settlement alone on its timer. A's promise must settle in A's own context (its timer), never from B's answer: a
 * request whose waitUntil waits on a promise only another request settles is judged hung by
 * workerd, its continuations dropped with a cross-request warning (receipt-outbox.ts).
 */
import type { Miniflare } from "miniflare";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startBundledWorker } from "../../helpers/bundled-worker.ts";

const HERE = dirname(fileURLToPath(import.meta.url));
let mf: Miniflare;
let runtimeOutput: () => string;

beforeAll(async () => {
  ({ mf, output: runtimeOutput } = await startBundledWorker(join(HERE, "receipt-outbox-worker.ts"), { compatibilityDate: "2026-07-30", durableObjects: { INDEX: "Index" }, cf: false }));
}, 60_000);

afterAll(async () => {
  await mf?.dispose();
});

describe("a receipt carried by another request's call (real workerd)", () => {
  it("reaches the index on the carrier's call; its own request's promise settles in that request, with no cross-request warning", async () => {
    const [a, b] = await Promise.all([mf.dispatchFetch("http://edge/a"), mf.dispatchFetch("http://edge/b")]);
    expect(await a.text()).toBe("a");
    expect(await b.text()).toBe("r-b");
    // Past B's call (60 ms) and A's timer; A's waitUntil has run its continuation by then.
    await new Promise((r) => setTimeout(r, 300));
    const seen = (await (await mf.dispatchFetch("http://edge/seen")).json()) as { index: string[]; continued: string[] };
    expect(seen.index).toEqual(["carried:settle:A"]);
    expect(seen.continued).toEqual(["a"]);
    expect(runtimeOutput()).not.toMatch(/different request context/);
  });

  it("one client's turns: a turn's settlement rides the next turn's route, sent after the answer; the last turn's goes alone on its timer", async () => {
    expect(await (await mf.dispatchFetch("http://edge/turn/T1")).text()).toBe("T1");
    expect(await (await mf.dispatchFetch("http://edge/next/T2")).text()).toBe("r-T2");
    expect(await (await mf.dispatchFetch("http://edge/turn/T3")).text()).toBe("T3");
    const seen = async () => (await (await mf.dispatchFetch("http://edge/seen-turns")).json()) as { index: string[]; continued: string[] };
    expect((await seen()).index).toEqual(["carried:settle:T1"]);
    // T3's timer (TURNS_FLUSH_MS, 2 s) sends it; T1's settled T1's own promise.
    for (let i = 0; i < 100 && (await seen()).index.length < 2; i++) await new Promise((r) => setTimeout(r, 50));
    const after = await seen();
    expect(after.index).toEqual(["carried:settle:T1", "alone:settle:T3"]);
    expect(after.continued).toEqual(expect.arrayContaining(["T1", "T3"]));
    expect(runtimeOutput()).not.toMatch(/different request context/);
  });
});
