/**
 * The two JSON operations SGLang's tool-call parsers lean on, with Python's semantics:
 * - `pyJsonDumps`: Python `json.dumps` text (", " and ": " separators, `ensure_ascii`, Python
 *   number text from the lexeme the model wrote: `1.0` stays `1.0`, `1e2` becomes `100.0`);
 * - `parsePartialJson`: what `partial_json_parser.loads` gives for a prefix of a JSON text while
 *   the model is still writing it (function_call/utils.py `_partial_json_loads`), plus where the
 *   first complete value ends (`JSONDecoder.raw_decode` for "Extra data").
 * Numbers are kept as PyNumber (src/prompt/py-json.ts) so dumps prints what Python would.
 */
import { PyNumber, parseJsonKeepingNumbers, pythonNumberTextFromLexeme, pythonNumberTextFromValue } from "../../prompt/py-json.ts";

export type PyJson = null | boolean | string | PyNumber | PyJson[] | { [k: string]: PyJson };

/** Complete JSON text → values with Python number text kept; throws SyntaxError like json.loads. */
export function parsePyJson(text: string): PyJson {
  return parseJsonKeepingNumbers(text) as PyJson;
}

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

/** Python `json.dumps(v, ensure_ascii=...)` with default separators. Plain JS numbers use the value policy. */
export function pyJsonDumps(v: unknown, ensureAscii = true): string {
  if (v === null || v === undefined) return "null";
  if (v === true) return "true";
  if (v === false) return "false";
  if (typeof v === "string") return escapeString(v, ensureAscii);
  if (v instanceof PyNumber) return v.pythonText;
  if (typeof v === "number") return pythonNumberTextFromValue(v);
  if (Array.isArray(v)) return v.length === 0 ? "[]" : `[${v.map((x) => pyJsonDumps(x, ensureAscii)).join(", ")}]`;
  if (typeof v === "object") {
    const keys = Object.keys(v);
    if (keys.length === 0) return "{}";
    return `{${keys.map((k) => `${escapeString(k, ensureAscii)}: ${pyJsonDumps((v as Record<string, unknown>)[k], ensureAscii)}`).join(", ")}}`;
  }
  throw new TypeError(`not JSON serializable: ${typeof v}`);
}

export class MalformedJson extends Error {}

export interface PartialJson {
  value: PyJson;
  /** Index just past the first value when it is complete (text after it is "extra data"). */
  end: number;
  /** The first value was closed (parsing it alone with json.loads would succeed). */
  complete: boolean;
}

/** Marks a value cut off by the end of input that the flags do not allow to be partial. */
const CUT = Symbol("cut");
type Parsed = PyJson | typeof CUT;

const NUMBER = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/y;
const WS = /[ \t\n\r]*/y;

/**
 * Parses a JSON prefix as `partial_json_parser.loads(text, flags)` does for the flags SGLang uses:
 * `allowPartialStrings` false (`Allow.ALL & ~Allow.STR`, before the tool name is sent) drops a
 * string cut off by the end; objects and arrays cut off are closed; a member or element whose
 * value is cut off is dropped; a number or literal touching the end is dropped (see below).
 * Throws MalformedJson when the text cannot be the start of a JSON value.
 */
