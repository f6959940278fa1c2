/**
 * The mm hash sent to the worker for one media item: the first 8 bytes (16 hex digits) of a
 * SHA-256 over a tagged, length-prefixed record of what decides the item's tokens and pad values:
 * the modality, the SHA-256 of the raw bytes, the metadata the layout uses, and the cohort
 * contract digest. The key is the content, never the URL: the same bytes under two URLs share it;
 * one changed byte, frame count, fps bit or contract changes it. Both hashes are cryptographic, so
 * nobody can choose two different media with one mm hash cheaper than by brute force (SGLang's pad
 * value keeps only 30 bits of it: docs/media.md, "Identity").
 *
 * Record layout (all integers little-endian):
 *   lp("kvedge/mm-identity/v2")
 *   field(1, utf8 modality)                      "image" | "video"
 *   field(2, 32-byte SHA-256 of the raw bytes)
 *   image: field(3, u64 width) field(4, u64 height)
 *   video: field(3, u64 width) field(4, u64 height) field(5, u64 total frames)
 *          field(6, f64 average fps, IEEE-754 bits)
 *   field(7, utf8 contract digest)
 * where lp(x) = u64 len(x) || x and field(t, x) = u8 t || lp(x).
 */
import { sha256 } from "../util/hash.ts";
import { bytesToHex } from "../util/hex.ts";

export type MediaMetadata =
  | { modality: "image"; width: number; height: number }
  | { modality: "video"; width: number; height: number; totalFrames: number; avgFps: number };

export interface IdentityInput {
  /** SHA-256 of the raw media bytes, 64 lower-case hex digits. */
  contentDigest: string;
  metadata: MediaMetadata;
  /** The cohort's contract digest (src/layout `contractDigest`). */
  contractDigest: string;
}

const MAGIC = "kvedge/mm-identity/v2";
const enc = new TextEncoder();

class RecordWriter {
  private parts: Uint8Array[] = [];
  private size = 0;
  private push(b: Uint8Array): void {
    this.parts.push(b);
    this.size += b.length;
  }
  private u64(v: bigint): Uint8Array {
    const b = new Uint8Array(8);
    new DataView(b.buffer).setBigUint64(0, v, true);
    return b;
  }
  lp(bytes: Uint8Array): void {
    this.push(this.u64(BigInt(bytes.length)));
    this.push(bytes);
  }
  field(tag: number, bytes: Uint8Array): void {
    this.push(Uint8Array.of(tag));
    this.lp(bytes);
  }
  fieldU64(tag: number, v: bigint): void {
    this.field(tag, this.u64(v));
  }
  fieldF64(tag: number, v: number): void {
    const b = new Uint8Array(8);
    new DataView(b.buffer).setFloat64(0, v, true);
    this.field(tag, b);
  }
  bytes(): Uint8Array {
    const out = new Uint8Array(this.size);
    let o = 0;
    for (const p of this.parts) {
      out.set(p, o);
      o += p.length;
    }
    return out;
  }
}

function checkCount(name: string, v: number): bigint {
  if (!Number.isSafeInteger(v) || v < 0) throw new TypeError(`identity record: ${name} must be a non-negative integer, got ${v}`);
  return BigInt(v);
}

/** The exact bytes hashed (exposed for tests and debugging). */
export function identityRecordBytes(input: IdentityInput): Uint8Array {
  if (!/^[0-9a-f]{64}$/.test(input.contentDigest)) throw new TypeError("identity record: contentDigest must be 64 lower-case hex digits");
  if (input.contractDigest.length === 0) throw new TypeError("identity record: contract digest is empty");
  const m = input.metadata;
  const w = new RecordWriter();
  w.lp(enc.encode(MAGIC));
  w.field(1, enc.encode(m.modality));
  w.field(2, hexBytes(input.contentDigest));
  w.fieldU64(3, checkCount("width", m.width));
  w.fieldU64(4, checkCount("height", m.height));
  if (m.modality === "video") {
    w.fieldU64(5, checkCount("totalFrames", m.totalFrames));
    if (!Number.isFinite(m.avgFps)) throw new TypeError("identity record: avgFps must be finite");
    w.fieldF64(6, m.avgFps);
  }
  w.field(7, enc.encode(input.contractDigest));
  return w.bytes();
}

function hexBytes(h: string): Uint8Array {
  const out = new Uint8Array(h.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(h.slice(i * 2, i * 2 + 2), 16);
  return out;
}

/** The mm hash: 16 lower-case hex digits. Requires `await initHashing()` first. */
export function mediaIdentityHash(input: IdentityInput): string {
  return bytesToHex(sha256(identityRecordBytes(input)).subarray(0, 8));
}
