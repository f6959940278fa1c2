/**
 * Configuration of one simulated SGLang worker. The zod schema is the source of truth; every field
 * has a default so `startSimulatedWorker({})` gives a fast, test-friendly worker on ephemeral ports.
 */
import { z } from "zod";
import { TimingPresetNameSchema, TimingSchema } from "./timing.ts";

export const ModelFamilySchema = z.enum(["qwen2_vl", "qwen2_5_vl", "qwen3_vl"]);
export type ModelFamily = z.infer<typeof ModelFamilySchema>;

export const TemplateIdSchema = z.enum(["qwen2vl", "qwen3vl-instruct", "qwen3vl-thinking"]);
export type TemplateId = z.infer<typeof TemplateIdSchema>;

const port = z.number().int().min(0).max(65535);

export const SimOptionsSchema = z.strictObject({
  /** Interface the HTTP server and both ZMQ sockets bind to. */
  host: z.string().min(1).default("127.0.0.1"),
  /** HTTP port; 0 = ephemeral (the bound port is reported by `url`). */
  port: port.default(0),
  /** KV-event PUB port; 0 = ephemeral. */
  kvPort: port.default(0),
  /** Replay ROUTER port; 0 = ephemeral. */
  replayPort: port.default(0),
  /** Publish KV events at all (false: /server_info reports `kv_events: null`, like SGLang without the config). */
  kvEvents: z.boolean().default(true),
  /** ZMQ topic frame (SGLang's default is the empty string). */
  topic: z.string().default(""),
  /** How many recent batches the replay socket can serve (SGLang `buffer_steps`). */
  bufferSteps: z.number().int().min(1).default(10_000),
  /** PUB send high-water mark (SGLang `hwm`). */
  hwm: z.number().int().min(0).default(100_000),
  /** Attention data-parallel rank written into every batch (the third payload element). */
  dpRank: z.number().int().min(0).default(0),

  /** Radix-cache page size = KV block size (`/server_info.page_size`, `kv_events.block_size`). */
  pageSize: z.number().int().min(1).max(4096).default(16),
  /** KV pool size in tokens (`max_total_num_tokens`): tree + in-flight requests must fit. */
  capacityTokens: z.number().int().min(1).default(200_000),
  /** Model context length; prompts of this many tokens or more are refused like SGLang does. */
  contextLength: z.number().int().min(2).default(262_144),

  modelName: z.string().min(1).default("Qwen/Qwen3-VL-8B-Instruct"),
  /** `served_model_name`; defaults to the model path, as SGLang does. */
  servedModelName: z.string().min(1).optional(),
  family: ModelFamilySchema.default("qwen3_vl"),
  template: TemplateIdSchema.default("qwen3vl-instruct"),
  version: z.string().default("0.5.0-sim"),

  /**
   * `--enable-cache-report`: only the OpenAI `usage.prompt_tokens_details.cached_tokens` depends on
   * it; `meta_info.cached_tokens` on /generate is always present (as in SGLang).
   */
  enableCacheReport: z.boolean().default(true),
  /**
   * SGLang raises a Python TypeError for an unknown sampling key, which its /generate handler does
   * not catch (a bare 500, a stream cut without [DONE]). 400 (default) answers like a ValueError
   * instead: `{"error":{"message"}}`, or an inline error frame + [DONE] in a stream.
   */
  unknownSamplingKeyStatus: z.union([z.literal(400), z.literal(500)]).default(400),

  /** Prefill/decode cost model: a preset name, optionally refined field by field. */
  timingPreset: TimingPresetNameSchema.default("fast"),
  timing: TimingSchema.partial().default({}),

  /** Natural answer length (tokens before the model's EOS) is drawn per request from this range. */
  naturalOutputTokens: z
    .object({ min: z.number().int().min(1), max: z.number().int().min(1) })
    .refine((r) => r.min <= r.max, "naturalOutputTokens.min must be <= max")
    .default({ min: 16, max: 200 }),
  /** Seed the pseudo-random output by the prompt tokens (same prompt → same answer) or by the rid. */
  outputSeed: z.enum(["prompt", "rid"]).default("prompt"),
  /** Log one line per request to stderr. */
  verbose: z.boolean().default(false),
});

export type SimOptionsInput = z.input<typeof SimOptionsSchema>;
export type SimOptions = z.output<typeof SimOptionsSchema>;

export function parseSimOptions(input: unknown): SimOptions {
  return SimOptionsSchema.parse(input ?? {});
}
