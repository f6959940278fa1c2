/**
 * The request schema of `POST /v1/chat/completions`: the single source of truth for the request
 * type. It follows what SGLang's own OpenAI server accepts (`ChatCompletionRequest`, sgl-project/sglang
 * python/sglang/srt/entrypoints/openai/protocol.py @9d147fd L654-955), with these deliberate differences:
 * - unknown keys are ignored (stripped) at every level, as pydantic does for SGLang;
 * - `null` is accepted wherever a field is optional and means "absent";
 * - roles are case-insensitive (SGLang lower-cases every role but `user`);
 * - media URLs must be http(s) or `data:` (SGLang would also read worker-local files);
 * - `max_tokens`/`max_completion_tokens` must be ≥ 1 (SGLang treats 0 as "no limit");
 * - `input_audio` parts are accepted (OpenAI shape) so that routing can fail closed on them.
 * Fields SGLang honours but this router cannot forward faithfully are refused in validate.ts.
 * Limits (counts, sizes) are runtime configuration and are checked in validate.ts, not here.
 */
import { z } from "zod";

/** Optional field: `null`/absent → `undefined`. */
function opt<T extends z.ZodType>(schema: T) {
  return schema.nullish().transform((v): z.output<T> | undefined => v ?? undefined);
}

/** Optional field with a default: `null`/absent → `fallback`. */
function withDefault<T extends z.ZodType>(schema: T, fallback: z.output<T>) {
  return schema.nullish().transform((v): z.output<T> => v ?? fallback);
}

const int = z.number().int();
const finite = z.number();

/** OpenAI's `service_tier` values (`fast` is answered as priority); the edge maps them onto admission bands (src/admission/bands.ts). */
export const SERVICE_TIERS = ["auto", "default", "flex", "scale", "priority", "fast"] as const;
export type ServiceTier = (typeof SERVICE_TIERS)[number];

/** The media URL schemes accepted (MediaUrlSchema; message-fast-path.ts mirrors it). */
export const MEDIA_URL = /^(?:https?:\/\/[^\s]|data:[^,]*,)/i;

/** A media reference. The scheme is checked here; the SSRF-safe fetch re-checks the host. */
export const MediaUrlSchema = z
  .string()
  .min(1, "must not be empty")
  .refine((s) => MEDIA_URL.test(s), { message: "must be an http(s) URL or a data: URL" });

// ---------------------------------------------------------------------------------------------
// Content parts

export const TextPartSchema = z.object({ type: z.literal("text"), text: z.string() });

/** Reasoning carried in an earlier assistant turn (SGLang extension; exactly one of the two). */
export const ThinkingPartSchema = z
  .object({
    type: z.enum(["thinking", "reasoning"]),
    thinking: opt(z.string()),
    text: opt(z.string()),
  })
  .superRefine((p, ctx) => {
    if ((p.thinking === undefined) === (p.text === undefined)) {
      ctx.addIssue({ code: "custom", message: "thinking parts require exactly one of 'thinking' or 'text'" });
    }
  });

/** An optional client-supplied media id (vLLM style); its presence makes routing fail closed. */
const mediaUuid = opt(z.string());

/** An image part's `detail` values and its defaults of `detail` and `modalities` (message-fast-path.ts reads them from here). */
export const IMAGE_DETAILS = ["auto", "low", "high"] as const;
export const IMAGE_DETAIL_DEFAULT = "auto" satisfies (typeof IMAGE_DETAILS)[number];
export const IMAGE_MODALITY_DEFAULT = "image";

export const ImagePartSchema = z.object({
  type: z.literal("image_url"),
  image_url: z.object({
    url: MediaUrlSchema,
    detail: withDefault(z.enum(IMAGE_DETAILS), IMAGE_DETAIL_DEFAULT),
    max_dynamic_patch: opt(int),
    min_dynamic_patch: opt(int),
  }),
  modalities: withDefault(z.enum(["image", "multi-images", "video"]), IMAGE_MODALITY_DEFAULT),
  uuid: mediaUuid,
});

export const VideoPartSchema = z.object({
  type: z.literal("video_url"),
  video_url: z.object({
    url: MediaUrlSchema,
    max_dynamic_patch: opt(int),
    min_dynamic_patch: opt(int),
  }),
  uuid: mediaUuid,
});

export const AudioUrlPartSchema = z.object({
  type: z.literal("audio_url"),
  audio_url: z.object({ url: MediaUrlSchema }),
  uuid: mediaUuid,
});

/** OpenAI's inline audio part. Accepted so that later stages can fail closed on audio. */
export const InputAudioPartSchema = z.object({
  type: z.literal("input_audio"),
  input_audio: z.object({ data: z.string().min(1), format: z.string().min(1) }),
});

export const ContentPartSchema = z.discriminatedUnion("type", [
  TextPartSchema,
  ThinkingPartSchema,
  ImagePartSchema,
  VideoPartSchema,
  AudioUrlPartSchema,
  InputAudioPartSchema,
]);

