/**
 * `<think>…</think>` → `reasoning_content`, as SGLang's `qwen3` / `qwen3-thinking` reasoning parsers
 * split it (sgl-project/sglang python/sglang/srt/parser/reasoning_parser.py @002e9bfc:
 * Qwen3Detector over BaseReasoningFormatDetector; `qwen3-thinking` forces reasoning, so output that
 * starts inside the thinking block — the Qwen3-VL-Thinking template pre-fills `<think>\n`,
 * src/prompt/templates/qwen3vl-thinking.jinja L109 — is reasoning until `</think>`).
 *
 * The one-shot split (`_detect_and_parse_impl`): leading `<think>` tags are dropped; reasoning ends
 * at the first `</think>`, or, when there is none, at the first `<tool_call>` (Qwen3Detector's
 * `tool_start_token`: a thinking model that opens a tool call without closing its thinking), which
 * stays in the content for the tool-call parser; without either, all of it is reasoning. Nothing is
 * stripped: the whitespace around the reasoning is kept on both sides.
 *
 * When it applies (serving_chat.py `_get_reasoning_from_request` + `separate_reasoning`): `qwen3`
 * reasons unless `chat_template_kwargs.enable_thinking` is not true (then force_reasoning is off and
 * only a `<think>` starts reasoning); `qwen3-thinking` always forces it.
 */

import { heldTail } from "./partial-tag.ts";

export type ReasoningParserName = "qwen3" | "qwen3-thinking";

const START = "<think>";
const END = "</think>";
/** Qwen3Detector's tool_start_token: reasoning that reaches it without `</think>` ends there. */
const TOOL_START = "<tool_call>";

/** `force_reasoning` for a request (serving_chat.py `_get_reasoning_from_request`). */
export function forceReasoning(parser: ReasoningParserName, chatTemplateKwargs: Record<string, unknown> | undefined): boolean {
  if (parser === "qwen3-thinking") return true;
  // qwen3 reasons by default: "not kwargs or kwargs.get('enable_thinking', True) is True"
  if (chatTemplateKwargs === undefined || Object.keys(chatTemplateKwargs).length === 0) return true;
  // Python: `.get("enable_thinking", True) is True`: only a missing key defaults; a null is not True.
  return ("enable_thinking" in chatTemplateKwargs ? chatTemplateKwargs["enable_thinking"] : true) === true;
}

export interface ReasoningSplit {
  reasoning: string;
  content: string;
}

/** The output without the `<think>` tags it starts with (`while processed_text.startswith(...)`). */
function dropLeadingStarts(text: string): string {
  let at = 0;
  while (text.startsWith(START, at)) at += START.length;
  return text.slice(at);
}

/**
 * One-shot split (BaseReasoningFormatDetector `_detect_and_parse_impl`). Deliberate difference:
 * without force_reasoning, only a `<think>` at the very start opens reasoning. SGLang's one-shot
 * parse turns everything before the first `</think>` into reasoning when a `<think>` appears
 * anywhere, and its stream sends the text before that `<think>` as content; a stream cannot know a
 * `<think>` is still to come without holding the whole answer back.
 */
export function splitReasoning(text: string, force: boolean): ReasoningSplit {
  if (!force && !text.startsWith(START)) return { reasoning: "", content: text };
  const processed = dropLeadingStarts(text);
  const end = processed.indexOf(END);
  if (end !== -1) return { reasoning: processed.slice(0, end), content: processed.slice(end + END.length) };
  const tool = processed.indexOf(TOOL_START);
  if (tool !== -1) return { reasoning: processed.slice(0, tool), content: processed.slice(tool) };
  // Truncated before </think>: all of it is reasoning.
  return { reasoning: processed, content: "" };
}

/**
 * Incremental split of one choice's stream that answers what `splitReasoning` answers for the
 * whole text, at every chunking. Reasoning streams as it comes, holding back a tail that may start
 * a tag. Once a `<tool_call>` shows up inside the reasoning, what follows waits: a later `</think>`
 * makes it reasoning after all (the one-shot parse splits at `</think>` when there is one), and the
 * end of the output makes it content from the `<tool_call>` on. SGLang's stream ends reasoning at
 * the `<tool_call>` at once, so its stream and its one-shot answer differ when `</think>` follows.
 */
