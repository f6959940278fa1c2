/**
 * Request size and count limits for `POST /v1/chat/completions`. Every limit is configurable;
 * the defaults are sized for Qwen-VL chat with a few inline images (data: URLs count towards the
 * body cap, so it is generous) while still bounding the work one request can cause.
 */
import { z } from "zod";

const positiveInt = z.number().int().positive();

export const LimitsSchema = z.strictObject({
  /** UTF-8 bytes of the whole request body (413 above). */
  maxBodyBytes: positiveInt.default(20 * 1024 * 1024),
  /** Nesting depth of the JSON body (arrays + objects); checked before JSON.parse. */
  maxJsonDepth: positiveInt.default(64),
  /**
   * JSON values in the body (every object, array, string, number, boolean and null, at any depth,
   * object members counted once each), counted before JSON.parse from the `{`, `[` and `,` outside
   * strings. It bounds what JSON.parse, the walks after it and the isolate's heap (128 MB on
   * Workers) can be made to do by a body that stays under the byte cap: 4 million `{}` are 12 MB.
   * 200 000 is about twice the largest legitimate request the other limits let through: 1 024
   * messages with tool calls are ~10 000 values, 64 media parts ~300, and 128 tools whose schemas
   * fill a whole 262 144-token context (~1 M characters of schema, ≥ 10 characters per value) about
   * 100 000 (a dense enum schema, ~4 characters per value, twice that); logit_bias, stop and
   * stop_token_ids add a few thousand at most. At the limit, the cheapest-to-send shapes (`{}`,
   * numbers, short strings) validate in 15–80 ms with JSON.parse and ~200 ms with the edge's
   * source-keeping parse (parseRecordingLiterals), each within a 64 MiB V8 heap (measured warm on
   * the 2-core dev box); refusing 4 million `{}` costs < 50 ms.
   */
  maxJsonValues: positiveInt.default(200_000),
  /** Number of entries in `messages`. */
  maxMessages: positiveInt.default(1024),
  /** Number of parts in one message's `content` array. */
  maxContentParts: positiveInt.default(256),
  /** UTF-16 code units of text in one message (content text, reasoning, tool-call arguments). */
  maxMessageChars: positiveInt.default(1_000_000),
  /**
   * UTF-16 code units of everything that reaches the chat template or the worker's grammar, over
   * the whole request: message text, reasoning, tool-call arguments, tool names, descriptions and
   * parameter schemas, `chat_template_kwargs`, `response_format` schemas, `regex`, `ebnf`.
   * Structured values count as their compact JSON text.
   */
  maxTotalChars: positiveInt.default(2_000_000),
  /** UTF-16 code units of the rendered prompt (template output), checked before tokenizing. */
  maxPromptChars: positiveInt.default(2_500_000),
  /** Media parts (image, video, audio) over all messages. */
  maxMediaItems: positiveInt.default(64),
  /**
   * Length of an http(s) media URL (data: URLs are bounded by maxBodyBytes only; before parsing,
   * at most maxMediaItems `"url": "data:…"` strings are left out of the maxTotalChars pre-count).
   */
  maxUrlChars: positiveInt.default(8192),
  /** Upper bound for `n`. */
  maxN: positiveInt.default(8),
  /** Upper bound for `max_tokens` / `max_completion_tokens`, and for `min_tokens`. */
  maxMaxTokens: positiveInt.default(262_144),
  /** Number of `stop` strings. */
  maxStopSequences: positiveInt.default(16),
  /** Length of one `stop` string. */
  maxStopChars: positiveInt.default(1024),
  /**
   * Number of `stop_regex` patterns (an SGLang extension). 0, the default, refuses them: SGLang
   * searches the output's tail with each pattern in Python's backtracking `re` on its scheduler
   * thread at every generated token (schedule_batch.py `tail_str`; a pattern it cannot bound scans
   * the whole output), so one pattern such as `(a|aa)*$` can stall a worker for every client.
   * Raise it only where clients are trusted.
   */
  maxStopRegexes: z.number().int().min(0).default(0),
  /** Length of one `stop_regex` pattern. */
  maxStopRegexChars: positiveInt.default(256),
  /**
   * Entries of `logit_bias` (OpenAI documents no count; SGLang adds each to every step's logits).
   * Its ids are also held to the model's vocabulary (sampling-limits.ts).
   */
  maxLogitBias: positiveInt.default(1024),
  /** Ids in `stop_token_ids` (an SGLang extension), each also held to the model's vocabulary. */
  maxStopTokenIds: positiveInt.default(64),
  /**
   * Output constraints the worker compiles (`regex`, `ebnf`, `response_format` json_schema and
   * structural_tag, tool schemas that become one; grammar-bounds.ts): positions after expanding
   * bounded repetitions (`x{m,n}` counts n times, nested counts multiply; a schema's nodes,
   * `maxLength`, `maxItems` × item schema, `pattern`).
   */
  maxGrammarExpansion: positiveInt.default(65_536),
  /** Nesting of groups in a regex or EBNF grammar, or of objects in a schema. */
  maxGrammarDepth: positiveInt.default(32),
  /** `|` alternatives in a regex or EBNF grammar, branches of anyOf / oneOf / allOf in a schema. */
  maxGrammarAlternatives: positiveInt.default(1024),
  /** Number of entries in `tools`. */
  maxTools: positiveInt.default(128),
  /** Length of `model`. */
  maxModelChars: positiveInt.default(256),
});

/** Parsed limits (all defaults filled in). */
export type Limits = z.output<typeof LimitsSchema>;
/** What configuration may specify (every field optional). */

export const DEFAULT_LIMITS: Limits = LimitsSchema.parse({});

/** Parses a (partial) limits config; throws a ZodError on bad config (a deploy-time failure). */
export function parseLimits(input: unknown): Limits {
  return LimitsSchema.parse(input ?? {});
}
