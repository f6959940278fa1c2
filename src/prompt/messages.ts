/**
 * SGLang's OpenAI chat preprocessing, mirrored so the router renders the same prompt the worker
 * will (its prefix-cache keys depend on every byte). Upstream: serving_chat.py
 * `_apply_jinja_template` and jinja_template_utils.py `process_content_for_template_format`
 * (sgl-project/sglang @9d147fd python/sglang/srt/entrypoints/openai/serving_chat.py L640-946,
 * python/sglang/srt/parser/jinja_template_utils.py L81-245). Steps, in SGLang's order:
 *   1. pydantic dump: only the known message fields survive; generic roles are lower-cased;
 *   2. assistant tool_call arguments given as a JSON string are parsed (must be an object);
 *   3. `content` None → "";
 *   4. list content is normalised for the template's content format; None-valued keys dropped;
 *   5. tool messages made only of text parts are joined with a space;
 *   6. a final assistant message with string content becomes the continuation prefix
 *      (continue_final_message) or is re-labelled as a user message.
 * Template kwargs: reasoning_effort plus chat_template_kwargs (reasoning_effort also defaults
 * `thinking`/`enable_thinking`), tools only when tool_choice is not "none".
 */
import { InvalidRequestError } from "../api/errors.ts";
import { parseJsonKeepingNumbers, PyNumber, pythonNumberTextFromValue } from "./py-json.ts";
import { isRecord } from "../util/is-record.ts";

export type ContentFormat = "openai" | "string";
export type MediaKind = "image" | "video" | "audio";

/** The request fields prompt rendering reads (a structural subset of the OpenAI request). */
export interface ChatRequestLike {
  messages: readonly unknown[];
  tools?: readonly unknown[] | null;
  tool_choice?: unknown;
  chat_template_kwargs?: Record<string, unknown> | null;
  continue_final_message?: boolean | null;
  reasoning_effort?: string | number | null;
}

/** One media part of the request, in order of appearance across all messages. */
export interface MediaPart {
  kind: MediaKind;
  url: string;
  /** Position among all media parts (images, videos and audio together). */
  index: number;
  /** Position among the parts of the same kind: SGLang's image_data / video_data / audio_data index. */
  kindIndex: number;
  messageIndex: number;
  partIndex: number;
  /** The part's media object (`image_url` / `video_url` / `audio_url` value), for per-item options. */
  options: Readonly<Record<string, unknown>>;
}

/** A content part SGLang silently drops (unknown type); reported so the edge can decide. */
export interface DroppedPart {
  messageIndex: number;
  partIndex: number;
  type: string | null;
}

export type TemplateMessage = Record<string, unknown> & { role: string; content: unknown };

export interface PreprocessedChat {
  messages: TemplateMessage[];
  /** Tools as SGLang's `Tool.model_dump()`, or null when the template gets `tools=None`. */
  tools: Record<string, unknown>[] | null;
  /** Extra variables for the template (reasoning_effort, chat_template_kwargs). */
  templateKwargs: Record<string, unknown>;
  /** continue_final_message: text appended verbatim after the rendered prompt. */
  assistantPrefix: string | null;
  mediaParts: MediaPart[];
  droppedParts: DroppedPart[];
  hasAudio: boolean;
}

const GENERIC_ROLES = new Set(["system", "assistant", "tool", "function", "developer", "latest_reminder"]);

/**
 * OpenAI roles the Qwen-VL templates have no branch for, as the role they mean: `developer` is
 * OpenAI's name for system instructions (newer SDKs send it), `function` the deprecated form of a
 * tool result. SGLang passes them on unchanged and the Qwen3-VL templates print nothing for them,
 * so the instructions were silently lost (deliberate difference; the edge renders the prompt the
 * worker receives, so routing stays exact).
 */
const TEMPLATE_ROLE: Readonly<Record<string, string>> = { developer: "system", function: "tool" };

/**
 * Template kwargs that would collide with apply_chat_template's own arguments. The first four make
 * SGLang's call raise TypeError (→ 400); the rest would silently change transformers' behaviour,
 * which kvedge does not model, so they are refused too (fail closed).
 */
const RESERVED_TEMPLATE_KWARGS = new Set([
  "messages",
  "tools",
  "add_generation_prompt",
  "tokenize",
  "return_dict",
  "conversation",
  "documents",
  "chat_template",
  "continue_final_message",
  "return_assistant_tokens_mask",
  "tokenizer_kwargs",
  "padding",
  "truncation",
  "max_length",
  "return_tensors",
]);

