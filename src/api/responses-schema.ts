/**
 * The request schema of `POST /v1/responses` (OpenAI Responses API) and its translation into the chat
 * request the edge already routes: the same messages render the same prompt, so a Responses turn and
 * the equivalent chat request route and cache identically. Shapes follow the official SDK types
 * (openai-node 6.30.1 `resources/responses/responses.ts`: ResponseCreateParamsBase, ResponseInputItem,
 * FunctionTool, ToolChoiceFunction, ResponseFormatTextJSONSchemaConfig). Fields the router cannot
 * honour are refused with a 400 naming them, never silently dropped.
 */
import { z } from "zod";
import { InvalidRequestError } from "./errors.ts";
import { REASONING_EFFORTS } from "./openai-schema.ts";

function opt<T extends z.ZodType>(schema: T) {
  return schema.nullish().transform((v): z.output<T> | undefined => v ?? undefined);
}

const JsonObject = z.record(z.string(), z.unknown());

const InputText = z.object({ type: z.literal("input_text"), text: z.string() });
/** Assistant turns replayed by the client carry their text as output_text (or a refusal). */
const OutputText = z.object({ type: z.literal("output_text"), text: z.string() });
const Refusal = z.object({ type: z.literal("refusal"), refusal: z.string() });
const InputImage = z.object({
  type: z.literal("input_image"),
  image_url: opt(z.string().min(1)),
  file_id: opt(z.string()),
  detail: opt(z.enum(["auto", "low", "high", "original"])),
});
/** kvedge extension (the Responses API has no video part): a video by URL, as chat's video_url. */
const InputVideo = z.object({ type: z.literal("input_video"), video_url: z.string().min(1) });
const InputFile = z.looseObject({ type: z.literal("input_file") });
const InputAudio = z.looseObject({ type: z.literal("input_audio") });

const ContentPart = z.discriminatedUnion("type", [InputText, OutputText, Refusal, InputImage, InputVideo, InputFile, InputAudio]);
type ContentPartIn = z.output<typeof ContentPart>;

const MessageItem = z.object({
  type: opt(z.literal("message")),
  id: opt(z.string()),
  role: z.enum(["user", "assistant", "system", "developer"]),
  content: z.union([z.string(), z.array(ContentPart)]),
  status: opt(z.string()),
});

const FunctionCallItem = z.object({
  type: z.literal("function_call"),
  id: opt(z.string()),
  call_id: z.string().min(1),
  name: z.string().min(1),
  arguments: z.string(),
  status: opt(z.string()),
});

const FunctionCallOutputItem = z.object({
  type: z.literal("function_call_output"),
  id: opt(z.string()),
  call_id: z.string().min(1),
  output: z.union([z.string(), z.array(ContentPart)]),
  status: opt(z.string()),
});

const ReasoningItem = z.object({
  type: z.literal("reasoning"),
  id: opt(z.string()),
  summary: z.array(z.object({ type: z.literal("summary_text"), text: z.string() })).default([]),
  content: opt(z.array(z.object({ type: z.literal("reasoning_text"), text: z.string() }))),
  encrypted_content: opt(z.string()),
  status: opt(z.string()),
});

/** Any item type outside these four (item_reference, built-in tool calls…): refused by name. */
const OtherItem = z.looseObject({ type: z.string() });

export const InputItemSchema = z.union([MessageItem, FunctionCallItem, FunctionCallOutputItem, ReasoningItem, OtherItem]);
export type InputItem = z.output<typeof InputItemSchema>;

export const FunctionToolSchema = z.object({
  type: z.literal("function"),
  name: z.string().min(1),
  description: opt(z.string()),
  parameters: opt(JsonObject),
  strict: opt(z.boolean()),
});

const ToolChoice = z.union([
  z.enum(["none", "auto", "required"]),
  z.object({ type: z.literal("function"), name: z.string().min(1) }),
]);

const TextFormat = z.discriminatedUnion("type", [
  z.object({ type: z.literal("text") }),
  z.object({ type: z.literal("json_object") }),
  z.object({
    type: z.literal("json_schema"),
    name: z.string().min(1).max(64),
    schema: JsonObject,
    strict: opt(z.boolean()),
    description: opt(z.string()),
  }),
]);

