/**
 * The two JSON operations SGLang's tool-call parsers lean on, with Python's semantics:
 * - `parsePyJson`: Python `json.loads` (objects keep their key order, integer-like keys included,
 *   as a dict does, where a JS object would put them first; a repeated key keeps its first place
 *   and its last value; `NaN`, `Infinity` and `-Infinity` are read as Python reads them; an int
 *   lexeme is an exact int however long, a float lexeme that overflows is inf);
 * - `pyJsonDumps`: Python `json.dumps` text (", " and ": " separators, `ensure_ascii`, Python
 *   number text from the lexeme the model wrote: `1.0` stays `1.0`, `1e2` becomes `100.0`, a
 *   400-digit int keeps its digits, `1e400` becomes `Infinity`).
 * Numbers are kept as PyNumber (src/prompt/py-json.ts) so dumps prints what Python would.
 */
import { PyNumber, pythonNumberTextFromValue } from "../../prompt/py-json.ts";
import { pythonFloatRepr } from "../../util/py-float.ts";

/** A parsed JSON value; objects are Maps so their key order is the text's (Python dict order). */
export type PyJson = null | boolean | string | PyNumber | PyJson[] | PyObject;
export type PyObject = Map<string, PyJson>;

/**
 * Python's int(str) refuses more digits than this (sys.int_info.default_max_str_digits, Python
 * 3.11+), so json.loads of such an int raises ValueError: the text is no JSON to it.
 */
const PY_INT_MAX_STR_DIGITS = 4300;

/** Python json.dumps text of a number lexeme: an int stays an exact int, a float is its repr (inf → Infinity). */
function pythonTextOfLexeme(lexeme: string, isInt: boolean): string {
  if (isInt) return BigInt(lexeme).toString();
  return pythonFloatRepr(Number(lexeme));
}

