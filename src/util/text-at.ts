/**
 * Whether `piece` occurs in `text` at `at`. `===` on a substring view: V8 compares flat strings with
 * memcmp, while `startsWith` walks them a character at a time (0.135 vs 0.016 ms for a
 * 390k-character history in workerd). `substring` clamps at the end, so a piece running past it differs in length.
 */
export function textAt(text: string, piece: string, at = 0): boolean {
  return text.substring(at, at + piece.length) === piece;
}
