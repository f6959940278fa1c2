/** Index of the last of ascending `starts` that is ≤ `i` (0 when none is; `starts` not empty). */
export function lastAtOrBefore(starts: readonly number[], i: number): number {
  let lo = 0;
  let hi = starts.length - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (starts[mid]! <= i) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}
