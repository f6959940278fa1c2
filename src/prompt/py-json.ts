/**
 * Python `json.dumps` number text, which the chat template's `tojson` (transformers' override of
 * the Jinja2 filter) emits for numbers in `tools` and tool-call arguments. JS cannot reproduce it
 * from a JS number alone: `1.0` and `1` are the same double, while Python keeps the float/int
 * distinction of the JSON lexeme (`1.0` → `1.0`, `1` → `1`) and formats floats with `repr`
 * (`1e+20`, `1.5e-07`, `-0.0`). So numbers carry their lexeme where we parse the JSON ourselves
 * (tool-call argument strings) and fall back to a documented policy otherwise (docs/prompt.md).
 */

import { pythonFloatRepr } from "../util/py-float.ts";
import { topLevelMemberSpan } from "../util/json-scan.ts";

/** A JSON number together with the text Python's json.dumps would print for it. */
export class PyNumber {
  readonly value: number;
  readonly pythonText: string;
  constructor(value: number, pythonText: string) {
    this.value = value;
    this.pythonText = pythonText;
  }
  /** Anything that serialises a request holding PyNumbers (tools parameters) gets plain numbers. */
  toJSON(): number {
    return this.value;
  }
}

const INT_LEXEME = /^-?(?:0|[1-9]\d*)$/;

/** Python text for a JSON number lexeme: an int lexeme stays an exact int, anything else is a float. */
export function pythonNumberTextFromLexeme(lexeme: string): string {
  if (INT_LEXEME.test(lexeme)) return BigInt(lexeme).toString();
  return pythonFloatRepr(Number(lexeme));
}

/**
 * Policy for numbers whose lexeme is lost (already parsed by JSON.parse): integral values up to
 * 2^53 are taken as Python ints, everything else as floats. Larger integral values are floats
 * because only a float lexeme (`1e20`) can survive JSON.parse exactly; an int lexeme that large
 * was already rounded. Wrong for integral floats written with a dot (`1.0`, `-0.0` → `1`, `0`).
 */
export function pythonNumberTextFromValue(x: number): string {
  if (Number.isSafeInteger(x)) return BigInt(x).toString();
  return pythonFloatRepr(x);
}

interface ReviverContext {
  source?: string;
}

/**
 * The reviver's source-text access (V8 ≥ 11.4: workerd, Node 22) is what keeps `1.0` as `1.0`.
 * A runtime without it (Node 20) would render other prompts than SGLang with no sign of it, so
 * loading this module there fails instead.
 */
const reviverSeesSource = JSON.parse("1.0", (_k: string, v: unknown, context?: ReviverContext) => (context?.source === "1.0" ? "yes" : v) as unknown) === "yes";
if (!reviverSeesSource) throw new Error("kvedge needs JSON.parse source text access (workerd, or Node.js 22 or newer) to render prompts exactly");

/**
 * JSON.parse that keeps each number's lexeme (as a PyNumber) via the reviver's source-text access.
 * Throws SyntaxError on invalid JSON, like JSON.parse.
 */
export function parseJsonKeepingNumbers(text: string): unknown {
  return JSON.parse(text, function revive(this: unknown, _key: string, value: unknown, context?: ReviverContext) {
    if (typeof value !== "number") return value;
    return new PyNumber(value, pythonNumberTextFromLexeme(context!.source!));
  } as (this: unknown, key: string, value: unknown) => unknown);
}

/**
 * `tools` of a raw request body with every number's lexeme kept (PyNumber), for exact `tojson`
 * output: pass the result as the request's `tools` (dumpTool keeps PyNumbers). Costs a scan of
 * the body and a second parse of its `tools`, so call it only when the request has tools. Null
 * when absent.
 */
export function parseToolsKeepingNumbers(bodyText: string, knownSpan?: readonly [number, number] | null): unknown[] | null {
  // Only the `tools` member's text is parsed again (the reviver parse of a whole 32k-token chat
  // cost as much as the first parse). A caller that scanned the body already passes the span.
  const span = knownSpan ?? topLevelMemberSpan(bodyText, "tools");
  if (span === null) return null;
  const tools = parseJsonKeepingNumbers(bodyText.slice(span[0], span[1]));
  return Array.isArray(tools) ? tools : null;
}

/** The text @huggingface/jinja's `tojson` prints for a number (it uses JSON.stringify). */
export function jinjaNumberText(x: number): string {
  return JSON.stringify(x);
}