export const ContentSchema = z.union([z.string(), z.array(ContentPartSchema)]);

// ---------------------------------------------------------------------------------------------
// Messages

/** True when `s` parses as a JSON object (SGLang parses assistant tool-call arguments so; message-fast-path.ts checks with it too). */
export function isJsonObjectText(s: string): boolean {
  try {
    const v: unknown = JSON.parse(s);
    return typeof v === "object" && v !== null && !Array.isArray(v);
  } catch {
    return false;
  }
}

export const ToolCallSchema = z.object({
  id: opt(z.string()),
  index: opt(int),
  type: withDefault(z.literal("function"), "function"),
  function: z.object({
    name: opt(z.string()),
    arguments: opt(
      z.union([
        z.string().refine(isJsonObjectText, { message: "must be a JSON object encoded as a string" }),
        z.record(z.string(), z.unknown()),
      ]),
    ),
  }),
});

export const UserMessageSchema = z.object({
  role: z.literal("user"),
  content: ContentSchema,
});

export const GENERIC_ROLES = ["system", "developer", "assistant", "tool", "function", "latest_reminder"] as const;

export const GenericMessageSchema = z.object({
  role: z.enum(GENERIC_ROLES),
  content: ContentSchema.nullish().transform((v) => v ?? null),
  tool_call_id: opt(z.string()),
  name: opt(z.string()),
  reasoning_content: opt(z.string()),
  tool_calls: opt(z.array(ToolCallSchema)),
});

/** Lower-cases `role` before the union picks a branch. */
function normalizeRole(v: unknown): unknown {
  if (typeof v === "object" && v !== null && !Array.isArray(v)) {
    const role = (v as { role?: unknown }).role;
    if (typeof role === "string" && role !== role.toLowerCase()) return { ...v, role: role.toLowerCase() };
  }
  return v;
}

export const MessageSchema = z.preprocess(
  normalizeRole,
  z.discriminatedUnion("role", [UserMessageSchema, GenericMessageSchema]).superRefine((m, ctx) => {
    if (m.role === "assistant" || !Array.isArray(m.content)) return;
    m.content.forEach((p, i) => {
      if (p.type === "thinking" || p.type === "reasoning") {
        ctx.addIssue({
          code: "custom",
          path: ["content", i, "type"],
          message: "thinking content parts are only valid in assistant messages",
        });
      }
    });
  }),
);

// ---------------------------------------------------------------------------------------------
// Tools, response format, stream options

export const ToolSchema = z.object({
  type: withDefault(z.literal("function"), "function"),
  function: z.object({
    name: z.string().min(1),
    description: opt(z.string()),
    parameters: opt(z.record(z.string(), z.unknown())),
    strict: withDefault(z.boolean(), false),
  }),
});

export const NamedToolChoiceSchema = z.object({
  type: withDefault(z.literal("function"), "function"),
  function: z.object({ name: z.string().min(1) }),
});

export const ToolChoiceSchema = z.union([z.enum(["none", "auto", "required"]), NamedToolChoiceSchema]);

const JsonObjectSchema = z.record(z.string(), z.unknown());

export const ResponseFormatSchema = z.discriminatedUnion("type", [
  z.object({ type: z.literal("text") }),
  z.object({ type: z.literal("json_object") }),
  z.object({
    type: z.literal("json_schema"),
    json_schema: opt(
      z.object({
        name: opt(z.string()),
        description: opt(z.string()),
        schema: opt(JsonObjectSchema),
        strict: opt(z.boolean()),
      }),
    ),
    /** SGLang also accepts the schema at the top level of response_format. */
    schema: opt(JsonObjectSchema),
  }),
  /** Forwarded whole (JSON-encoded) as SGLang's `structural_tag`; its inner shape is SGLang's business. */
  z.looseObject({ type: z.literal("structural_tag") }),
]);

export const StreamOptionsSchema = z.object({
  include_usage: withDefault(z.boolean(), false),
  continuous_usage_stats: withDefault(z.boolean(), false),
});

export const REASONING_EFFORTS = ["none", "minimal", "low", "medium", "high", "xhigh", "max"] as const;

const StopSchema = z
  .union([z.string(), z.array(z.string())])
  .transform((s) => (typeof s === "string" ? [s] : s))
  .superRefine((list, ctx) => {
    list.forEach((s, i) => {
      // An empty stop string matches at once in SGLang: refuse it instead of returning nothing.
      if (s.length === 0) ctx.addIssue({ code: "custom", path: [i], message: "stop strings must not be empty" });
    });
  });

// ---------------------------------------------------------------------------------------------
// The request