function optionalString(msg: Record<string, unknown>, key: string, param: string): string | undefined {
  const v = msg[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "string") throw new InvalidRequestError(`${param}.${key} must be a string.`, `${param}.${key}`);
  return v;
}

/** Deep copy of a JSON value whose numbers become PyNumbers (value policy unless already one). */
function withPyNumbers(x: unknown): unknown {
  if (x instanceof PyNumber) return x;
  if (typeof x === "number") return new PyNumber(x, pythonNumberTextFromValue(x));
  if (Array.isArray(x)) return x.map(withPyNumbers);
  if (isRecord(x)) {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(x)) out[k] = withPyNumbers(v);
    return out;
  }
  return x;
}

/** SGLang `parse_tool_call_arguments`: orjson.loads, and the result must be a JSON object. */
function parseToolCallArguments(text: string, param: string): Record<string, unknown> {
  let parsed: unknown;
  try {
    parsed = parseJsonKeepingNumbers(text);
  } catch {
    throw new InvalidRequestError("Assistant tool call function.arguments must be valid JSON.", param);
  }
  if (!isRecord(parsed)) throw new InvalidRequestError("Assistant tool call function.arguments must be a JSON object.", param);
  return parsed;
}

/** `ToolCall.model_dump()` with arguments normalised as SGLang does before templating. */
function dumpToolCall(call: unknown, param: string, isAssistant: boolean): Record<string, unknown> {
  if (!isRecord(call)) throw new InvalidRequestError(`${param} must be an object.`, param);
  const fn = call["function"];
  if (!isRecord(fn)) throw new InvalidRequestError(`${param}.function must be an object.`, `${param}.function`);
  let args: unknown = fn["arguments"] ?? null;
  if (typeof args === "string") {
    if (isAssistant) args = parseToolCallArguments(args, `${param}.function.arguments`);
  } else if (args !== null) {
    if (!isRecord(args)) throw new InvalidRequestError(`${param}.function.arguments must be a string or an object.`, `${param}.function.arguments`);
    args = withPyNumbers(args);
  }
  return {
    id: call["id"] ?? null,
    index: call["index"] ?? null,
    type: "function",
    function: { name: fn["name"] ?? null, arguments: args },
  };
}

/** `Tool.model_dump()` (SGLang protocol.py): key order, `strict` default and `defer_loading` included. */
export function dumpTool(tool: unknown, param: string): Record<string, unknown> {
  if (!isRecord(tool)) throw new InvalidRequestError(`${param} must be an object.`, param);
  const fn = tool["function"];
  if (!isRecord(fn)) throw new InvalidRequestError(`${param}.function must be an object.`, `${param}.function`);
  if (typeof fn["name"] !== "string") throw new InvalidRequestError(`${param}.function.name must be a string.`, `${param}.function.name`);
  const toolDefer = tool["defer_loading"] ?? null;
  const fnDefer = fn["defer_loading"] ?? toolDefer;
  const fnDump: Record<string, unknown> = {
    description: fn["description"] ?? null,
    name: fn["name"],
    parameters: withPyNumbers(fn["parameters"] ?? null),
    strict: fn["strict"] ?? false,
  };
  // Function's serializer omits defer_loading when unset; Tool's keeps it (as null).
  if (fnDefer !== null) fnDump["defer_loading"] = fnDefer;
  return { type: tool["type"] ?? "function", function: fnDump, defer_loading: toolDefer };
}

interface MediaSink {
  parts: MediaPart[];
  dropped: DroppedPart[];
  counts: Record<MediaKind, number>;
}

function mediaUrl(obj: unknown, kind: MediaKind, param: string): { url: string; options: Record<string, unknown> } {
  if (typeof obj === "string" && kind === "image") return { url: obj, options: { url: obj } };
  if (!isRecord(obj) || typeof obj["url"] !== "string") throw new InvalidRequestError(`${param}.url must be a string.`, `${param}.url`);
  return { url: obj["url"], options: obj };
}

function pushMedia(sink: MediaSink, kind: MediaKind, url: string, options: Record<string, unknown>, m: number, p: number): void {
  sink.parts.push({ kind, url, index: sink.parts.length, kindIndex: sink.counts[kind]++, messageIndex: m, partIndex: p, options });
}

