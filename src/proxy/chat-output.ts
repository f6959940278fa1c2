/**
 * What SGLang's `/v1/chat/completions` does to the generated text before a client sees it, for the
 * router that talks to `/generate` (sgl-project/sglang python/sglang/srt/entrypoints/openai/
 * serving_chat.py @0c078e6f `_build_chat_response` and `_generate_chat_stream`): reasoning is split out first,
 * then tool calls are parsed from what is left, and finish_reason "stop" becomes "tool_calls" when
 * a call was returned (SGLang: when the text held tool-call markup, even if no call survived; an
 * OpenAI client reads "tool_calls" as "there are calls to run"). The plan is fixed per request; one
 * ChoiceOutput runs per choice.
 */
import type { ChatCompletionRequest, ToolDefinition } from "../api/openai-schema.ts";
import { bytesToHex } from "../util/hex.ts";
import { forceReasoning, ReasoningStream, splitReasoning, type ReasoningParserName } from "./reasoning.ts";
import { parseQwenToolCalls, QwenToolCallStream, type NonStreamToolResult, type ToolCallDelta } from "./tool-calls/qwen25.ts";

export type ToolCallParserName = "qwen25";
export type { ReasoningParserName };

/** The parsers a model is served with (SGLang's --tool-call-parser / --reasoning-parser). */
export interface ModelParsers {
  toolCallParser: ToolCallParserName | null;
  reasoningParser: ReasoningParserName | null;
}

/**
 * The parsers of a model: configured, else the ones its template calls for. Every Qwen-VL family is
 * served with SGLang's `qwen25` tool parser (the Qwen3-VL templates teach its format); only the
 * Qwen3-VL-Thinking template opens a thinking block in the prompt, so only it gets `qwen3-thinking`.
 */
export function modelParsers(model: {
  templateId: string;
  toolCallParser?: ToolCallParserName | null;
  reasoningParser?: ReasoningParserName | null;
}): ModelParsers {
  return {
    toolCallParser: model.toolCallParser === undefined ? "qwen25" : model.toolCallParser,
    reasoningParser: model.reasoningParser === undefined ? (model.templateId === "qwen3vl-thinking" ? "qwen3-thinking" : null) : model.reasoningParser,
  };
}

export interface ChatOutputPlan {
  /** Tools to parse calls for (forced ones too: they are constrained to the same markup). */
  tools: { list: ToolDefinition[] } | null;
  /** Reasoning split, when the model has a reasoning parser and the request keeps it separate. */
  reasoning: { force: boolean; stream: boolean } | null;
  logprobs: boolean;
  continuousUsage: boolean;
}

export const PLAIN_OUTPUT: ChatOutputPlan = { tools: null, reasoning: null, logprobs: false, continuousUsage: false };

/**
 * Whether the worker is told the output starts with reasoning (`require_reasoning`): SGLang sends
 * `_get_reasoning_from_request(request)` (serving_chat.py `_convert_to_internal_request`), which
 * depends on the parser and the template kwargs only, not on `separate_reasoning`. The worker then
 * counts reasoning tokens, and its grammar backend may hold an output constraint until `</think>`.
 */
export function requiresReasoning(req: ChatCompletionRequest, parsers: ModelParsers): boolean {
  return parsers.reasoningParser !== null && forceReasoning(parsers.reasoningParser, req.chat_template_kwargs);
}

/** The plan for one request (serving_chat.py: `tool_choice != "none" and tools and tool_call_parser`, etc.). */
export function chatOutputPlan(req: ChatCompletionRequest, parsers: ModelParsers): ChatOutputPlan {
  const hasTools = req.tools !== undefined && req.tools.length > 0 && req.tool_choice !== "none";
  // Without a tool-call parser SGLang still constrains a forced call but returns the array as text.
  const tools = hasTools && parsers.toolCallParser !== null ? { list: req.tools! } : null;
  const reasoning =
    parsers.reasoningParser !== null && req.separate_reasoning
      ? { force: forceReasoning(parsers.reasoningParser, req.chat_template_kwargs), stream: req.stream_reasoning }
      : null;
  return { tools, reasoning, logprobs: req.logprobs, continuousUsage: req.stream_options?.continuous_usage_stats === true };
}