const NUMBER = /-?(?:0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/y;
const ESCAPES: Record<string, string> = { '"': '"', "\\": "\\", "/": "/", b: "\b", f: "\f", n: "\n", r: "\r", t: "\t" };

/** Complete JSON text → values as Python's json.loads gives them; throws SyntaxError where it raises. */
export function parsePyJson(text: string): PyJson {
  let i = 0;
  const fail = (what: string): never => {
    throw new SyntaxError(`${what} at ${i}`);
  };
  const ws = () => {
    while (i < text.length) {
      const c = text.charCodeAt(i);
      if (c !== 0x20 && c !== 0x09 && c !== 0x0a && c !== 0x0d) break;
      i++;
    }
  };
  const str = (): string => {
    i++; // opening quote
    let out = "";
    let from = i;
    for (;;) {
      if (i >= text.length) fail("unterminated string");
      const c = text.charCodeAt(i);
      if (c === 0x22) {
        out += text.slice(from, i);
        i++;
        return out;
      }
      if (c < 0x20) fail("control character in string"); // json.loads is strict by default
      if (c !== 0x5c) {
        i++;
        continue;
      }
      out += text.slice(from, i);
      const e = text[i + 1];
      if (e === undefined) fail("unterminated string");
      if (e === "u") {
        const hex = text.slice(i + 2, i + 6);
        if (!/^[0-9a-fA-F]{4}$/.test(hex)) fail("bad \\u escape");
        out += String.fromCharCode(parseInt(hex, 16));
        i += 6;
      } else {
        const s = ESCAPES[e!];
        if (s === undefined) fail("bad escape");
        out += s;
        i += 2;
      }
      from = i;
    }
  };
  // Depth is bounded by the caller's text size (a block is at most one output); recursion depth
  // of a pathological nesting is capped here as Python's recursion limit caps json.loads.
  let depth = 0;
  const value = (): PyJson => {
    ws();
    if (i >= text.length) fail("expecting value");
    const c = text[i]!;
    if (c === "{" || c === "[") {
      if (++depth > 900) fail("nested too deeply");
      const v = c === "{" ? obj() : arr();
      depth--;
      return v;
    }
    if (c === '"') return str();
    for (const [word, v] of LITERALS) {
      if (text.startsWith(word, i)) {
        i += word.length;
        return v;
      }
    }
    NUMBER.lastIndex = i;
    const m = NUMBER.exec(text);
    if (m === null) return fail("expecting value");
    i = NUMBER.lastIndex;
    const isInt = m[1] === undefined && m[2] === undefined;
    if (isInt && m[0].replace("-", "").length > PY_INT_MAX_STR_DIGITS) fail("int too long for Python");
    return new PyNumber(Number(m[0]), pythonTextOfLexeme(m[0], isInt));
  };
  const obj = (): PyObject => {
    i++;
    const o: PyObject = new Map();
    ws();
    if (text[i] === "}") {
      i++;
      return o;
    }
    for (;;) {
      ws();
      if (text[i] !== '"') fail("expecting property name");
      const key = str();
      ws();
      if (text[i] !== ":") fail("expecting ':'");
      i++;
      o.set(key, value()); // a repeated key keeps its first place and takes the last value, as a dict
      ws();
      if (text[i] === ",") {
        i++;
        continue;
      }
      if (text[i] === "}") {
        i++;
        return o;
      }
      fail("expecting ',' or '}'");
    }
  };
  const arr = (): PyJson[] => {
    i++;
    const a: PyJson[] = [];
    ws();
    if (text[i] === "]") {
      i++;
      return a;
    }
    for (;;) {
      a.push(value());
      ws();
      if (text[i] === ",") {
        i++;
        continue;
      }
      if (text[i] === "]") {
        i++;
        return a;
      }
      fail("expecting ',' or ']'");
    }
  };
  const v = value();
  ws();
  if (i !== text.length) fail("extra data");
  return v;
}

/** Python json.loads also reads these constants (json/scanner.py); `-Infinity` before numbers. */
const LITERALS: ReadonlyArray<readonly [string, PyJson]> = [
  ["true", true],
  ["false", false],
  ["null", null],
  ["NaN", new PyNumber(NaN, "NaN")],
  ["Infinity", new PyNumber(Infinity, "Infinity")],
  ["-Infinity", new PyNumber(-Infinity, "-Infinity")],
];

function escapeString(s: string, ensureAscii: boolean): string {
  let out = '"';
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c === 0x22) out += '\\"';
    else if (c === 0x5c) out += "\\\\";
    else if (c === 0x0a) out += "\\n";
    else if (c === 0x0d) out += "\\r";
    else if (c === 0x09) out += "\\t";
    else if (c === 0x08) out += "\\b";
    else if (c === 0x0c) out += "\\f";
    else if (c < 0x20 || (ensureAscii && c > 0x7e)) out += "\\u" + c.toString(16).padStart(4, "0");
    else out += s[i];
  }
  return out + '"';
}

/**
 * Python `json.dumps(v, ensure_ascii=...)` with default separators. Maps (parsed objects) and plain
 * objects (schemas kvedge builds) are both dicts; plain JS numbers use the value policy.
 */
export function pyJsonDumps(v: unknown, ensureAscii = true): string {
  if (v === null || v === undefined) return "null";
  if (v === true) return "true";
  if (v === false) return "false";
  if (typeof v === "string") return escapeString(v, ensureAscii);
  if (v instanceof PyNumber) return v.pythonText;
  if (typeof v === "number") return pythonNumberTextFromValue(v);
  if (Array.isArray(v)) return v.length === 0 ? "[]" : `[${v.map((x) => pyJsonDumps(x, ensureAscii)).join(", ")}]`;
  const entries = v instanceof Map ? [...(v as Map<string, unknown>)] : typeof v === "object" ? Object.entries(v) : null;
  if (entries === null) throw new TypeError(`not JSON serializable: ${typeof v}`);
  if (entries.length === 0) return "{}";
  return `{${entries.map(([k, x]) => `${escapeString(k, ensureAscii)}: ${pyJsonDumps(x, ensureAscii)}`).join(", ")}}`;
}
