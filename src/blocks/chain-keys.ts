import { localHashWords } from "./block-hash.ts";

/**
 * Position-aware 53-bit keys for a chain of local block hashes: key_i mixes key_{i-1} with block
 * i's hash (key i names blocks [0, i], as a radix-tree path does). Collisions only blur an
 * estimate (a worker's load, or overlap credited for a few seconds), never the indexed cache contents.
 */
export function chainKeysOf(localHashes: readonly bigint[] | BigUint64Array): number[] {
  const n = localHashes.length;
  const out = new Array<number>(n);
  // The two 32-bit words of each hash through a typed-array view: no BigInt arithmetic per block.
  const words = localHashWords(localHashes);
  let a = 0x9e3779b9 | 0;
  let b = 0x85ebca6b | 0;
  for (let i = 0; i < n; i++) {
    const lo = words[2 * i]! | 0;
    const hi = words[2 * i + 1]! | 0;
    a = Math.imul(a ^ lo, 0x01000193) ^ Math.imul(b, 0x5bd1e995);
    b = Math.imul(b ^ hi, 0x27d4eb2d) ^ (a >>> 15);
    out[i] = (a >>> 0) * 0x200000 + ((b >>> 0) & 0x1fffff);
  }
  return out;
}
