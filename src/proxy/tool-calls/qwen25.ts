/**
 * The Qwen tool-call format, as SGLang's `qwen25` / `qwen` parser reads it
 * (sgl-project/sglang python/sglang/srt/function_call/qwen25_detector.py @44484b16; the parser map
 * in function_call_parser.py @ce2b3128 `ToolCallParserEnum` maps both names to Qwen25Detector). The Qwen3-VL chat templates teach it
 * (../shared/templates/qwen3vl-*.jinja L20/L36: "<tool_call>\n{"name": …, "arguments": …}\n</tool_call>"),
 * and Qwen2.5-VL is served with the same parser. Each call is one block
 * `<tool_call>\n{"name": "…", "arguments": {…}}\n</tool_call>`; parallel calls are consecutive blocks.
 *
 * Non-stream (`detect_and_parse`, qwen25_detector.py): content = the text before the first
 * `<tool_call>\n`, stripped; every block whose JSON parses and names a known tool becomes a call with
 * `arguments = json.dumps(parameters or arguments or {}, ensure_ascii=False)` (base_format_detector.py
 * `parse_base_json`); a block that does not parse is skipped. When no call survives, the whole text
 * stays content (function_call_parser.py `parse_non_stream`: "return full_text, []").
 *
 * Streaming (base_format_detector.py @72a0fbe5 `parse_streaming_increment` + the Qwen25 override): text before a
 * call streams as content, holding back a tail that may be the start of `<tool_call>\n`. Deliberate
 * differences: SGLang sends a call's name as soon as it is complete and then its arguments as they
 * grow, so a call that turns out broken or is cut off reached the client half-made; here a call is
 * sent whole once its JSON closes and it is valid (arguments as `json.dumps` with ensure_ascii, as
 * SGLang streams them), and a block that is no call (broken JSON, unknown tool, cut off) is sent as
 * the text it is. Text between and after calls that is only whitespace or `</tool_call>` is not sent.
 */
import type { ToolDefinition } from "../../api/openai-schema.ts";
import { PyNumber } from "../../prompt/py-json.ts";
import { heldTail } from "../partial-tag.ts";
import { MalformedJson, parsePartialJson, parsePyJson, pyJsonDumps, type PyJson } from "./json.ts";

const QWEN_BOT = "<tool_call>\n";
const EOT_BARE = "</tool_call>";

export interface ParsedToolCall {
  name: string;
  /** JSON text of the arguments, as SGLang builds it. */
  arguments: string;
}

export interface NonStreamToolResult {
  /** Content left after the calls were taken out (null when empty, as SGLang's `text if text else None`). */
  content: string;
  calls: ParsedToolCall[];
}

export function isJsonObject(v: PyJson | undefined): v is { [k: string]: PyJson } {
  return typeof v === "object" && v !== null && !Array.isArray(v) && !(v instanceof PyNumber);
}

/** Python truthiness of a parsed JSON value (for `parameters or arguments`). */
export function truthy(v: PyJson | undefined): boolean {
  if (v === undefined || v === null || v === false || v === "") return false;
  if (Array.isArray(v)) return v.length > 0;
  if (v instanceof PyNumber) return v.value !== 0;
  if (typeof v === "object") return Object.keys(v).length > 0;
  return true;
}

function argumentsOf(call: { [k: string]: PyJson }): PyJson {
  const params = call["parameters"];
  if (truthy(params)) return params!;
  return call["arguments"] === undefined ? {} : call["arguments"]!;
}

/** Python `str.strip()` for the whitespace a model emits around calls. */
function pyStrip(s: string): string {
  return s.replace(/^[\s\u001c-\u001f\u0085]+|[\s\u001c-\u001f\u0085]+$/gu, "");
}

/** A JSON value holding a number Python reads as inf or nan (`1e400`, `Infinity`, `NaN`): its dumps is not JSON. */
function hasNonFinite(v: PyJson | undefined): boolean {
  if (v instanceof PyNumber) return !Number.isFinite(v.value);
  if (Array.isArray(v)) return v.some(hasNonFinite);
  if (typeof v === "object" && v !== null) return Object.values(v).some(hasNonFinite);
  return false;
}

/**
 * The calls of one parsed block: an object, or an array of them (qwen25_detector.py parses either).
 * An item counts when it names an offered tool and its arguments dump to valid JSON; SGLang would
 * send `Infinity`/`NaN` (Python's json.dumps), which no JSON parser a client uses accepts, so such
 * an item is not a call (deliberate difference).
 */
export function callsOfBlock(block: PyJson, known: ReadonlySet<string>, ensureAscii: boolean): ParsedToolCall[] {
  const calls: ParsedToolCall[] = [];
  for (const act of Array.isArray(block) ? block : [block]) {
    if (!isJsonObject(act)) continue;
    const name = act["name"];
    if (typeof name !== "string" || !known.has(name)) continue; // "undefined function": skipped
    const args = argumentsOf(act);
    if (hasNonFinite(args)) continue;
    calls.push({ name, arguments: pyJsonDumps(args, ensureAscii) });
  }
  return calls;
}

/** One-shot parse of a complete output (qwen25_detector.py `detect_and_parse`). */
export function parseQwenToolCalls(text: string, tools: readonly ToolDefinition[]): NonStreamToolResult {
  const idx = text.indexOf(QWEN_BOT);
  if (idx === -1) return { content: text, calls: [] };
  const known = new Set(tools.map((t) => t.function.name));
  const calls: ParsedToolCall[] = [];
  const block = /<tool_call>\n([\s\S]*?)\n<\/tool_call>/g;
  for (const m of text.matchAll(block)) {
    let parsed: PyJson;
    try {
      parsed = parsePyJson(pyStrip(m[1]!));
    } catch {
      continue; // json.JSONDecodeError: logged and skipped by SGLang
    }
    calls.push(...callsOfBlock(parsed, known, false));
  }
  if (calls.length === 0) return { content: text, calls };
  return { content: pyStrip(text.slice(0, idx)), calls };
}

