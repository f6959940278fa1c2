/**
 * XXH3-64 of a short input given as little-endian 32-bit words (the block hash input: one uint32
 * per token id), for 17–128 bytes (5–32 words), seeded, with the algorithm's default secret, in
 * 32-bit halves so that no BigInt is made until the result. Through hash-wasm a 16-token block costs
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

// Every 64-bit value is two uint32 halves in locals of one function, never stored between calls:
// a module-level `let` above 2^30 is a boxed heap number (each write allocated), and halves passed
// between helpers through a typed-array scratch cost a store and a load each. A 16-token block
// takes ~76 ns in Node 22 and ~135–185 ns in workerd this way; with the halves passed through a
// scratch, ~120 ns and 220–460 ns (by isolate).

/** 2^-32: multiplying by it is exact, so it moves a double's value down by 32 bits. */
const INV_2_32 = 1 / 4294967296;

/**
 * The high word of the 64-bit product of two uint32 whose low word (Math.imul) is `lo`: the double
 * product is within 2^12 of the exact one (< 2^64, 53-bit mantissa), so taking the exact low word off
 * and rounding to a multiple of 2^32 gives the high word exactly.
 */
function mulHi(a: number, b: number, lo: number): number {
  return Math.round((a * b - lo) * INV_2_32);
}

/** avalanche(acc) (h ^= h >> 37, h ·= PRIME_MX1, h ^= h >> 32) to `out` at `at` as [low, high]. */
function avalancheTo(accLo: number, accHi: number, out: Uint32Array, at: number): void {
  const x = (accLo ^ (accHi >>> 5)) >>> 0;
  const pLo = Math.imul(x, PRIME_MX1_LO) >>> 0;
  const pHi = (mulHi(x, PRIME_MX1_LO, pLo) + Math.imul(x, PRIME_MX1_HI) + Math.imul(accHi, PRIME_MX1_LO)) >>> 0;
  out[at] = (pLo ^ pHi) >>> 0;
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
  const sum = 16 + bswap32(loHi) + hiLo;
  let accLo = sum >>> 0;
  let accHi = bswap32(loLo) + hiHi + Math.floor(sum * INV_2_32);
  // + lo64 ^ hi64 of input_lo · input_hi: four 32×32 partial products lXY + hXY·2^32.
  // Written out here and in xxh3Words on purpose: a shared helper would pass the halves through
  // memory, which is slower (the note on locals above).
  const l00 = Math.imul(loLo, hiLo) >>> 0;
  const h00 = mulHi(loLo, hiLo, l00);
  const l01 = Math.imul(loLo, hiHi) >>> 0;
  const h01 = mulHi(loLo, hiHi, l01);
  const l10 = Math.imul(loHi, hiLo) >>> 0;
  const h10 = mulHi(loHi, hiLo, l10);
  const l11 = Math.imul(loHi, hiHi) >>> 0;
  const h11 = mulHi(loHi, hiHi, l11);
  const s1 = h00 + l01 + l10;
  const s2 = h01 + h10 + l11 + Math.floor(s1 * INV_2_32);
  const r3 = (h11 + Math.floor(s2 * INV_2_32)) >>> 0;
  const lo = accLo + ((l00 ^ (s2 >>> 0)) >>> 0);
  accLo = lo >>> 0;
  accHi = (accHi + (((s1 >>> 0) ^ r3) >>> 0) + Math.floor(lo * INV_2_32)) >>> 0;
  avalancheTo(accLo, accHi, out, at);
}

/**
 * XXH3-64 of words[start, start + count) read as little-endian bytes, count in [5, 32]; the result
 * goes to `out` at `at` as [low 32 bits, high 32 bits].
 */
export function xxh3Words(words: ArrayLike<number>, start: number, count: number, keys: Xxh3Keys, out: Uint32Array, at: number): void {
  const len = 4 * count;
  let accLo = Math.imul(len, PRIME64_1_LO) >>> 0;
  let accHi = (mulHi(len, PRIME64_1_LO, accLo) + Math.imul(len, PRIME64_1_HI)) >>> 0;
  // mix16B over lane pairs from both ends: lane 2q at word 4q, lane 2q + 1 at 4q words before the
  // last 16 bytes (the sum is the same in any order).
  const lanes = len > 96 ? 8 : len > 64 ? 6 : len > 32 ? 4 : 2;
  for (let lane = 0; lane < lanes; lane++) {
    const w = (lane & 1) === 0 ? start + 2 * lane : start + count - 4 - 2 * (lane - 1);
    const k = 4 * lane;
    const aLo = (words[w]! ^ keys[k]!) >>> 0;
    const aHi = (words[w + 1]! ^ keys[k + 1]!) >>> 0;
    const bLo = (words[w + 2]! ^ keys[k + 2]!) >>> 0;
    const bHi = (words[w + 3]! ^ keys[k + 3]!) >>> 0;
    // The 128-bit product (aHi:aLo)·(bHi:bLo) as four 64-bit partial products lXY + hXY·2^32.
    const l00 = Math.imul(aLo, bLo) >>> 0;
    const h00 = mulHi(aLo, bLo, l00);
    const l01 = Math.imul(aLo, bHi) >>> 0;
    const h01 = mulHi(aLo, bHi, l01);
    const l10 = Math.imul(aHi, bLo) >>> 0;
    const h10 = mulHi(aHi, bLo, l10);
    const l11 = Math.imul(aHi, bHi) >>> 0;
    const h11 = mulHi(aHi, bHi, l11);
    const s1 = h00 + l01 + l10;
    const r1 = s1 >>> 0;
    const s2 = h01 + h10 + l11 + Math.floor(s1 * INV_2_32);
    const r2 = s2 >>> 0;
    const r3 = (h11 + Math.floor(s2 * INV_2_32)) >>> 0;
    // acc += lo64 ^ hi64 of the product.
    const lo = accLo + ((l00 ^ r2) >>> 0);
    accLo = lo >>> 0;
    accHi = (accHi + ((r1 ^ r3) >>> 0) + Math.floor(lo * INV_2_32)) >>> 0;
  }
  avalancheTo(accLo, accHi, out, at);
}
