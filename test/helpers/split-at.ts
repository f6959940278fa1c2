/** `bytes` cut at each offset in `cuts` (deduplicated, sorted; offsets outside 1..length-1 ignored), for feeding a parser in pieces. */
export function splitAt(bytes: Uint8Array, cuts: number[]): Uint8Array[] {
  const sorted = [...new Set(cuts)].filter((c) => c > 0 && c < bytes.length).sort((a, b) => a - b);
  const out: Uint8Array[] = [];
  let prev = 0;
  for (const c of sorted) {
    out.push(bytes.slice(prev, c));
    prev = c;
  }
  out.push(bytes.slice(prev));
  return out;
}
