/**
 * `<think>…</think>` → `reasoning_content`, as SGLang's `qwen3` / `qwen3-thinking` reasoning parsers
 * split it (sgl-project/sglang python/sglang/srt/parser/reasoning_parser.py @bafa16ec: Qwen3Detector over
 * BaseReasoningFormatDetector; `qwen3-thinking` forces reasoning, so output that starts inside the
 * thinking block — the Qwen3-VL-Thinking template pre-fills `<think>\n`, src/prompt/templates/
 * qwen3vl-thinking.jinja L109 — is reasoning until `</think>`).
 *
 * When it applies (serving_chat.py `_get_reasoning_from_request` + `separate_reasoning`): `qwen3`
 * reasons unless `chat_template_kwargs.enable_thinking` is not true (then force_reasoning is off and
 * only a literal `<think>` starts reasoning); `qwen3-thinking` always forces it.
 */

import { heldTail } from "./partial-tag.ts";
import { pyRstrip, pyStrip } from "../util/py-str.ts";

export type ReasoningParserName = "qwen3" | "qwen3-thinking";

const START = "<think>";
const END = "</think>";

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

/** One-shot split (BaseReasoningFormatDetector.detect_and_parse). */
export function splitReasoning(text: string, force: boolean): ReasoningSplit {
  if (!force && !text.includes(START)) return { reasoning: "", content: text };
  const processed = pyStrip(text.split(START).join(""));
  const at = processed.indexOf(END);
  // Truncated before </think>: all of it is reasoning.
  if (at === -1) return { reasoning: processed, content: "" };
  return { reasoning: processed.slice(0, at), content: pyStrip(processed.slice(at + END.length)) };
}

/**
 * Incremental split of one choice's stream (BaseReasoningFormatDetector.parse_streaming_increment).
 * Deliberate difference: a tag split across frames is recognised (a tail that may start one is held
 * back); SGLang only waits when a whole frame is a tag prefix. With Qwen3's tokenizer `<think>` and
 * `</think>` are single tokens, so both behave the same on real output.
 */
export class ReasoningStream {
  private buf = "";
  /** Reasoning held back when it is not streamed (stream_reasoning false), before `buf`. */
  private unsent: string[] = [];
  private inReasoning: boolean;
  private strippedStart = false;
  /** `</think>` was seen: the rest is content. */
  private done = false;
  private readonly streamReasoning: boolean;

  constructor(force: boolean, streamReasoning = true) {
    this.inReasoning = force;
    this.streamReasoning = streamReasoning;
  }

  push(delta: string): ReasoningSplit {
    this.buf += delta;
    let cur = this.buf;
    if (!this.strippedStart && !this.done && cur.includes(START)) {
      cur = cur.split(START).join("");
      this.strippedStart = true;
      this.inReasoning = true;
    }
    if (this.inReasoning && cur.includes(END)) {
      const at = cur.indexOf(END);
      const before = this.unsent.join("") + cur.slice(0, at);
      this.buf = "";
      this.unsent = [];
      this.inReasoning = false;
      this.done = true;
      return { reasoning: pyRstrip(before), content: cur.slice(at + END.length) };
    }
    if (this.inReasoning) {
      const keep = heldTail(cur, this.strippedStart ? [END] : [END, START]);
      if (!this.streamReasoning) {
        // Kept in pieces and only the newest searched: searching all of it per delta grew as its square.
        this.unsent.push(cur.slice(0, cur.length - keep));
        this.buf = cur.slice(cur.length - keep);
        return { reasoning: "", content: "" };
      }
      this.buf = cur.slice(cur.length - keep);
      return { reasoning: cur.slice(0, cur.length - keep), content: "" };
    }
    const keep = this.done || this.strippedStart ? 0 : heldTail(cur, [START]);
    this.buf = cur.slice(cur.length - keep);
    return { reasoning: "", content: cur.slice(0, cur.length - keep) };
  }

  /** End of output: what a non-streaming reasoning block held back. */
  finish(): ReasoningSplit {
    const rest = this.unsent.join("") + this.buf;
    this.buf = "";
    this.unsent = [];
    if (rest === "") return { reasoning: "", content: "" };
    return this.inReasoning ? { reasoning: rest, content: "" } : { reasoning: "", content: rest };
  }
}
