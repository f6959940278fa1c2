/**
 * The media store's leases (media-store.ts `lease`, granted by `POST /v1/store/held`): a leased item
 * is not evicted under byte pressure before its lease ends (and is evicted like any other after it);
 * past a lease bound (bytes, items, one owner's bytes) a new lease is refused and the old ones are
 * kept; a renewal moves the end; a store without leases grants none. Real files in a temp
 * directory; the lease clock is the store's injected `now`.
 */
import { mkdtempSync, writeFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { MediaStore, type MediaStoreLimits } from "../../../services/decode/media-store.ts";

const digestOf = (n: number): string => n.toString(16).padStart(64, "0");

async function storeWith(limits: Omit<MediaStoreLimits, "now">): Promise<{ store: MediaStore; clock: { t: number }; put(n: number, size: number, client?: string | null): Promise<void> }> {
  const dir = mkdtempSync(path.join(tmpdir(), "kvedge-lease-"));
  const clock = { t: 1_000 };
  const store = await MediaStore.open(path.join(dir, "store"), { ...limits, now: () => clock.t });
  let seq = 0;
  return {
    store,
    clock,
    async put(n, size, client = "c1") {
      const spooled = path.join(dir, `spool-${++seq}`);
      writeFileSync(spooled, Buffer.alloc(size, n));
      await store.put(spooled, digestOf(n), size, client);
    },
  };
}

const LEASES = { leaseMs: 60_000, maxBytes: 300, maxItems: 10, clientMaxBytes: 300, clientMaxItems: 10 };

describe("media store leases", () => {
  it("a leased item is not evicted under byte pressure before its lease ends; after it, it is", async () => {
    const { store, clock, put } = await storeWith({ maxBytes: 400, maxItems: 100, clientMaxBytes: 400, leases: LEASES });
    await put(1, 100);
    expect(store.lease(digestOf(1))).toBe(60_000);
    // Item 1 is the least recently used: four more 100-byte items would evict it first without its lease.
    for (let n = 2; n <= 6; n++) await put(n, 100);
    expect(store.has(digestOf(1))).toBe(true);
    expect(existsSync(store.use(digestOf(1))!.path)).toBe(true);
    expect(store.stats).toMatchObject({ items: 4, bytes: 400, leased: 1, leasedBytes: 100 });
    // Still leased 1 ms before its end; gone at the first eviction after it.
    clock.t += 59_999;
    await put(7, 100);
    expect(store.has(digestOf(1))).toBe(true);
    clock.t += 1;
    store.use(digestOf(5));
    store.use(digestOf(6));
    store.use(digestOf(7));
    await put(8, 100);
    expect(store.has(digestOf(1))).toBe(false);
    expect(store.stats.leased).toBe(0);
  });

  it("a renewal moves the lease's end", async () => {
    const { store, clock, put } = await storeWith({ maxBytes: 200, maxItems: 100, clientMaxBytes: 200, leases: LEASES });
    await put(1, 100);
    store.lease(digestOf(1));
    clock.t += 50_000;
    expect(store.lease(digestOf(1))).toBe(60_000);
    clock.t += 50_000;
    for (let n = 2; n <= 4; n++) await put(n, 100);
    expect(store.has(digestOf(1))).toBe(true);
  });

  it("past the leased-bytes, leased-items and per-owner bounds new leases are refused, old ones kept", async () => {
    const { store, put } = await storeWith({ maxBytes: 1_000, maxItems: 100, clientMaxBytes: 1_000, leases: { leaseMs: 60_000, maxBytes: 250, maxItems: 3, clientMaxBytes: 150, clientMaxItems: 3 } });
    await put(1, 100, "a");
    await put(2, 100, "b");
    await put(3, 100, "b");
    await put(4, 40, "c");
    await put(5, 10, "c");
    expect(store.lease(digestOf(1))).toBe(60_000);
    expect(store.lease(digestOf(2))).toBe(60_000);
    // Owner b would hold 200 leased bytes (its bound 150): refused.
    expect(store.lease(digestOf(3))).toBe(0);
    expect(store.lease(digestOf(4))).toBe(60_000);
    // Three leases held: the item bound refuses a fourth; renewing a held one is no new lease.
    expect(store.lease(digestOf(5))).toBe(0);
    expect(store.lease(digestOf(1))).toBe(60_000);
    expect(store.stats).toMatchObject({ leased: 3, leasedBytes: 240, leasesRefused: 2 });
    // Not held: no lease.
    expect(store.lease(digestOf(99))).toBe(0);
  });

  it("one owner's leased items are bounded like its bytes, the unlabelled owner's too", async () => {
    const { store, put } = await storeWith({ maxBytes: 1_000, maxItems: 100, clientMaxBytes: 1_000, leases: { leaseMs: 60_000, maxBytes: 1_000, maxItems: 10, clientMaxBytes: 1_000, clientMaxItems: 2 } });
    for (let n = 1; n <= 3; n++) await put(n, 10, "a");
    for (let n = 4; n <= 6; n++) await put(n, 10, null);
    await put(7, 10, "b");
    // Owner a: two small leases, the third refused though far below its bytes.
    expect([1, 2, 3].map((n) => store.lease(digestOf(n)))).toEqual([60_000, 60_000, 0]);
    // Unlabelled items (the edge knew no client) are one owner, bounded the same way.
    expect([4, 5, 6].map((n) => store.lease(digestOf(n)))).toEqual([60_000, 60_000, 0]);
    // Another owner still gets its lease; a renewal of a held one is no new lease.
    expect(store.lease(digestOf(7))).toBe(60_000);
    expect(store.lease(digestOf(1))).toBe(60_000);
    expect(store.stats).toMatchObject({ leased: 5, leasedBytes: 50, leasesRefused: 2 });
  });

  it("the unlabelled owner's leased bytes are bounded like a client's", async () => {
    const { store, put } = await storeWith({ maxBytes: 1_000, maxItems: 100, clientMaxBytes: 1_000, leases: { leaseMs: 60_000, maxBytes: 1_000, maxItems: 10, clientMaxBytes: 150, clientMaxItems: 10 } });
    await put(1, 100, null);
    await put(2, 100, null);
    expect(store.lease(digestOf(1))).toBe(60_000);
    expect(store.lease(digestOf(2))).toBe(0);
  });

  it("the leased-bytes bound refuses a lease that would pass it", async () => {
    const { store, put } = await storeWith({ maxBytes: 1_000, maxItems: 100, clientMaxBytes: 1_000, leases: { leaseMs: 60_000, maxBytes: 150, maxItems: 10, clientMaxBytes: 1_000, clientMaxItems: 10 } });
    await put(1, 100);
    await put(2, 100);
    expect(store.lease(digestOf(1))).toBe(60_000);
    expect(store.lease(digestOf(2))).toBe(0);
  });

  it("a store without leases grants none", async () => {
    const { store, put } = await storeWith({ maxBytes: 1_000, maxItems: 100, clientMaxBytes: 1_000 });
    await put(1, 100);
    expect(store.lease(digestOf(1))).toBe(0);
  });
});
