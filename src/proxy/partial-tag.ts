/** Streaming parsers hold back text that may be the start of a tag split across frames. */

/** Length of the longest suffix of `s` that is a proper prefix of one of `tags`. */
export function heldTail(s: string, tags: readonly string[]): number {
  let best = 0;
  for (const tag of tags) {
    for (let k = Math.min(tag.length - 1, s.length); k > best; k--) {
      if (s.endsWith(tag.slice(0, k))) {
        best = k;
        break;
      }
    }
  }
  return best;
}
