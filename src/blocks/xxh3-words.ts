/**
 * XXH3-64 of a short input given as little-endian 32-bit words (the block hash input: one uint32
 * per token id), for 17–128 bytes (5–32 words), seeded, with the algorithm's default secret, in
 * 32-bit halves so that no BigInt is made until the result. Through hash-wasm a 16-token block cost
 * ~1.1 µs of call overhead (init, update, digest, a result buffer), 2.4 ms for the ~2 200 blocks of
 * a new 32k-token prompt; measured in docs/benchmarks.md §1. hash-wasm stays the oracle:
 * test/unit/blocks/xxh3-words.test.ts compares every length against it.
 *
 * The algorithm (XXH3_len_17to128_64b, xxHash ≥ 0.8.1): acc = len · PRIME64_1; add mix16B of
 * pairs of 16-byte lanes taken from both ends, each lane XORed with a secret lane plus (low half)
 * or minus (high half) the seed and folded as lo ^ hi of the 128-bit product; then the avalanche
 * h ^= h >> 37, h ·= PRIME_MX1, h ^= h >> 32.
 */

/** The first 128 bytes of XXH3's default secret (kSecret), as little-endian 32-bit words. */
const SECRET_WORDS = new Uint32Array([
  0x396cfeb8, 0xbe4ba423, 0x2c81017c, 0x1cad21f7, 0xe96dd4de, 0xdb979083, 0xa4a44072, 0x1f67b3b7,
  0x4ee679cb, 0x78e5c0cc, 0x7dd05a82, 0x2172ffcc, 0x744608b8, 0x8e2443f7, 0xe69035e0, 0x4c263a81,
  0xbb52283c, 0xcb00c391, 0x8b65d088, 0xa32e531b, 0x97486471, 0x4ef90da2, 0x46ef1938, 0xd8acdea9,
  0x3f76faa8, 0x3f349ce3, 0xc7bbdcf9, 0x1d4f0bc7, 0x4be0518a, 0x3159b4cd, 0xc97e9fc8, 0x647378d9,
]);

const PRIME64_1_HI = 0x9e3779b1;
const PRIME64_1_LO = 0x85ebca87;
const PRIME_MX1_HI = 0x16566791;
const PRIME_MX1_LO = 0x9e3779f9;

export const XXH3_WORDS_MIN = 5;
export const XXH3_WORDS_MAX = 32;

/** The secret's eight 16-byte lanes with the seed mixed in as mix16B does: [loLo, loHi, hiLo, hiHi] per lane. */
export type Xxh3Keys = Uint32Array;

const keysBySeed = new Map<bigint, Xxh3Keys>();

export function xxh3Keys(seed: bigint): Xxh3Keys {
  let keys = keysBySeed.get(seed);
  if (keys) return keys;
  const mask = (1n << 64n) - 1n;
  const s = BigInt.asUintN(64, seed);
  const word64 = (i: number) => (BigInt(SECRET_WORDS[i + 1]!) << 32n) | BigInt(SECRET_WORDS[i]!);
  keys = new Uint32Array(32);
  for (let lane = 0; lane < 8; lane++) {
    const lo = (word64(4 * lane) + s) & mask;
    const hi = (word64(4 * lane + 2) - s) & mask;
    keys[4 * lane] = Number(lo & 0xffffffffn);
    keys[4 * lane + 1] = Number(lo >> 32n);
    keys[4 * lane + 2] = Number(hi & 0xffffffffn);
    keys[4 * lane + 3] = Number(hi >> 32n);
  }
  keysBySeed.set(seed, keys);
  return keys;
}

// 64-bit values as two uint32 halves in a typed-array scratch: module-level `let` numbers above 2^30
// are boxed, so each write allocated a heap number (~20 per block; typed-array scratch measured
// 404 → 222 ns per 16-token block in workerd, 700 → 100 in Node 22).
const scratch = new Uint32Array(4);
const MUL_LO = 0;
const MUL_HI = 1;
const ACC_LO = 2;
const ACC_HI = 3;

/** The exact 64-bit product of two uint32 (16-bit pieces keep every partial product exact). */
function mul32(a: number, b: number): void {
  const a0 = a & 0xffff;
  const a1 = a >>> 16;
  const b0 = b & 0xffff;
  const b1 = b >>> 16;
  const mid = a0 * b1 + a1 * b0; // < 2^33
  const midLo = mid & 0xffff; // ToInt32 keeps the low 32 bits, so the low 16 are exact
  const lo = a0 * b0 + midLo * 65536; // < 2^33
  const loW = lo >>> 0;
  scratch[MUL_LO] = loW;
  scratch[MUL_HI] = a1 * b1 + (mid - midLo) / 65536 + (lo - loW) / 4294967296;
}

/** acc += lo64(a·b) ^ hi64(a·b) (mod 2^64). */
function addMulFold(aHi: number, aLo: number, bHi: number, bLo: number): void {
  mul32(aLo, bLo);
  const r0 = scratch[MUL_LO]!;
  const h00 = scratch[MUL_HI]!;
  mul32(aLo, bHi);
  const l01 = scratch[MUL_LO]!;
  const h01 = scratch[MUL_HI]!;
  mul32(aHi, bLo);
  const l10 = scratch[MUL_LO]!;
  const h10 = scratch[MUL_HI]!;
  mul32(aHi, bHi);
  const s1 = h00 + l01 + l10;
  const r1 = s1 >>> 0;
  const s2 = h01 + h10 + scratch[MUL_LO]! + (s1 - r1) / 4294967296;
  const r2 = s2 >>> 0;
  const r3 = (scratch[MUL_HI]! + (s2 - r2) / 4294967296) >>> 0;
  const lo = scratch[ACC_LO]! + ((r0 ^ r2) >>> 0);
  const loW = lo >>> 0;
  scratch[ACC_LO] = loW;
  scratch[ACC_HI] = scratch[ACC_HI]! + ((r1 ^ r3) >>> 0) + (lo - loW) / 4294967296;
}