export function parsePartialJson(text: string, allowPartialStrings: boolean): PartialJson {
  let i = 0;
  /** Set when any value was closed by the end of input rather than by its own syntax. */
  let truncated = false;
  const ws = () => {
    WS.lastIndex = i;
    WS.exec(text);
    i = WS.lastIndex;
  };
  const atEnd = () => {
    if (i < text.length) return false;
    truncated = true;
    return true;
  };

  function str(): string | typeof CUT {
    i++; // opening quote
    let out = "";
    while (i < text.length) {
      const c = text[i]!;
      if (c === '"') {
        i++;
        return out;
      }
      if (c === "\\") {
        if (i + 1 >= text.length) break;
        const e = text[i + 1]!;
        const simple: Record<string, string> = { '"': '"', "\\": "\\", "/": "/", b: "\b", f: "\f", n: "\n", r: "\r", t: "\t" };
        if (e in simple) {
          out += simple[e];
          i += 2;
          continue;
        }
        if (e === "u") {
          const hex = text.slice(i + 2, i + 6);
          if (hex.length < 4) break; // cut inside the escape
          if (!/^[0-9a-fA-F]{4}$/.test(hex)) throw new MalformedJson("bad \\u escape");
          out += String.fromCharCode(parseInt(hex, 16));
          i += 6;
          continue;
        }
        throw new MalformedJson("bad escape");
      }
      if (c.charCodeAt(0) < 0x20) throw new MalformedJson("control character in string");
      out += c;
      i++;
    }
    i = text.length;
    truncated = true;
    return allowPartialStrings ? out : CUT;
  }

  function value(): Parsed {
    ws();
    if (atEnd()) return CUT;
    const c = text[i]!;
    if (c === "{") {
      i++;
      const obj: Record<string, PyJson> = {};
      ws();
      if (atEnd()) return obj;
      if (text[i] === "}") {
        i++;
        return obj;
      }
      for (;;) {
        ws();
        if (atEnd()) return obj;
        if (text[i] !== '"') throw new MalformedJson("expected a key");
        const savedFlag = allowPartialStrings;
        // A key cut off is never kept, whatever the flags.
        allowPartialStrings = false;
        const key = str();
        allowPartialStrings = savedFlag;
        if (key === CUT) return obj;
        ws();
        if (atEnd()) return obj;
        if (text[i] !== ":") throw new MalformedJson("expected ':'");
        i++;
        const v = value();
        if (v === CUT) return obj;
        // An own property for every key, "__proto__" included (plain assignment would set the
        // object's prototype and drop the key, as JSON.parse does not).
        Object.defineProperty(obj, key, { value: v, enumerable: true, writable: true, configurable: true });
        ws();
        if (atEnd()) return obj;
        if (text[i] === ",") {
          i++;
          continue;
        }
        if (text[i] === "}") {
          i++;
          return obj;
        }
        throw new MalformedJson("expected ',' or '}'");
      }
    }
    if (c === "[") {
      i++;
      const arr: PyJson[] = [];
      ws();
      if (atEnd()) return arr;
      if (text[i] === "]") {
        i++;
        return arr;
      }
      for (;;) {
        const v = value();
        if (v === CUT) return arr;
        arr.push(v);
        ws();
        if (atEnd()) return arr;
        if (text[i] === ",") {
          i++;
          continue;
        }
        if (text[i] === "]") {
          i++;
          return arr;
        }
        throw new MalformedJson("expected ',' or ']'");
      }
    }
    if (c === '"') return str();
    if (c === "-" || (c >= "0" && c <= "9")) {
      NUMBER.lastIndex = i;
      const m = NUMBER.exec(text);
      if (!m) {
        if (text.length - i === 1) return (i = text.length), (truncated = true), CUT; // a lone "-"
        throw new MalformedJson("bad number");
      }
      i = NUMBER.lastIndex;
      // A number touching the end may still grow ("12" → "123", "3.4" → "3.4e+250"), and Python's
      // repr of the part seen so far need not be a prefix of the final repr, so it is left out until
      // it ends (partial_json_parser keeps it, which makes SGLang stream digits that later change).
      if (atEnd() || /^[.eE][+-]?$/.test(text.slice(i))) {
        i = text.length;
        truncated = true;
        return CUT;
      }
      if (!/[.eE+\-0-9]/.test(text[i]!)) return new PyNumber(Number(m[0]), pythonNumberTextFromLexeme(m[0]));
      throw new MalformedJson("bad number");
    }
    for (const [word, v] of [["true", true], ["false", false], ["null", null]] as const) {
      if (text.startsWith(word, i)) {
        i += word.length;
        return v;
      }
      if (word.startsWith(text.slice(i))) {
        i = text.length;
        truncated = true;
        return CUT;
      }
    }
    throw new MalformedJson(`unexpected '${c}'`);
  }

  const v = value();
  if (v === CUT) throw new MalformedJson("no value yet");
  // Complete when nothing was closed by the end of input (json.loads of text[:end] would succeed).
  return { value: v, end: i, complete: !truncated };
}
