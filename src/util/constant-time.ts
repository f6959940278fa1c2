/**
 * String equality whose time does not depend on where the strings differ (tokens, keys, MACs):
 * compares every byte of the longer UTF-8 encoding and folds the length difference in.
 */
export function timingSafeEqualString(a: string, b: string): boolean {
  const ea = new TextEncoder().encode(a);
  const eb = new TextEncoder().encode(b);
  let diff = ea.length ^ eb.length;
  const n = Math.max(ea.length, eb.length);
  for (let i = 0; i < n; i++) diff |= (ea[i] ?? 0) ^ (eb[i] ?? 0);
  return diff === 0;
}
