/**
 * The Qwen tool-call format, as SGLang's `qwen25` / `qwen` parser reads it
 * (sgl-project/sglang python/sglang/srt/function_call/qwen25_detector.py; the parser map in
 * function_call_parser.py @00828e56 `ToolCallParserEnum` maps both names to Qwen25Detector). The
 * Qwen3-VL chat templates teach it (src/prompt/templates/qwen3vl-*.jinja L20/L36:
 * "<tool_call>\n{"name": …, "arguments": …}\n</tool_call>"), and Qwen2.5-VL is served with the same
 * parser. Each call is one block `<tool_call>\n{"name": "…", "arguments": {…}}\n</tool_call>`;
 * parallel calls are consecutive blocks.
 *
 * Non-stream (`detect_and_parse`): content = the text before the first `<tool_call>\n`, stripped;
 * every block whose JSON parses (Python json.loads: json.ts) and names a known tool becomes a call
 * with `arguments = json.dumps(parameters or arguments or {}, ensure_ascii=False)`
 * (base_format_detector.py `parse_base_json`); a block that does not parse is skipped. When no call
 * survives, the whole text stays content. Deliberate difference: SGLang's `parse_non_stream`
 * (function_call_parser.py @00828e56) then answers only the text before the markup, so a broken
 * or cut-off call vanishes from the answer (finish_reason `stop`: serving_chat.py
 * `_process_tool_calls`, newest stored version, commit not known).
 *
 * Streaming: text before a call streams as content, holding back a tail that may be the start of
 * `<tool_call>\n`. Arguments are `json.dumps(…, ensure_ascii=False)` in both modes, as SGLang's
 * streaming diff builds them (base_format_detector.py `parse_streaming_increment`, `cur_args_json`,
 * in the version whose `finish` drains held state). Deliberate differences: SGLang sends a call's
 * name as soon as it is complete and then its arguments as they grow, so a call that turns out
 * broken or is cut off reached the client half-made; here a block is judged when it ends, as the
 * one-shot parse judges it, and each of its calls is sent whole; content follows the one-shot
 * parse too (QwenToolCallStream). SGLang's stream drops a stray `</tool_call>` in text; its
 * one-shot parse, and both of ours, keep it.
 */
import type { ToolDefinition } from "../../api/openai-schema.ts";
import { PyNumber } from "../../prompt/py-json.ts";
import { heldTail } from "../partial-tag.ts";
import { parsePyJson, pyJsonDumps, type PyJson, type PyObject } from "./json.ts";
import { pyRstrip, pyStrip } from "../../util/py-str.ts";

const QWEN_BOT = "<tool_call>\n";
/** Where a block ends: the first `\n</tool_call>` after its start. */
const BLOCK_END = "\n</tool_call>";

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

export function isJsonObject(v: PyJson | undefined): v is PyObject {
  return v instanceof Map;
}

/** Python truthiness of a parsed JSON value (for `parameters or arguments`). */
export function truthy(v: PyJson | undefined): boolean {
  if (v === undefined || v === null || v === false || v === "") return false;
  if (Array.isArray(v)) return v.length > 0;
  if (v instanceof PyNumber) return v.value !== 0;
  if (v instanceof Map) return v.size > 0;
  return true;
}

function argumentsOf(call: PyObject): PyJson {
  const params = call.get("parameters");
  if (truthy(params)) return params!;
  return call.has("arguments") ? call.get("arguments")! : new Map(); // a null stays null ("null")
}

/**
 * The calls of one parsed block: an object, or an array of them (qwen25_detector.py parses either).
 * An item counts when it names an offered tool. Its arguments are what Python's json.dumps prints,
 * `Infinity` and `NaN` included for a float that overflows or a literal NaN (json.dumps allows them
 * by default, and Python clients' json.loads reads them back).
 */
export function callsOfBlock(block: PyJson, known: ReadonlySet<string>): ParsedToolCall[] {
  const calls: ParsedToolCall[] = [];
  for (const act of Array.isArray(block) ? block : [block]) {
    // Deliberate difference: SGLang's parse_base_json calls act.get("name") and raises on a
    // non-object item (base_format_detector.py, newest stored version), and serving_chat.py's
    // `except` then answers the whole text without any call; here only that item is dropped.
    if (!isJsonObject(act)) continue;
    const name = act.get("name");
    if (typeof name !== "string" || !known.has(name)) continue; // "undefined function": skipped
    const args = argumentsOf(act);
    calls.push({ name, arguments: pyJsonDumps(args, false) });
  }
  return calls;
}

/** The calls in the text between a block's `<tool_call>\n` and `\n</tool_call>`; none when it is not JSON (json.JSONDecodeError: logged and skipped by SGLang). */
function callsOfBlockText(body: string, known: ReadonlySet<string>): ParsedToolCall[] {
  let parsed: PyJson;
  try {
    parsed = parsePyJson(pyStrip(body));
  } catch {
    return [];
  }
  return callsOfBlock(parsed, known);
}