/** `process_content_for_template_format` for one list-valued content. */
function normaliseParts(parts: readonly unknown[], format: ContentFormat, sink: MediaSink, m: number): unknown {
  const out: Record<string, unknown>[] = [];
  const texts: string[] = [];
  parts.forEach((part, p) => {
    if (!isRecord(part)) return; // SGLang skips non-dict chunks
    const type = part["type"];
    const param = `messages[${m}].content[${p}]`;
    if (type === "text" || type === "input_text") {
      const text = part["text"];
      if (typeof text !== "string") throw new InvalidRequestError(`${param}.text must be a string.`, `${param}.text`);
      if (format === "openai") out.push({ type: "text", text });
      else texts.push(text);
      return;
    }
    if (format === "string") return; // string format keeps text only and collects no media
    if (type === "image_url" || type === "input_image") {
      const { url, options } = mediaUrl(part["image_url"], "image", `${param}.image_url`);
      pushMedia(sink, "image", url, options, m, p);
      out.push({ type: "image" });
    } else if (type === "video_url") {
      const { url, options } = mediaUrl(part["video_url"], "video", `${param}.video_url`);
      pushMedia(sink, "video", url, options, m, p);
      out.push({ type: "video" });
    } else if (type === "audio_url") {
      const { url, options } = mediaUrl(part["audio_url"], "audio", `${param}.audio_url`);
      pushMedia(sink, "audio", url, options, m, p);
      out.push({ type: "audio" });
    } else {
      sink.dropped.push({ messageIndex: m, partIndex: p, type: typeof type === "string" ? type : null });
    }
  });
  return format === "openai" ? out : texts.join(" ");
}

/** `normalize_tool_content`: a tool message whose parts are all text becomes one string. */
function flattenToolContent(content: unknown): unknown {
  if (!Array.isArray(content)) return content;
  const allText = content.every((p) => typeof p === "string" || (isRecord(p) && p["type"] === "text"));
  if (!allText) return content;
  return content.map((p) => (typeof p === "string" ? p : typeof p["text"] === "string" ? p["text"] : "")).join(" ");
}

/** Steps 1–5 for one message. */
function processMessage(raw: unknown, m: number, format: ContentFormat, sink: MediaSink): TemplateMessage {
  const param = `messages[${m}]`;
  if (!isRecord(raw)) throw new InvalidRequestError(`${param} must be an object.`, param);
  const rawRole = raw["role"];
  if (typeof rawRole !== "string") throw new InvalidRequestError(`${param}.role must be a string.`, `${param}.role`);
  const isUser = rawRole === "user";
  const given = isUser ? "user" : rawRole.toLowerCase();
  if (!isUser && !GENERIC_ROLES.has(given)) {
    throw new InvalidRequestError(`${param}.role must be one of user, ${[...GENERIC_ROLES].join(", ")}.`, `${param}.role`);
  }
  const role = TEMPLATE_ROLE[given] ?? given;
  let content: unknown = raw["content"] ?? null;
  if (content !== null && typeof content !== "string" && !Array.isArray(content)) {
    throw new InvalidRequestError(`${param}.content must be a string or an array of content parts.`, `${param}.content`);
  }
  if (isUser && content === null) throw new InvalidRequestError(`${param}.content is required for user messages.`, `${param}.content`);
  if (content === null) content = "";
  if (Array.isArray(content)) content = normaliseParts(content, format, sink, m);

  const msg: TemplateMessage = { role, content };
  if (!isUser) {
    // ChatCompletionMessageGenericParam fields; None-valued ones are dropped.
    const toolCallId = optionalString(raw, "tool_call_id", param);
    if (toolCallId !== undefined) msg["tool_call_id"] = toolCallId;
    const name = optionalString(raw, "name", param);
    if (name !== undefined) msg["name"] = name;
    const reasoning = optionalString(raw, "reasoning_content", param);
    if (reasoning !== undefined) msg["reasoning_content"] = reasoning;
    const calls = raw["tool_calls"];
    if (calls !== undefined && calls !== null) {
      if (!Array.isArray(calls)) throw new InvalidRequestError(`${param}.tool_calls must be an array.`, `${param}.tool_calls`);
      msg["tool_calls"] = calls.map((c, j) => dumpToolCall(c, `${param}.tool_calls[${j}]`, role === "assistant"));
    }
    const tools = raw["tools"];
    if (tools !== undefined && tools !== null) {
      if (!Array.isArray(tools)) throw new InvalidRequestError(`${param}.tools must be an array.`, `${param}.tools`);
      msg["tools"] = tools.map((t, j) => dumpTool(t, `${param}.tools[${j}]`));
    }
  }
  if (role === "tool") msg.content = flattenToolContent(msg.content);
  return msg;
}

