/** Each byte's two lower-case hex digits (a lookup, not a toString and padStart per byte). */
const HEX_BYTE: readonly string[] = Array.from({ length: 256 }, (_, x) => x.toString(16).padStart(2, "0"));

/** Lower-case hex for bytes, one spelling for every digest, MAC and id the project prints. */
export function bytesToHex(bytes: Uint8Array): string {
  return rangeToHex(bytes, 0, bytes.length);
}

/** Lower-case hex for `bytes[from..to)` (no subarray view to allocate). */
export function rangeToHex(bytes: Uint8Array, from: number, to: number): string {
  let s = "";
  for (let i = from; i < to; i++) s += HEX_BYTE[bytes[i]!]!;
  return s;
}

const EVEN_HEX = /^(?:[0-9a-f]{2})*$/;

/** Bytes of lower-case, even-length hex; null for anything else (so callers never parse garbage). */
export function hexToBytes(s: string): Uint8Array | null {
  if (!EVEN_HEX.test(s)) return null;
  const out = new Uint8Array(s.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(s.slice(2 * i, 2 * i + 2), 16);
  return out;
}
