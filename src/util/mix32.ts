/**
 * 3×u32 → u32 mixer (multiply-xorshift). Rolling prefix keys over 64-bit block hashes use it:
 * key(d) = mix(key(d − 1), lo, hi). Inputs are usually already random; tests use small ints.
 */
export function mix32(a: number, b: number, c: number): number {
  let h = Math.imul(a ^ 0x5bd1e995, 0x9e3779b1) ^ b;
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b) ^ c;
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return h ^ (h >>> 16);
}