function hasMessageLevelTools(messages: readonly unknown[]): boolean {
  return messages.some(
    (m) => isRecord(m) && typeof m["role"] === "string" && ["system", "developer"].includes(m["role"].toLowerCase()) && Array.isArray(m["tools"]) && m["tools"].length > 0,
  );
}

/** Tools the template sees: all, the named one, or none (`tool_choice: "none"` or no tools). */
function selectTools(request: ChatRequestLike): Record<string, unknown>[] | null {
  const tools = request.tools;
  if (tools !== undefined && tools !== null && !Array.isArray(tools)) throw new InvalidRequestError("tools must be an array.", "tools");
  const choice = request.tool_choice ?? (tools == null && !hasMessageLevelTools(request.messages) ? "none" : "auto");
  if (!tools || tools.length === 0 || choice === "none") return null;
  const dumped = tools.map((t, i) => dumpTool(t, `tools[${i}]`));
  if (typeof choice === "string") return dumped;
  if (!isRecord(choice) || !isRecord(choice["function"])) throw new InvalidRequestError("tool_choice must be a string or a function choice.", "tool_choice");
  const wanted = choice["function"]["name"] ?? null;
  return dumped.filter((t) => (t["function"] as Record<string, unknown>)["name"] === wanted);
}

/** reasoning_effort and chat_template_kwargs as SGLang passes them to apply_chat_template. */
function templateKwargs(request: ChatRequestLike): Record<string, unknown> {
  const given = request.chat_template_kwargs ?? {};
  if (!isRecord(given)) throw new InvalidRequestError("chat_template_kwargs must be an object.", "chat_template_kwargs");
  const kwargs: Record<string, unknown> = { ...given };
  const effort = request.reasoning_effort ?? null;
  const out: Record<string, unknown> = {};
  if (effort !== null) {
    // protocol.py normalize_reasoning_inputs: setdefault, so explicit kwargs win.
    const thinking = effort !== "none";
    if (!("thinking" in kwargs)) kwargs["thinking"] = thinking;
    if (!("enable_thinking" in kwargs)) kwargs["enable_thinking"] = thinking;
    out["reasoning_effort"] = effort;
  }
  for (const [k, v] of Object.entries(kwargs)) {
    if (RESERVED_TEMPLATE_KWARGS.has(k)) {
      throw new InvalidRequestError(`chat_template_kwargs.${k} is not allowed: it is an argument of the template call itself.`, `chat_template_kwargs.${k}`);
    }
    out[k] = v;
  }
  return out;
}

/** The whole preprocessing for one request, given the template's content format. */
export function preprocessChat(request: ChatRequestLike, format: ContentFormat): PreprocessedChat {
  if (!Array.isArray(request.messages) || request.messages.length === 0) {
    throw new InvalidRequestError("messages must be a non-empty array.", "messages");
  }
  const sink: MediaSink = { parts: [], dropped: [], counts: { image: 0, video: 0, audio: 0 } };
  let messages = request.messages.map((raw, m) => processMessage(raw, m, format, sink));

  // _handle_last_assistant_message
  let assistantPrefix: string | null = null;
  const last = messages[messages.length - 1];
  if (last && last.role === "assistant" && typeof last.content === "string") {
    if (request.continue_final_message) {
      assistantPrefix = last.content;
      messages = messages.slice(0, -1);
    } else {
      messages[messages.length - 1] = { role: "user", content: last.content };
    }
  }
  if (messages.length === 0) {
    // Only possible with continue_final_message on a lone assistant message; the templates index
    // messages[0], which Jinja2 would render as undefined but @huggingface/jinja rejects.
    throw new InvalidRequestError("continue_final_message needs at least one message before the final assistant message.", "messages");
  }

  return {
    messages,
    tools: selectTools(request),
    templateKwargs: templateKwargs(request),
    assistantPrefix,
    mediaParts: sink.parts,
    droppedParts: sink.dropped,
    hasAudio: sink.counts.audio > 0,
  };
}
