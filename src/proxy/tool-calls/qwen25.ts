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
 * grow, so a call that turns out broken or is cut off reached the client half-made; here a block is
 * judged when it ends, as the one-shot parse judges it, and each of its calls is sent whole
 * (arguments as `json.dumps` with ensure_ascii, as SGLang streams them); a block that is no call
 * (broken JSON, unknown tool, cut off) is sent as the text it is, and nothing after the first call.
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

/** The calls in the text between a block's `<tool_call>\n` and `\n</tool_call>`; none when it is not JSON (json.JSONDecodeError: logged and skipped by SGLang). */
function callsOfBlockText(body: string, known: ReadonlySet<string>, ensureAscii: boolean): ParsedToolCall[] {
  let parsed: PyJson;
  try {
    parsed = parsePyJson(pyStrip(body));
  } catch {
    return [];
  }
  return callsOfBlock(parsed, known, ensureAscii);
}

/** One-shot parse of a complete output (qwen25_detector.py `detect_and_parse`). */
export function parseQwenToolCalls(text: string, tools: readonly ToolDefinition[]): NonStreamToolResult {
  const idx = text.indexOf(QWEN_BOT);
  if (idx === -1) return { content: text, calls: [] };
  const known = new Set(tools.map((t) => t.function.name));
  const calls: ParsedToolCall[] = [];
  const block = /<tool_call>\n([\s\S]*?)\n<\/tool_call>/g;
  for (const m of text.matchAll(block)) calls.push(...callsOfBlockText(m[1]!, known, false));
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

/** Where a block ends, exactly as the non-stream parse reads it (the first `\n</tool_call>` after its start). */
const BLOCK_END = "\n</tool_call>";
const PY_LEADING_SPACE = /^[\s\u001c-\u001f\u0085]*/u;

/**
 * Incremental parser for one choice's stream, block for block as `parseQwenToolCalls` reads the
 * whole text: a block runs from `<tool_call>\n` to the first `\n</tool_call>`, and only then is it
 * judged. A block that holds calls sends each whole (name and arguments in one delta); one that
 * does not (broken JSON, no offered tool, arguments that are not JSON, cut off by max_tokens or a
 * stop string before its end) is sent as the text it is. Once a call has gone out, other text is no
 * longer sent, as the non-stream answer keeps only the text before the first call; text before that
 * streams as it comes (a block judged no call before a later call therefore reaches a streaming
 * client as text, where the non-stream answer drops it: the stream cannot wait for the end).
 * SGLang streams a call's name first and its arguments as they grow, so a call that turned out
 * broken or was cut off reached the client half-made (deliberate difference).
 */
export class QwenToolCallStream {
  private readonly known: Set<string>;
  /** text: plain text; call: inside a block, before its end; raw: a block known to be no call, up to its end. */
  private mode: "text" | "call" | "raw" = "text";
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

  /** End of output: flushes held text; a block still open (cut off) is sent as the text it is. */
  finish(): StreamStep {
    const out: StreamStep = { content: "", calls: [] };
    this.run(out, true);
    if (this.mode === "call") this.text(out, QWEN_BOT + this.buf);
    else if (this.mode === "raw") this.text(out, this.buf);
    else this.text(out, this.buf.split(EOT_BARE).join(""));
    this.buf = "";
    return out;
  }

  /** Text for the client, unless a call has gone out (see the class comment). */
  private text(out: StreamStep, s: string): void {
    if (this.count === 0) out.content += s;
  }

  private run(out: StreamStep, final: boolean): void {
    for (;;) {
      if (this.mode === "text") {
        const at = this.buf.indexOf(QWEN_BOT);
        if (at !== -1) {
          // A stray "</tool_call>" in normal text is dropped (qwen25_detector.py streaming override).
          this.text(out, this.buf.slice(0, at).split(EOT_BARE).join(""));
          this.buf = this.buf.slice(at + QWEN_BOT.length);
          this.mode = "call";
          continue;
        }
        if (final) return;
        const emit = this.buf.slice(0, this.buf.length - heldTail(this.buf, [QWEN_BOT, EOT_BARE]));
        this.text(out, emit.split(EOT_BARE).join(""));
        this.buf = this.buf.slice(emit.length);
        return;
      }
      const end = this.buf.indexOf(BLOCK_END);
      if (this.mode === "raw") {
        if (end !== -1) {
          this.text(out, this.buf.slice(0, end + BLOCK_END.length));
          this.buf = this.buf.slice(end + BLOCK_END.length);
          this.mode = "text";
          continue;
        }
        if (final) return;
        const emit = this.buf.slice(0, this.buf.length - heldTail(this.buf, [BLOCK_END]));
        this.text(out, emit);
        this.buf = this.buf.slice(emit.length);
        return;
      }
      // call
      if (end === -1) {
        if (!final && this.cannotBeCall(this.buf)) {
          this.text(out, QWEN_BOT);
          this.mode = "raw";
          continue;
        }
        return;
      }
      const body = this.buf.slice(0, end);
      this.buf = this.buf.slice(end + BLOCK_END.length);
      this.mode = "text";
      // Streamed arguments are dumped with ensure_ascii, as SGLang streams them.
      const calls = callsOfBlockText(body, this.known, true);
      if (calls.length === 0) this.text(out, QWEN_BOT + body + BLOCK_END);
      for (const c of calls) out.calls.push({ index: this.count++, name: c.name, arguments: c.arguments });
    }
  }

  /** Known before its end: the block's text cannot start a JSON object or array. */
  private cannotBeCall(text: string): boolean {
    const body = text.slice(PY_LEADING_SPACE.exec(text)![0].length);
    if (body === "") return false;
    try {
      const v = parsePartialJson(body, false).value;
      return !isJsonObject(v) && !Array.isArray(v);
    } catch (e) {
      if (!(e instanceof MalformedJson)) throw e;
      return true;
    }
  }
}
