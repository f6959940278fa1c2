/**
 * CancellableFlight (services/decode/concurrency.ts): shared work is cancelled when its last caller
 * leaves, unless it has committed (a probe that has started cannot be stopped): then it stays
 * joinable until it settles, so a caller arriving later shares it instead of starting it again.
 */
import { describe, expect, it } from "vitest";
import { CancellableFlight } from "../../../services/decode/concurrency.ts";

function deferred<T>() {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

describe("CancellableFlight", () => {
  it("work nobody waits for is aborted and forgotten; a later caller starts it again", async () => {
    const flight = new CancellableFlight<string>();
    let starts = 0;
    let aborted = false;
    const work = (signal: AbortSignal) => {
      starts++;
      return new Promise<string>((resolve, reject) => {
        signal.addEventListener("abort", () => {
          aborted = true;
          reject(signal.reason);
        });
        setTimeout(() => resolve("done"), 50);
      });
    };
    const c1 = new AbortController();
    const first = flight.do("k", work, c1.signal);
    c1.abort(new Error("left"));
    await expect(first.promise).rejects.toThrow("left");
    expect(aborted).toBe(true);
    expect(flight.size).toBe(0);
    const second = flight.do("k", work, new AbortController().signal);
    expect(second.shared).toBe(false);
    expect(await second.promise).toBe("done");
    expect(starts).toBe(2);
  });

  it("a caller already gone starts nothing", async () => {
    const flight = new CancellableFlight<string>();
    let starts = 0;
    const out = flight.do("k", async () => String(++starts), AbortSignal.abort(new Error("gone")));
    await expect(out.promise).rejects.toThrow("gone");
    expect(starts).toBe(0);
    expect(flight.size).toBe(0);
  });

  it("committed work survives its callers leaving and is shared by the next caller (one run)", async () => {
    const flight = new CancellableFlight<string>();
    let starts = 0;
    const gate = deferred<string>();
    const work = (signal: AbortSignal, commit: () => void) => {
      starts++;
      commit();
      signal.addEventListener("abort", () => {
        throw new Error("committed work must not be aborted");
      });
      return gate.promise;
    };
    const c1 = new AbortController();
    const first = flight.do("k", work, c1.signal);
    c1.abort(new Error("left"));
    await expect(first.promise).rejects.toThrow("left");
    expect(flight.size).toBe(1);
    const later = flight.do("k", work, new AbortController().signal);
    expect(later.shared).toBe(true);
    gate.resolve("probed");
    expect(await later.promise).toBe("probed");
    expect(starts).toBe(1);
    await Promise.resolve();
    expect(flight.size).toBe(0);
  });
});