/** mix16B of the 16 bytes at word `w` with secret lane `lane`, added to the accumulator. */
function mix(words: ArrayLike<number>, w: number, keys: Xxh3Keys, lane: number): void {
  const k = 4 * lane;
  addMulFold((words[w + 1]! ^ keys[k + 1]!) >>> 0, (words[w]! ^ keys[k]!) >>> 0, (words[w + 3]! ^ keys[k + 3]!) >>> 0, (words[w + 2]! ^ keys[k + 2]!) >>> 0);
}

/** avalanche(acc) (h ^= h >> 37, h ·= PRIME_MX1, h ^= h >> 32) to `out` at `at` as [low, high]. */
function avalancheTo(out: Uint32Array, at: number): void {
  const hi = scratch[ACC_HI]!;
  let lo = (scratch[ACC_LO]! ^ (hi >>> 5)) >>> 0;
  mul32(lo, PRIME_MX1_LO);
  const pHi = (scratch[MUL_HI]! + Math.imul(lo, PRIME_MX1_HI) + Math.imul(hi, PRIME_MX1_LO)) >>> 0;
  lo = scratch[MUL_LO]!;
  out[at] = (lo ^ pHi) >>> 0;
  out[at + 1] = pHi;
}

/** The two bitflips of XXH3's 9–16-byte path for a seed: [flip1 lo, flip1 hi, flip2 lo, flip2 hi]. */
export type Xxh3Flips16 = Uint32Array;

const flipsBySeed = new Map<bigint, Xxh3Flips16>();

export function xxh3Flips16(seed: bigint): Xxh3Flips16 {
  let flips = flipsBySeed.get(seed);
  if (flips) return flips;
  const mask = (1n << 64n) - 1n;
  const s = BigInt.asUintN(64, seed);
  const word64 = (byte: number) => (BigInt(SECRET_WORDS[byte / 4 + 1]!) << 32n) | BigInt(SECRET_WORDS[byte / 4]!);
  const flip1 = ((word64(24) ^ word64(32)) + s) & mask;
  const flip2 = ((word64(40) ^ word64(48)) - s) & mask;
  flips = Uint32Array.of(Number(flip1 & 0xffffffffn), Number(flip1 >> 32n), Number(flip2 & 0xffffffffn), Number(flip2 >> 32n));
  flipsBySeed.set(seed, flips);
  return flips;
}

/** A 32-bit word with its bytes reversed. */
function bswap32(x: number): number {
  return ((x >>> 24) | ((x >>> 8) & 0xff00) | ((x & 0xff00) << 8) | (x << 24)) >>> 0;
}

/**
 * XXH3-64 of exactly 16 bytes given as four little-endian words w0…w3 (XXH3_len_9to16_64b, xxHash ≥
 * 0.8.1: input_lo = first 8 bytes ^ flip1, input_hi = last 8 bytes ^ flip2, acc = len +
 * bswap64(input_lo) + input_hi + fold(input_lo · input_hi), then the avalanche); the result goes to
 * `out` at `at` as [low 32 bits, high 32 bits]. A namespaced block hash hashes 16 bytes.
 */
export function xxh3Of16Bytes(w0: number, w1: number, w2: number, w3: number, flips: Xxh3Flips16, out: Uint32Array, at: number): void {
  const loLo = (w0 ^ flips[0]!) >>> 0;
  const loHi = (w1 ^ flips[1]!) >>> 0;
  const hiLo = (w2 ^ flips[2]!) >>> 0;
  const hiHi = (w3 ^ flips[3]!) >>> 0;
  // 16 + bswap64(input_lo) + input_hi; bswap64 of (hi:lo) is (bswap32(lo):bswap32(hi)).
  const lo = 16 + bswap32(loHi) + hiLo;
  const loW = lo >>> 0;
  scratch[ACC_LO] = loW;
  scratch[ACC_HI] = bswap32(loLo) + hiHi + (lo - loW) / 4294967296;
  addMulFold(loHi, loLo, hiHi, hiLo);
  avalancheTo(out, at);
}

/**
 * XXH3-64 of words[start, start + count) read as little-endian bytes, count in [5, 32]; the result
 * goes to `out` at `at` as [low 32 bits, high 32 bits].
 */
export function xxh3Words(words: ArrayLike<number>, start: number, count: number, keys: Xxh3Keys, out: Uint32Array, at: number): void {
  const len = 4 * count;
  mul32(len, PRIME64_1_LO);
  scratch[ACC_LO] = scratch[MUL_LO]!;
  scratch[ACC_HI] = scratch[MUL_HI]! + Math.imul(len, PRIME64_1_HI);
  const end = start + count;
  if (len > 32) {
    if (len > 64) {
      if (len > 96) {
        mix(words, start + 12, keys, 6);
        mix(words, end - 16, keys, 7);
      }
      mix(words, start + 8, keys, 4);
      mix(words, end - 12, keys, 5);
    }
    mix(words, start + 4, keys, 2);
    mix(words, end - 8, keys, 3);
  }
  mix(words, start, keys, 0);
  mix(words, end - 4, keys, 1);
  avalancheTo(out, at);
}