export const ResponseCreateSchema = z.object({
  model: z.string().min(1, "model must not be empty"),
  input: z.union([z.string(), z.array(InputItemSchema)]),
  instructions: opt(z.string()),
  previous_response_id: opt(z.string().min(1)),
  store: z.boolean().nullish().transform((v) => v ?? true),
  stream: z.boolean().nullish().transform((v) => v ?? false),
  tools: opt(z.array(z.looseObject({ type: z.string() }))),
  tool_choice: opt(z.union([ToolChoice, z.looseObject({ type: z.string() })])),
  parallel_tool_calls: opt(z.boolean()),
  reasoning: opt(z.object({ effort: opt(z.enum(REASONING_EFFORTS)), summary: opt(z.enum(["auto", "concise", "detailed"])), generate_summary: opt(z.string()) })),
  text: opt(z.object({ format: opt(TextFormat), verbosity: opt(z.enum(["low", "medium", "high"])) })),
  max_output_tokens: opt(z.number().int().min(1)),
  temperature: opt(z.number().min(0).max(2)),
  top_p: opt(z.number().gt(0).max(1)),
  /** A routing hint at OpenAI; here routing follows the prompt itself, so it is echoed and unused. */
  prompt_cache_key: opt(z.string().max(1024)),
  safety_identifier: opt(z.string().max(64)),
  user: opt(z.string().max(256)),
  metadata: opt(z.record(z.string().max(64), z.string().max(512)).refine((m) => Object.keys(m).length <= 16, "at most 16 metadata pairs")),
  truncation: opt(z.enum(["auto", "disabled"])),
  include: opt(z.array(z.string())),
  service_tier: opt(z.string()),
  background: opt(z.boolean()),
  top_logprobs: opt(z.number().int().min(0).max(20)),
  conversation: opt(z.unknown()),
  prompt: opt(z.unknown()),
  max_tool_calls: opt(z.number().int()),
});
export type ResponseCreateRequest = z.output<typeof ResponseCreateSchema>;

/** Fields and values the router does not implement: a 400 naming the field. */
export function refuseUnsupported(req: ResponseCreateRequest): void {
  const refuse = (param: string, why: string): never => {
    throw new InvalidRequestError(`'${param}' is not supported here: ${why}.`, param, "unsupported_parameter");
  };
  if (req.background) refuse("background", "responses run in the foreground only");
  if (req.conversation !== undefined) refuse("conversation", "use previous_response_id");
  if (req.prompt !== undefined) refuse("prompt", "stored prompt templates do not exist here");
  if (req.truncation === "auto") refuse("truncation", "an input longer than the context is refused (truncation: disabled)");
  if (req.include && req.include.length > 0) refuse("include", "no includable output is produced");
  if (req.top_logprobs) refuse("top_logprobs", "logprobs are served by /v1/chat/completions");
  if (req.max_tool_calls !== undefined) refuse("max_tool_calls", "built-in tools do not exist here");
  if (req.service_tier !== undefined && req.service_tier !== "auto" && req.service_tier !== "default") refuse("service_tier", "only 'auto' and 'default' are served");
  req.tools?.forEach((t, i) => {
    if (t.type !== "function") refuse(`tools[${i}].type`, `only function tools are served, not '${t.type.slice(0, 64)}'`);
  });
  const choice = req.tool_choice;
  if (choice && typeof choice === "object" && choice.type !== "function") refuse("tool_choice", `'${choice.type.slice(0, 64)}' is not served (none, auto, required or a function)`);
}

/** The chat message shapes the translation produces (validated again by the chat schema). */
type ChatPart = { type: "text"; text: string } | { type: "image_url"; image_url: { url: string; detail?: string } } | { type: "video_url"; video_url: { url: string } };
export type ChatMessage =
  | { role: "system" | "user"; content: string | ChatPart[] }
  | { role: "assistant"; content: string | null; reasoning_content?: string; tool_calls?: { id: string; type: "function"; function: { name: string; arguments: string } }[] }
  | { role: "tool"; tool_call_id: string; content: string };

function chatParts(parts: readonly ContentPartIn[], param: string): ChatPart[] {
  return parts.map((p, i): ChatPart => {
    const at = `${param}[${i}]`;
    switch (p.type) {
      case "input_text":
      case "output_text":
        return { type: "text", text: p.text };
      case "refusal":
        return { type: "text", text: p.refusal };
      case "input_image":
        if (!p.image_url) throw new InvalidRequestError("Images are accepted by URL or data URL (image_url); file ids are not served.", `${at}.image_url`, "unsupported_parameter");
        return { type: "image_url", image_url: { url: p.image_url, ...(p.detail && p.detail !== "original" ? { detail: p.detail } : {}) } };
      case "input_video":
        return { type: "video_url", video_url: { url: p.video_url } };
      default:
        throw new InvalidRequestError(`Content part type '${p.type}' is not served (input_text, input_image, input_video).`, `${at}.type`, "unsupported_parameter");
    }
  });
}

/** Text only (system and assistant turns): the parts' texts joined, media refused. */
function textOf(content: string | readonly ContentPartIn[], param: string): string {
  if (typeof content === "string") return content;
  return chatParts(content, param)
    .map((p, i) => {
      if (p.type !== "text") throw new InvalidRequestError("Only text is accepted in this role's content.", `${param}[${i}]`);
      return p.text;
    })
    .join("");
}

/** One input item read with its own schema (the union lets a malformed item through as "other"). */
function itemAs<T extends z.ZodType>(schema: T, item: unknown, at: string): z.output<T> {
  const r = schema.safeParse(item);
  if (r.success) return r.data;
  const issue = r.error.issues[0]!;
  const path = issue.path.map((k) => (typeof k === "number" ? `[${k}]` : `.${String(k)}`)).join("");
  throw new InvalidRequestError(`Invalid ${at}${path}: ${issue.message}`, `${at}${path}`);
}