/** One-shot parse of a complete output (qwen25_detector.py `detect_and_parse`). */
export function parseQwenToolCalls(text: string, tools: readonly ToolDefinition[]): NonStreamToolResult {
  const idx = text.indexOf(QWEN_BOT);
  if (idx === -1) return { content: text, calls: [] };
  const known = new Set(tools.map((t) => t.function.name));
  const calls: ParsedToolCall[] = [];
  // The blocks /<tool_call>\n([\s\S]*?)\n<\/tool_call>/g finds, by two searches each: that regex
  // rescans to the end from every opening that has no end (thousands of openings: quadratic).
  for (let open = idx; open !== -1; ) {
    const body = open + QWEN_BOT.length;
    const end = text.indexOf(BLOCK_END, body);
    if (end === -1) break; // no later opening can have an end either
    calls.push(...callsOfBlockText(text.slice(body, end), known));
    open = text.indexOf(QWEN_BOT, end + BLOCK_END.length);
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
 * Incremental parser for one choice's stream that answers what `parseQwenToolCalls` answers for the
 * whole text. A block runs from `<tool_call>\n` to the first `\n</tool_call>` and is judged when
 * it ends; each call in it is sent whole (name and arguments in one delta). Text before the first
 * block streams as it comes, except the whitespace just before that block (the one-shot parse
 * strips it when calls follow). From the first block on, text waits: once a call has been sent it
 * is dropped (the non-stream answer keeps only the text before the first block), and if the output
 * ends without any call it is sent then, block markup and all (the non-stream answer is then the
 * whole text). So a block that is no call (broken JSON, no offered tool, cut off by max_tokens or a
 * stop string) reaches a streaming client as text only at the end, and only if no call follows.
 * One difference remains: whitespace at the very start of an answer that later calls a tool is
 * streamed, where the one-shot parse strips it (the stream cannot know a call will come).
 * SGLang streams a call's name first and its arguments as they grow, so a call that turned out
 * broken or was cut off reached the client half-made (deliberate difference). Arguments are the
 * non-stream answer's text, character for character (ensure_ascii=False in both).
 *
 * Linear in the output: a block's text is kept in pieces and only the newest piece (plus a
 * straddling end) is searched per delta, and nothing is parsed before the block ends. Searching
 * and parsing the whole block again per delta cost seconds for a tool call writing a long file.
 */
export class QwenToolCallStream {
  private readonly known: Set<string>;
  /** text: outside a block; call: inside one, before its end. */
  private mode: "text" | "call" = "text";
  /** Text mode: a tail that may be the start of `<tool_call>\n`, not yet judged. */
  private botTail = "";
  /** Text mode before the first block: trailing whitespace not yet sent. */
  private space = "";
  /** Call mode: the block's text so far, in pieces, and its length. */
  private body: string[] = [];
  private bodyLength = 0;
  /** Call mode: the body's last BLOCK_END.length − 1 characters (an end may straddle two deltas). */
  private bodyTail = "";
  /** From the first `<tool_call>\n` on: text waiting for the end of output or the first call. */
  private held: string[] | null = null;
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
    this.feed(out, delta);
    return out;
  }

  /** End of output: held text goes out if no call did; a block still open (cut off) counts as text. */
  finish(): StreamStep {
    const out: StreamStep = { content: "", calls: [] };
    if (this.mode === "call") this.text(out, QWEN_BOT + this.body.join(""));
    else this.text(out, this.space + this.botTail);
    if (this.held !== null && this.count === 0) out.content += this.held.join("");
    this.held = null;
    this.body = [];
    this.botTail = this.space = this.bodyTail = "";
    return out;
  }

  /** Text for the client: live before the first block, held after it, dropped after a call. */
  private text(out: StreamStep, s: string): void {
    if (s === "" || this.count > 0) return;
    if (this.held !== null) this.held.push(s);
    else out.content += s;
  }

  private feed(out: StreamStep, delta: string): void {
    let rest = delta;
    while (rest !== "") rest = this.mode === "text" ? this.feedText(out, rest) : this.feedBlock(out, rest);
  }

  /** Text mode: sends or holds text up to the next block's start; returns what follows it ("" when none). */
  private feedText(out: StreamStep, delta: string): string {
    const s = this.botTail + delta;
    const at = s.indexOf(QWEN_BOT);
    const upTo = at === -1 ? s.length - heldTail(s, [QWEN_BOT]) : at;
    const before = s.slice(0, upTo);
    this.botTail = at === -1 ? s.slice(upTo) : "";
    if (this.held === null) {
      // Before the first block: whitespace that ends the text waits, since a block may follow.
      const shown = pyRstrip(before);
      if (shown !== "") {
        this.text(out, this.space + shown);
        this.space = before.slice(shown.length);
      } else this.space += before;
      if (at === -1) return "";
      this.held = [this.space];
      this.space = "";
    } else this.text(out, before);
    if (at === -1) return "";
    this.mode = "call";
    this.body = [];
    this.bodyLength = 0;
    this.bodyTail = "";
    return s.slice(at + QWEN_BOT.length);
  }

  /** Call mode: collects the block until its end, then judges it; returns the text after it. */
  private feedBlock(out: StreamStep, delta: string): string {
    const window = this.bodyTail + delta;
    const j = window.indexOf(BLOCK_END);
    if (j === -1) {
      this.body.push(delta);
      this.bodyLength += delta.length;
      this.bodyTail = window.slice(-(BLOCK_END.length - 1));
      return "";
    }
    const whole = this.body.join("") + delta;
    const endAt = this.bodyLength - this.bodyTail.length + j;
    const text = whole.slice(0, endAt);
    this.mode = "text";
    this.body = [];
    const calls = callsOfBlockText(text, this.known);
    if (calls.length === 0) this.text(out, QWEN_BOT + text + BLOCK_END);
    else this.held = [];
    for (const c of calls) out.calls.push({ index: this.count++, name: c.name, arguments: c.arguments });
    return whole.slice(endAt + BLOCK_END.length);
  }
}