export class ReasoningStream {
  /** start: before the leading `<think>` tags are settled; reasoning; content: the rest passes through. */
  private mode: "start" | "reasoning" | "content";
  /** Start and reasoning modes: text not yet judged (a tag prefix, or everything after a `<tool_call>`). */
  private buf = "";
  /**
   * Reasoning mode after a `<tool_call>`: the text from it on, in pieces, waiting for `</think>` or
   * the end (null before one). Only the newest piece and a straddling tail are searched per delta.
   */
  private pending: string[] | null = null;
  /** The pending text's last END.length − 1 characters (a `</think>` may straddle two deltas). */
  private pendingTail = "";
  /** Reasoning held back when it is not streamed (stream_reasoning false), in pieces. */
  private unsent: string[] = [];
  private readonly force: boolean;
  private readonly streamReasoning: boolean;

  constructor(force: boolean, streamReasoning = true) {
    this.mode = "start";
    this.force = force;
    this.streamReasoning = streamReasoning;
  }

  push(delta: string): ReasoningSplit {
    const out: ReasoningSplit = { reasoning: "", content: "" };
    if (this.mode === "content") {
      out.content = delta;
      return out;
    }
    if (this.pending !== null) {
      this.pushPending(out, delta);
      return out;
    }
    this.buf += delta;
    if (this.mode === "start" && !this.settleStart()) return out;
    this.scanReasoning(out);
    return out;
  }

  /** After a `<tool_call>` in the reasoning: waits, unless `</think>` arrives (then it was all reasoning). */
  private pushPending(out: ReasoningSplit, delta: string): void {
    const pending = this.pending!;
    const tail = this.pendingTail;
    const window = tail + delta;
    const at = window.indexOf(END);
    pending.push(delta);
    this.pendingTail = window.slice(-(END.length - 1));
    if (at === -1) return;
    const whole = pending.join("");
    const end = whole.length - delta.length - tail.length + at;
    this.pending = null;
    this.emitReasoning(out, whole.slice(0, end));
    out.reasoning = this.unsent.join("") + out.reasoning;
    this.unsent = [];
    out.content = whole.slice(end + END.length);
    this.mode = "content";
  }

  /** End of output: reasoning held back goes out; a pending `<tool_call>` and what follows is content. */
  finish(): ReasoningSplit {
    const out: ReasoningSplit = { reasoning: "", content: "" };
    if (this.mode === "content") return out;
    if (this.mode === "start") {
      // Only `<think>` prefixes were seen: as the one-shot split reads that text.
      const split = splitReasoning(this.buf, this.force);
      this.buf = "";
      this.mode = "content";
      return split;
    }
    if (this.pending !== null) out.content = this.pending.join("");
    else this.emitReasoning(out, this.buf);
    this.pending = null;
    out.reasoning = this.unsent.join("") + out.reasoning;
    this.unsent = [];
    this.buf = "";
    this.mode = "content";
    return out;
  }

  /** Start mode: drops the leading `<think>` tags; false while the text may still be one. */
  private settleStart(): boolean {
    const rest = dropLeadingStarts(this.buf);
    if (rest === "" || START.startsWith(rest)) {
      return false; // all tags so far, or a tag cut off
    }
    const opened = rest.length !== this.buf.length;
    this.buf = rest;
    this.mode = this.force || opened ? "reasoning" : "content";
    return true;
  }

  private scanReasoning(out: ReasoningSplit): void {
    if (this.mode === "content") {
      out.content = this.buf;
      this.buf = "";
      return;
    }
    const end = this.buf.indexOf(END);
    if (end !== -1) {
      this.emitReasoning(out, this.buf.slice(0, end));
      out.reasoning = this.unsent.join("") + out.reasoning;
      this.unsent = [];
      out.content = this.buf.slice(end + END.length);
      this.buf = "";
      this.mode = "content";
      return;
    }
    const tool = this.buf.indexOf(TOOL_START);
    if (tool !== -1) {
      this.emitReasoning(out, this.buf.slice(0, tool));
      this.pending = [this.buf.slice(tool)];
      this.pendingTail = this.pending[0]!.slice(-(END.length - 1));
      this.buf = "";
      return;
    }
    const keep = heldTail(this.buf, [END, TOOL_START]);
    this.emitReasoning(out, this.buf.slice(0, this.buf.length - keep));
    this.buf = this.buf.slice(this.buf.length - keep);
  }

  private emitReasoning(out: ReasoningSplit, text: string): void {
    if (text === "") return;
    if (this.streamReasoning) out.reasoning += text;
    else this.unsent.push(text);
  }
}