/** `call_` + 24 hex chars, as SGLang's `_process_tool_call_id` (uuid4().hex[:24]). */
export function newToolCallId(): string {
  const bytes = new Uint8Array(12);
  crypto.getRandomValues(bytes);
  return `call_${bytesToHex(bytes)}`;
}

export interface OpenAIToolCall {
  id: string;
  index: number;
  type: "function";
  function: { name: string; arguments: string };
}

export interface ChoiceMessageParts {
  content: string | null;
  reasoning_content: string | null;
  tool_calls: OpenAIToolCall[] | null;
  /** finish_reason after the tool-call rule; matched_stop cleared when it changed. */
  finishType: string | null;
  matched: number | string | null;
}

/** Non-stream: one finished choice's text → message parts (serving_chat.py `_build_chat_response`). */
export function finishChoiceText(
  plan: ChatOutputPlan,
  text: string,
  finishType: string | null,
  matched: number | string | null,
): ChoiceMessageParts {
  let reasoning: string | null = null;
  if (plan.reasoning !== null) {
    const split = splitReasoning(text, plan.reasoning.force);
    reasoning = split.reasoning === "" ? null : split.reasoning;
    text = split.content;
  }
  let toolCalls: OpenAIToolCall[] | null = null;
  if (plan.tools !== null) {
    const parsed: NonStreamToolResult = parseQwenToolCalls(text, plan.tools.list);
    if (parsed.calls.length > 0) {
      if (finishType === "stop") {
        finishType = "tool_calls";
        matched = null;
      }
      text = parsed.content;
      toolCalls = parsed.calls.map((c, index) => ({ id: newToolCallId(), index, type: "function", function: { name: c.name, arguments: c.arguments } }));
    }
  }
  return { content: text === "" ? null : text, reasoning_content: reasoning, tool_calls: toolCalls, finishType, matched };
}

/** One delta of a streamed choice, in the order SGLang sends them. */
export type StreamDelta =
  | { kind: "reasoning"; text: string }
  | { kind: "content"; text: string }
  | { kind: "tool_call"; call: { index: number; id?: string; type?: "function"; function: { name?: string; arguments: string } } };

/** Streaming: text deltas of one choice → reasoning / content / tool-call deltas. */
export class ChoiceOutput {
  private readonly reasoning: ReasoningStream | null;
  private readonly tools: QwenToolCallStream | null;

  constructor(plan: ChatOutputPlan) {
    this.reasoning = plan.reasoning === null ? null : new ReasoningStream(plan.reasoning.force, plan.reasoning.stream);
    this.tools = plan.tools === null ? null : new QwenToolCallStream(plan.tools.list);
  }

  /** A tool call was sent (finish "stop" then reads "tool_calls"). */
  get sentToolCalls(): boolean {
    return this.tools !== null && this.tools.callCount > 0;
  }

  push(delta: string): StreamDelta[] {
    const out: StreamDelta[] = [];
    let rest = delta;
    if (this.reasoning !== null) {
      const r = this.reasoning.push(delta);
      if (r.reasoning !== "") out.push({ kind: "reasoning", text: r.reasoning });
      rest = r.content;
    }
    this.afterReasoning(rest, out, false);
    return out;
  }

  finish(): StreamDelta[] {
    const out: StreamDelta[] = [];
    let rest = "";
    if (this.reasoning !== null) {
      const r = this.reasoning.finish();
      if (r.reasoning !== "") out.push({ kind: "reasoning", text: r.reasoning });
      rest = r.content;
    }
    this.afterReasoning(rest, out, true);
    return out;
  }

  private afterReasoning(text: string, out: StreamDelta[], final: boolean): void {
    if (this.tools === null) {
      if (text !== "") out.push({ kind: "content", text });
      return;
    }
    const step = this.tools.push(text);
    if (final) {
      const end = this.tools.finish();
      step.content += end.content;
      step.calls.push(...end.calls);
    }
    if (step.content !== "") out.push({ kind: "content", text: step.content });
    for (const c of step.calls) out.push({ kind: "tool_call", call: this.toolDelta(c) });
  }

  private toolDelta(c: ToolCallDelta): Extract<StreamDelta, { kind: "tool_call" }>["call"] {
    return { index: c.index, id: newToolCallId(), type: "function", function: { name: c.name, arguments: c.arguments } };
  }
}
