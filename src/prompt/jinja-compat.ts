/**
 * Python string semantics @huggingface/jinja 0.5.11 lacks. Its `str.strip/lstrip/rstrip` ignore
 * the `chars` argument and use JS trim (so `'  x'.lstrip('\n')` loses the spaces Jinja2 keeps);
 * the Qwen3-VL-Thinking template calls `.strip('\n')`, `.lstrip('\n')` and `.rstrip('\n')` on
 * reasoning text and content. The parsed template is patched once: each such method call becomes
 * a call of a context function with Python's behaviour, `x.lstrip(c)` → `__kvedge_lstrip(x, c)`.
 */
import { Template } from "@huggingface/jinja";
import { isPyWhitespace } from "../util/py-str.ts";

const STRIP_METHODS = ["strip", "lstrip", "rstrip"] as const;
type StripMethod = (typeof STRIP_METHODS)[number];


/** Python `s.strip(chars)` / `lstrip` / `rstrip` on code points; chars None strips whitespace. */
export function pyStrip(s: unknown, chars: unknown, method: StripMethod): string {
  if (typeof s !== "string") throw new TypeError(`'${method}' needs a string, got ${s === undefined ? "undefined" : typeof s}`);
  let strip: (cp: number) => boolean;
  if (chars === undefined || chars === null) strip = isPyWhitespace;
  else if (typeof chars === "string") {
    const set = new Set(Array.from(chars, (c) => c.codePointAt(0)!));
    strip = (cp) => set.has(cp);
  } else throw new TypeError(`${method} arg must be None or str`);
  // Code points read from the ends in place (a pair is one, a lone surrogate is itself, as Python
  // sees a str): only what is stripped is read, not a code-point array of the whole text.
  let start = 0;
  let end = s.length;
  if (method !== "rstrip")
    while (start < end) {
      const cp = s.codePointAt(start)!;
      if (!strip(cp)) break;
      start += cp > 0xffff ? 2 : 1;
    }
  if (method !== "lstrip")
    while (end > start) {
      const low = s.charCodeAt(end - 1);
      const high = end - 2 >= start ? s.charCodeAt(end - 2) : 0;
      const at = low >= 0xdc00 && low <= 0xdfff && high >= 0xd800 && high <= 0xdbff ? end - 2 : end - 1;
      if (!strip(s.codePointAt(at)!)) break;
      end = at;
    }
  return start === 0 && end === s.length ? s : s.slice(start, end);
}

/** Context functions the patched templates call. */
export const COMPAT_FUNCTIONS: Readonly<Record<string, (...args: unknown[]) => string>> = Object.fromEntries(
  STRIP_METHODS.map((m) => [`__kvedge_${m}`, (s: unknown, chars?: unknown) => pyStrip(s, chars, m)]),
);

interface AstNode {
  type: string;
  [key: string]: unknown;
}

function isNode(x: unknown): x is AstNode {
  return typeof x === "object" && x !== null && typeof (x as { type?: unknown }).type === "string";
}

let identifierCtor: (new (value: string) => AstNode) | null = null;

/** The library's Identifier node class, taken from a parsed one-variable template. */
function makeIdentifier(name: string): AstNode {
  if (!identifierCtor) {
    const probe = new Template("{{ x }}").parsed as unknown as { body: unknown[] };
    const node = probe.body[0];
    if (!isNode(node) || node.type !== "Identifier") throw new Error("@huggingface/jinja AST changed: cannot build Identifier");
    identifierCtor = node.constructor as new (value: string) => AstNode;
  }
  return new identifierCtor(name);
}

function isStripCall(node: AstNode): StripMethod | null {
  if (node.type !== "CallExpression") return null;
  const callee = node["callee"];
  const args = node["args"];
  if (!isNode(callee) || callee.type !== "MemberExpression" || callee["computed"]) return null;
  const prop = callee["property"];
  if (!isNode(prop) || prop.type !== "Identifier") return null;
  const name = prop["value"];
  if (!STRIP_METHODS.includes(name as StripMethod)) return null;
  if (!Array.isArray(args) || args.length > 1 || args.some((a) => !isNode(a) || a.type === "KeywordArgumentExpression")) return null;
  return name as StripMethod;
}

/** Rewrites strip-family method calls in place; returns how many were rewritten. */
export function patchPythonStringMethods(template: Template): number {
  let count = 0;
  const seen = new Set<object>();
  const visit = (x: unknown): void => {
    if (typeof x !== "object" || x === null || seen.has(x)) return;
    seen.add(x);
    if (Array.isArray(x)) {
      x.forEach(visit);
      return;
    }
    for (const v of Object.values(x)) visit(v);
    if (isNode(x)) {
      const method = isStripCall(x);
      if (method) {
        const callee = x["callee"] as AstNode;
        x["args"] = [callee["object"], ...(x["args"] as unknown[])];
        x["callee"] = makeIdentifier(`__kvedge_${method}`);
        count++;
      }
    }
  };
  visit(template.parsed);
  return count;
}
