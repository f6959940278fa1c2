/**
 * `s` without the run of `char` (one UTF-16 unit) that ends it, in O(run): a regex like `/\/+$/`
 * backtracks quadratically over a long run that does not reach the end (16 000 slashes then one
 * letter: ~0.13 s), and request paths and media hosts are a client's to choose.
 */
export function stripTrailing(s: string, char: string): string {
  const c = char.charCodeAt(0);
  let end = s.length;
  while (end > 0 && s.charCodeAt(end - 1) === c) end--;
  return end === s.length ? s : s.slice(0, end);
}
