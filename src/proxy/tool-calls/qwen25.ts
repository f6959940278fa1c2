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
 * call streams as content, holding back a tail that may be the start of `<tool_call>\n`; inside a call
 * the name is sent once it is complete and valid (with `arguments: ""`), then the arguments stream as the
 * growing common prefix of successive `json.dumps(arguments)` (ensure_ascii default, as SGLang streams
 * them), and the rest is sent when the call's JSON closes. Deliberate differences: a block naming an
 * unknown tool or whose JSON is broken falls back to content (SGLang drops it mid-stream), and text
 * between and after calls that is only whitespace or `</tool_call>` is not sent as content.
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
  /** The text held a `<tool_call>\n` block (SGLang then reports finish_reason "tool_calls"). */
  hadMarkup: boolean;
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

/** One-shot parse of a complete output (qwen25_detector.py `detect_and_parse`). */
export function parseQwenToolCalls(text: string, tools: readonly ToolDefinition[]): NonStreamToolResult {
  const idx = text.indexOf(QWEN_BOT);
  if (idx === -1) return { content: text, calls: [], hadMarkup: false };
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
    for (const act of Array.isArray(parsed) ? parsed : [parsed]) {
      if (!isJsonObject(act)) continue;
      const name = act["name"];
      if (typeof name !== "string" || !known.has(name)) continue; // "undefined function": skipped
      calls.push({ name, arguments: pyJsonDumps(argumentsOf(act), false) });
    }
  }
  if (calls.length === 0) return { content: text, calls, hadMarkup: true };
  return { content: pyStrip(text.slice(0, idx)), calls, hadMarkup: true };
}

/** One streamed tool-call delta: the first carries the name (and `arguments: ""`), later ones argument text. */
export interface ToolCallDelta {
  index: number;
  name?: string;
  arguments: string;
}

export interface StreamStep {
  content: string;
  calls: ToolCallDelta[];
}

export function commonPrefixLength(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a.charCodeAt(i) === b.charCodeAt(i)) i++;
  return i;
}

/** Incremental parser for one choice's stream. */
export class QwenToolCallStream {
  private readonly known: Set<string>;
  private mode: "text" | "call" | "between" = "text";
  private buf = "";
  /** Calls whose name was sent. */
  private count = 0;
  private nameSent = false;
  /** Argument text sent for the current call, and the previous dumps of its arguments. */
  private sentArgs = "";
  private prevArgs: string | null = null;

  constructor(tools: readonly ToolDefinition[]) {
    this.known = new Set(tools.map((t) => t.function.name));
  }

  /** Calls started so far (each has an index 0..n-1). */
  get callCount(): number {
    return this.count;
  }

  push(delta: string): StreamStep {
    const out: StreamStep = { content: "", calls: [] };
    this.buf += delta;
    this.run(out, false);
    return out;
  }

  /** End of output: flushes held text and any arguments not yet sent. */
  finish(): StreamStep {
    const out: StreamStep = { content: "", calls: [] };
    this.run(out, true);
    if (this.mode === "call") {
      if (!this.nameSent) out.content += QWEN_BOT + this.buf;
      else if (this.prevArgs !== null && this.prevArgs.startsWith(this.sentArgs) && this.prevArgs.length > this.sentArgs.length) {
        // serving_chat.py `_check_for_unstreamed_tool_args`: the last call's remaining arguments.
        out.calls.push({ index: this.count - 1, arguments: this.prevArgs.slice(this.sentArgs.length) });
      }
    } else if (this.mode === "text") {
      out.content += this.buf.split(EOT_BARE).join("");
    }
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
          this.startCall();
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
      if (this.mode === "between") {
        const rest = this.buf.replace(/^(?:\s|<\/tool_call>)+/u, "");
        if (rest.startsWith(QWEN_BOT)) {
          this.buf = rest.slice(QWEN_BOT.length);
          this.startCall();
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

  private startCall(): void {
    this.mode = "call";
    this.nameSent = false;
    this.sentArgs = "";
    this.prevArgs = null;
  }

  /** Falls back to text for a block that is not a valid call. */
  private abandonCall(out: StreamStep): void {
    out.content += QWEN_BOT;
    this.mode = "text";
  }

  /** Advances the current call; true when the mode changed and the loop should continue. */
  private stepCall(out: StreamStep): boolean {
    const lead = /^\s*/u.exec(this.buf)![0].length;
    const body = this.buf.slice(lead);
    if (body === "") return false;
    let parsed;
    try {
      parsed = parsePartialJson(body, this.nameSent);
    } catch (e) {
      if (!(e instanceof MalformedJson)) throw e;
      if (!this.nameSent) {
        this.abandonCall(out);
        return true;
      }
      return false; // a broken call after its name: nothing more is sent for it
    }
    const obj = parsed.value;
    if (!isJsonObject(obj)) {
      if (!this.nameSent) {
        this.abandonCall(out);
        return true;
      }
      return false;
    }
    if (!this.nameSent) {
      const name = obj["name"];
      if (name === undefined) {
        if (parsed.complete) {
          this.abandonCall(out);
          return true;
        }
        return false;
      }
      if (typeof name !== "string" || !this.known.has(name)) {
        this.abandonCall(out);
        return true;
      }
      out.calls.push({ index: this.count, name, arguments: "" });
      this.count++;
      this.nameSent = true;
      // Arguments may already be here; parse again with partial strings allowed.
      return true;
    }
    const index = this.count - 1;
    const args = obj["parameters"] !== undefined ? obj["parameters"] : obj["arguments"];
    if (parsed.complete) {
      const full = pyJsonDumps(args === undefined || !truthy(args) ? argumentsOf(obj) : args);
      const rest = full.startsWith(this.sentArgs) ? full.slice(this.sentArgs.length) : "";
      if (rest !== "") out.calls.push({ index, arguments: rest });
      this.buf = body.slice(parsed.end);
      this.mode = "between";
      this.prevArgs = null;
      return true;
    }
    if (args !== undefined && truthy(args)) {
      const cur = pyJsonDumps(args);
      if (this.prevArgs !== null && cur !== this.prevArgs) {
        const stable = cur.slice(0, commonPrefixLength(this.prevArgs, cur));
        if (stable.length > this.sentArgs.length && stable.startsWith(this.sentArgs)) {
          out.calls.push({ index, arguments: stable.slice(this.sentArgs.length) });
          this.sentArgs = stable;
        }
      }
      this.prevArgs = cur;
    }
    return false;
  }
}
