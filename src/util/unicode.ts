/**
 * Lone UTF-16 surrogates (text that cannot be encoded as UTF-8). String.prototype.isWellFormed
 * (ES2024; V8 ≥ 11.1, so Node 22 and workerd) scans natively: ~8× faster than the lookaround regex
 * it replaces on a 130 kB prompt (0.1 vs 0.8 ms). The project's lib is es2022, hence the cast.
 */
export function hasLoneSurrogate(s: string): boolean {
  return !(s as unknown as { isWellFormed(): boolean }).isWellFormed();
}