/**
 * Input items → chat messages. Consecutive assistant-side items (reasoning, an assistant message,
 * function calls) form one assistant turn, as the chat API writes one: that is how the model produced
 * them and how the chat template renders them, so a replayed turn renders to the tokens it cached.
 */
export function inputToMessages(input: string | readonly InputItem[], param = "input"): ChatMessage[] {
  if (typeof input === "string") return [{ role: "user", content: input }];
  const out: ChatMessage[] = [];
  let turn: Extract<ChatMessage, { role: "assistant" }> | null = null;
  const assistantTurn = () => {
    if (!turn) {
      turn = { role: "assistant", content: null };
      out.push(turn);
    }
    return turn;
  };
  input.forEach((raw, i) => {
    const at = `${param}[${i}]`;
    const item = raw as InputItem & { type?: string };
    const type = item.type ?? "message";
    if (type === "message") {
      const m = itemAs(MessageItem, item, at);
      if (m.role === "assistant") {
        const t = assistantTurn();
        const text = textOf(m.content, `${at}.content`);
        t.content = (t.content ?? "") + text;
        return;
      }
      turn = null;
      if (m.role === "user") out.push({ role: "user", content: typeof m.content === "string" ? m.content : chatParts(m.content, `${at}.content`) });
      else out.push({ role: "system", content: textOf(m.content, `${at}.content`) });
      return;
    }
    if (type === "function_call") {
      const c = itemAs(FunctionCallItem, item, at);
      const t = assistantTurn();
      (t.tool_calls ??= []).push({ id: c.call_id, type: "function", function: { name: c.name, arguments: c.arguments } });
      return;
    }
    if (type === "reasoning") {
      const r = itemAs(ReasoningItem, item, at);
      const text = (r.content ?? []).map((c) => c.text).join("") || r.summary.map((s) => s.text).join("\n");
      const t = assistantTurn();
      if (text) t.reasoning_content = (t.reasoning_content ?? "") + text;
      return;
    }
    if (type === "function_call_output") {
      const o = itemAs(FunctionCallOutputItem, item, at);
      turn = null;
      out.push({ role: "tool", tool_call_id: o.call_id, content: textOf(o.output, `${at}.output`) });
      return;
    }
    throw new InvalidRequestError(`Input item type '${type.slice(0, 64)}' is not served (message, function_call, function_call_output, reasoning).`, `${at}.type`, "unsupported_parameter");
  });
  return out;
}

/** The chat request body (JSON) for this Responses request: `history` precedes the new input. */
export function toChatRequest(req: ResponseCreateRequest, history: readonly ChatMessage[], input: readonly ChatMessage[]): Record<string, unknown> {
  const messages: ChatMessage[] = [...(req.instructions ? [{ role: "system" as const, content: req.instructions }] : []), ...history, ...input];
  const body: Record<string, unknown> = { model: req.model, messages, stream: req.stream };
  if (req.stream) body.stream_options = { include_usage: true };
  if (req.max_output_tokens !== undefined) body.max_completion_tokens = req.max_output_tokens;
  if (req.temperature !== undefined) body.temperature = req.temperature;
  if (req.top_p !== undefined) body.top_p = req.top_p;
  if (req.parallel_tool_calls !== undefined) body.parallel_tool_calls = req.parallel_tool_calls;
  if (req.reasoning?.effort) body.reasoning_effort = req.reasoning.effort;
  // The conversation's keys steer session affinity on the chat path (src/edge/chat/affinity.ts).
  if (req.prompt_cache_key !== undefined) body.prompt_cache_key = req.prompt_cache_key;
  if (req.safety_identifier !== undefined) body.safety_identifier = req.safety_identifier;
  if (req.user !== undefined) body.user = req.user;
  const tools = (req.tools ?? []).map((t, i) => itemAs(FunctionToolSchema, t, `tools[${i}]`));
  if (tools.length > 0)
    body.tools = tools.map((t) => ({
      type: "function",
      function: { name: t.name, ...(t.description !== undefined ? { description: t.description } : {}), ...(t.parameters ? { parameters: t.parameters } : {}), ...(t.strict !== undefined ? { strict: t.strict } : {}) },
    }));
  const choice = req.tool_choice;
  if (typeof choice === "string") body.tool_choice = choice;
  else if (choice && choice.type === "function") body.tool_choice = { type: "function", function: { name: (choice as { name: string }).name } };
  const format = req.text?.format;
  if (format?.type === "json_object") body.response_format = { type: "json_object" };
  else if (format?.type === "json_schema")
    body.response_format = {
      type: "json_schema",
      json_schema: { name: format.name, schema: format.schema, ...(format.strict !== undefined ? { strict: format.strict } : {}), ...(format.description !== undefined ? { description: format.description } : {}) },
    };
  return body;
}
