/** Local-hash pages (src/routing-index/hash-page.ts): each shard's smallest above the cursor, merged at the edge. */
import { describe, expect, it } from "vitest";
import { localHashPage, mergeLocalHashPages } from "../../../src/routing-index/hash-page.ts";

const hex = (n: number): string => n.toString(16).padStart(16, "0");
/** A deterministic shuffle of 0..n-1 as hashes (the index walks its table in no particular order). */
const shuffled = (n: number, seed: number): string[] => {
  const a = Array.from({ length: n }, (_, i) => hex(i * 7919 + 3));
  let s = seed;
  for (let i = a.length - 1; i > 0; i--) {
    s = (s * 1103515245 + 12345) % 2 ** 31;
    const j = s % (i + 1);
    [a[i], a[j]] = [a[j]!, a[i]!];
  }
  return a;
};

describe("local hash pages", () => {
  it("one shard: pages cover every hash once, ascending, and the last says no more", () => {
    const all = shuffled(2500, 1);
    const seen: string[] = [];
    let cursor: string | null = null;
    for (let pages = 0; pages < 10; pages++) {
      const page = mergeLocalHashPages([localHashPage(all, cursor, 1000)], 1000);
      seen.push(...page.localHashes);
      cursor = page.nextCursor;
      if (cursor === null) break;
    }
    expect(cursor).toBeNull();
    expect(seen).toEqual([...all].sort());
    expect(localHashPage(all, null, 2500)).toEqual({ hashes: [...all].sort(), more: false });
    expect(localHashPage([], null, 10)).toEqual({ hashes: [], more: false });
  });

  it("shards: the merged page is the pool's smallest, whichever shard holds them; equal hashes all come, none split over pages", () => {
    const base = shuffled(3001, 2);
    const shards = [0, 1, 2].map((k) => base.filter((_, i) => i % 3 === k));
    // A multiset: a hash in two shards, and one held 300 times in one (more than a page).
    shards[1]!.push(shards[0]![0]!);
    for (let i = 0; i < 300; i++) shards[2]!.push(shards[2]![0]!);
    const all = shards.flat();
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const page = mergeLocalHashPages(shards.map((s) => localHashPage(s, cursor, 128)), 128);
      const last = page.localHashes[page.localHashes.length - 1];
      // Over the limit only by copies of the page's last hash.
      expect(page.localHashes.filter((h) => h !== last).length).toBeLessThan(128);
      seen.push(...page.localHashes);
      cursor = page.nextCursor;
    } while (cursor !== null);
    expect(seen).toEqual([...all].sort());
  });

  it("order is stable while hashes come and go: nothing before the cursor moves", () => {
    const all = shuffled(300, 3);
    const first = mergeLocalHashPages([localHashPage(all, null, 100)], 100);
    const later = [...all.filter((h) => h !== first.localHashes[5]), hex(1)]; // one gone before the cursor, one added before it
    const second = mergeLocalHashPages([localHashPage(later, first.nextCursor, 100)], 100);
    expect(second.localHashes).toEqual([...all].sort().slice(100, 200));
  });
});
