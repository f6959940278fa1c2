// Real prose for text requests: Markdown files from installed packages (deterministic order), so
// tokenization cost is that of real text. Fresh texts are random-offset slices with a unique nonce.
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { ROOT } from "./workerd.mjs";

let prose = null;

/**
 * Contents of the files under `dir` (depth first, names sorted: deterministic) whose name passes
 * `pred`, skipping files of `maxFileSize` bytes or more, until `limit` characters are collected.
 */
export function collectFiles(dir, pred, limit, maxFileSize = Infinity) {
  const acc = [];
  let total = 0;
  const walk = (d) => {
    if (total >= limit) return;
    let names;
    try {
      names = readdirSync(d).sort();
    } catch {
      return;
    }
    for (const n of names) {
      if (total >= limit) return;
      const p = join(d, n);
      let st;
      try {
        st = statSync(p);
      } catch {
        continue;
      }
      if (st.isDirectory()) walk(p);
      else if (pred(n) && st.size < maxFileSize) {
        const s = readFileSync(p, "utf8");
        acc.push(s);
        total += s.length;
      }
    }
  };
  walk(dir);
  return acc;
}

export function loadProse(limit = 3_000_000) {
  prose ??= collectFiles(join(ROOT, "node_modules"), (n) => n.toLowerCase().endsWith(".md"), limit, 200_000).join("\n\n");
  return prose;
}

/** About 4.06 characters per Qwen token for this corpus (measured: 130k chars ≈ 32k tokens). */
export const CHARS_PER_TOKEN = 4.06;

let nonce = 0;
/** A text of about `tokens` tokens that no earlier call returned. */
export function freshText(tokens, random) {
  const src = loadProse();
  const len = Math.max(16, Math.round(tokens * CHARS_PER_TOKEN));
  const start = Math.floor(random() * Math.max(1, src.length - len));
  // A slice can cut a surrogate pair; requests must be well-formed Unicode.
  return (`[ref ${(nonce++).toString(36)}-${Math.floor(random() * 1e9).toString(36)}] ` + src.slice(start, start + len)).toWellFormed();
}