/** One streamed tool call, whole: its name and its complete arguments. */
export interface ToolCallDelta {
  index: number;
  name: string;
  arguments: string;
}

export interface StreamStep {
  content: string;
  calls: ToolCallDelta[];
}

/**
 * Incremental parser for one choice's stream. A call is sent whole (name and arguments in one
 * delta) once its JSON closes and it is valid: a client acting on a streamed call never gets one
 * that later turns out broken, cut off by max_tokens or a stop string, or naming no offered tool.
 * (SGLang streams the name first and then the arguments as they grow, so such a call reached the
 * client half-made, with finish_reason "tool_calls": deliberate difference.) A block that is not a
 * call is sent as the text it is, closing tag included, as the non-stream answer keeps it.
 */
export class QwenToolCallStream {
  private readonly known: Set<string>;
  /** text: plain text; call: inside a block, not yet complete; between: after a call; raw: a block that is not a call, up to its closing tag. */
  private mode: "text" | "call" | "between" | "raw" = "text";
  private buf = "";
  /** Calls sent. */
  private count = 0;

  constructor(tools: readonly ToolDefinition[]) {
    this.known = new Set(tools.map((t) => t.function.name));
  }

  /** Calls sent so far (each has an index 0..n-1). */
  get callCount(): number {
    return this.count;
  }

  push(delta: string): StreamStep {
    const out: StreamStep = { content: "", calls: [] };
    this.buf += delta;
    this.run(out, false);
    return out;
  }

  /** End of output: flushes held text; a call still open (cut off) is sent as the text it is. */
  finish(): StreamStep {
    const out: StreamStep = { content: "", calls: [] };
    this.run(out, true);
    if (this.mode === "call") out.content += QWEN_BOT + this.buf;
    else if (this.mode === "raw") out.content += this.buf;
    else if (this.mode === "text") out.content += this.buf.split(EOT_BARE).join("");
    this.buf = "";
    return out;
  }

  private run(out: StreamStep, final: boolean): void {
    for (;;) {
      if (this.mode === "text") {
        const at = this.buf.indexOf(QWEN_BOT);
        if (at !== -1) {
          out.content += this.buf.slice(0, at).split(EOT_BARE).join("");
          this.buf = this.buf.slice(at + QWEN_BOT.length);
          this.mode = "call";
          continue;
        }
        if (final) return;
        const keep = heldTail(this.buf, [QWEN_BOT, EOT_BARE]);
        const emit = this.buf.slice(0, this.buf.length - keep);
        // A stray "</tool_call>" in normal text is dropped (qwen25_detector.py streaming override).
        out.content += emit.split(EOT_BARE).join("");
        this.buf = this.buf.slice(emit.length);
        return;
      }
      if (this.mode === "raw") {
        const at = this.buf.indexOf(EOT_BARE);
        if (at !== -1) {
          out.content += this.buf.slice(0, at + EOT_BARE.length);
          this.buf = this.buf.slice(at + EOT_BARE.length);
          this.mode = "text";
          continue;
        }
        if (final) return;
        const emit = this.buf.slice(0, this.buf.length - heldTail(this.buf, [EOT_BARE]));
        out.content += emit;
        this.buf = this.buf.slice(emit.length);
        return;
      }
      if (this.mode === "between") {
        const rest = this.buf.replace(/^(?:\s|<\/tool_call>)+/u, "");
        if (rest.startsWith(QWEN_BOT)) {
          this.buf = rest.slice(QWEN_BOT.length);
          this.mode = "call";
          continue;
        }
        if (rest === "" || (!final && (QWEN_BOT.startsWith(rest) || EOT_BARE.startsWith(rest)))) {
          if (final) this.buf = "";
          return; // only separators so far
        }
        this.mode = "text";
        this.buf = rest;
        continue;
      }
      // call
      if (!this.stepCall(out)) return;
    }
  }

  /** The current block is not a call: its text goes out as it is. */
  private abandonCall(out: StreamStep): void {
    out.content += QWEN_BOT;
    this.mode = "raw";
  }

  /** Advances the current block; true when the mode changed and the loop should continue. */
  private stepCall(out: StreamStep): boolean {
    const lead = /^\s*/u.exec(this.buf)![0].length;
    const body = this.buf.slice(lead);
    if (body === "") return false;
    let parsed;
    try {
      parsed = parsePartialJson(body, false);
    } catch (e) {
      if (!(e instanceof MalformedJson)) throw e;
      this.abandonCall(out);
      return true;
    }
    const value = parsed.value;
    // Known early: a value that is no object or array, or an object whose (complete) name is no offered tool.
    const badName = isJsonObject(value) && value["name"] !== undefined && !(typeof value["name"] === "string" && this.known.has(value["name"]));
    if ((!isJsonObject(value) && !Array.isArray(value)) || badName) {
      this.abandonCall(out);
      return true;
    }
    if (!parsed.complete) return false;
    // Streamed arguments are dumped with ensure_ascii, as SGLang streams them.
    const calls = callsOfBlock(value, this.known, true);
    if (calls.length === 0) {
      this.abandonCall(out);
      return true;
    }
    for (const c of calls) out.calls.push({ index: this.count++, name: c.name, arguments: c.arguments });
    this.buf = body.slice(parsed.end);
    this.mode = "between";
    return true;
  }
}
