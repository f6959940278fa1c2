/**
 * Jump consistent hashing (Lamping & Veach 2014, "A Fast, Minimal Memory, Consistent Hash
 * Algorithm"): a 64-bit key → one of `buckets` buckets, such that going from N to N + 1 buckets
 * moves only ~1/(N + 1) of the keys, all of them into the new bucket.
 */

/** The bucket of a 64-bit key given as two 32-bit words; `buckets` is a whole number ≥ 1. */
export function jumpHash(lo: number, hi: number, buckets: number): number {
  // Per-key pseudo-random sequence (mulberry32 seeded from both words); any per-key sequence keeps
  // jump hashing's minimal-movement property.
  let state = (Math.imul(hi ^ 0x9e3779b9, 0x85ebca6b) ^ lo) >>> 0;
  let b = -1;
  let j = 0;
  while (j < buckets) {
    b = j;
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    const r = (((t ^ (t >>> 14)) >>> 0) + 1) / 4294967296; // (0, 1]
    j = Math.floor((b + 1) / r);
  }
  return b;
}