/** The request's fields as given; ChatCompletionRequestSchema adds SGLang's defaults that read several (withSglangDefaults). */
export const ChatCompletionRequestObject = z.object({
  messages: z.array(MessageSchema).min(1, "messages must not be empty"),
  model: z.string().min(1, "model must not be empty"),

  // length and count
  max_tokens: opt(int.min(1)),
  max_completion_tokens: opt(int.min(1)),
  min_tokens: withDefault(int.min(0), 0),
  n: withDefault(int.min(1), 1),

  // sampling (absent → model generation_config default, else SGLang's default; see generate-request.ts)
  temperature: opt(finite.min(0)),
  top_p: opt(finite.gt(0).max(1)),
  top_k: opt(int.refine((k) => k === -1 || k >= 1, { message: "must be -1 (disabled) or at least 1" })),
  min_p: opt(finite.min(0).max(1)),
  presence_penalty: withDefault(finite.min(-2).max(2), 0),
  frequency_penalty: withDefault(finite.min(-2).max(2), 0),
  repetition_penalty: opt(finite.gt(0).max(2)),
  seed: opt(int),
  logit_bias: opt(
    z.record(z.string().regex(/^(?:0|[1-9][0-9]*)$/, "keys must be token ids"), finite.min(-100).max(100)),
  ),

  // stopping
  stop: opt(StopSchema),
  stop_token_ids: opt(z.array(int.min(0))),
  stop_regex: opt(z.union([z.string().min(1), z.array(z.string().min(1))])),
  ignore_eos: withDefault(z.boolean(), false),
  no_stop_trim: withDefault(z.boolean(), false),
  skip_special_tokens: withDefault(z.boolean(), true),

  // constrained decoding
  response_format: opt(ResponseFormatSchema),
  regex: opt(z.string().min(1)),
  ebnf: opt(z.string().min(1)),

  // tools (rendered by the chat template; calls parsed back by src/proxy/tool-calls/)
  tools: opt(z.array(ToolSchema)),
  tool_choice: opt(ToolChoiceSchema),
  parallel_tool_calls: withDefault(z.boolean(), true),

  // logprobs (return_logprob / top_logprobs_num on /generate; src/proxy/logprobs.ts)
  logprobs: withDefault(z.boolean(), false),
  top_logprobs: opt(int.min(0).max(20)),

  // streaming
  stream: withDefault(z.boolean(), false),
  stream_options: opt(StreamOptionsSchema),

  // prompt shaping
  chat_template_kwargs: opt(JsonObjectSchema),
  // SGLang's chat handler passes it to no one (serving_chat.py @002897c _convert_to_internal_request), nor does the
  // edge; a non-empty one still routes on the text prefix (layout/eligibility.ts)
  mm_processor_kwargs: opt(JsonObjectSchema),
  continue_final_message: withDefault(z.boolean(), false),
  reasoning_effort: opt(z.union([z.enum(REASONING_EFFORTS), finite.min(0).max(0.99)])),

  // reasoning output (SGLang extensions; src/proxy/reasoning.ts)
  separate_reasoning: withDefault(z.boolean(), true),
  stream_reasoning: withDefault(z.boolean(), true),

  // admission under overload: the band the request waits in when the pool is full (src/admission/bands.ts)
  service_tier: opt(z.enum(SERVICE_TIERS)),
  // SGLang's request priority (larger first): > 0 asks for the priority band, < 0 for flex; not sent to the worker
  priority: opt(int.min(-1_000_000).max(1_000_000)),
  // session affinity: a conversation's key keeps it on its worker (src/edge/chat/affinity.ts); OpenAI's bounds
  prompt_cache_key: opt(z.string().max(1024)),
  safety_identifier: opt(z.string().max(64)),
  // not sent to the worker; session affinity hashes it (src/edge/chat/affinity.ts); bounded as completions and responses bound it
  user: opt(z.string().max(256)),
});

/** The defaults that depend on other fields, applied to ChatCompletionRequestObject's output. */
export function withSglangDefaults(r: z.output<typeof ChatCompletionRequestObject>) {
  // SGLang: tool_choice defaults to "none" without tools, else "auto".
  const tool_choice = r.tool_choice ?? (r.tools && r.tools.length > 0 ? "auto" : "none");
  // SGLang: reasoning_effort sets thinking / enable_thinking in chat_template_kwargs unless present.
  let chat_template_kwargs = r.chat_template_kwargs;
  if (r.reasoning_effort !== undefined) {
    const thinking = r.reasoning_effort !== "none";
    chat_template_kwargs = { thinking, enable_thinking: thinking, ...(chat_template_kwargs ?? {}) };
  }
  return { ...r, tool_choice, chat_template_kwargs };
}

export const ChatCompletionRequestSchema = ChatCompletionRequestObject.transform(withSglangDefaults);

export type ChatCompletionRequest = z.output<typeof ChatCompletionRequestSchema>;
export type ContentPart = z.output<typeof ContentPartSchema>;
export type ToolDefinition = z.output<typeof ToolSchema>;
export type ToolChoice = z.output<typeof ToolChoiceSchema>;

