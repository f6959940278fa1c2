/**
 * Equality whose time does not depend on where the values differ (tokens, keys, MACs): compares
 * every byte of the longer one and folds the length difference in.
 */
const utf8 = new TextEncoder();

/** Byte-array equality in time that depends only on the longer length. */
export function timingSafeEqualBytes(a: Uint8Array, b: Uint8Array): boolean {
  let diff = a.length ^ b.length;
  const n = Math.max(a.length, b.length);
  for (let i = 0; i < n; i++) diff |= (a[i] ?? 0) ^ (b[i] ?? 0);
  return diff === 0;
}

/** String equality by the strings' UTF-8 encodings (timingSafeEqualBytes). */
export function timingSafeEqualString(a: string, b: string): boolean {
  return timingSafeEqualBytes(utf8.encode(a), utf8.encode(b));
}
