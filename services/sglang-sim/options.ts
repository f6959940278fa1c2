/**
 * Configuration of one simulated SGLang worker. The zod schema is the source of truth; every field
 * has a default so `startSimulatedWorker({})` gives a fast, test-friendly worker on ephemeral ports.
 */
import { z } from "zod";
import { parseVersion, versionAtLeast } from "../../src/layout/index.ts";
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
  /**
   * `--dp-size`: data-parallel ranks, each with its own radix cache, KV pool (`capacityTokens` each)
   * and KV event publisher on kvPort + rank / replayPort + rank (dp-engines.ts). With more than one,
   * `dpRank` is unused: each rank reports its own.
   */
  dpSize: z.number().int().min(1).max(16).default(1),
  /** `--enable-dp-attention` (reported in /server_info; the simulator's ranks behave the same either way). */
  enableDpAttention: z.boolean().default(false),

  /**
   * `--disaggregation-mode`: "prefill" or "decode" side of a PD pool (disaggregation.ts), "null" a
   * unified worker (SGLang server_args.py L2434 @9d147fd).
   */
  disaggregationMode: z.enum(["null", "prefill", "decode"]).default("null"),
  /** A prefill's bootstrap port (SGLang's default 8998, L2445); 0 = ephemeral. */
  disaggregationBootstrapPort: port.default(0),
  /** How long a decode waits for its prefill peer's KV (SGLANG_DISAGGREGATION_WAITING_TIMEOUT, 300 s: environ.py L359-362). */
  disaggregationWaitingTimeoutMs: z.number().int().min(1).max(3_600_000).default(300_000),

  /**
   * Encoder disaggregation (EPD, encoder.ts; SGLang server_args.py L2481-2510 @9d147fd):
   * `--encoder-only` runs only the vision encoder (POST /encode; no KV events, no /generate routing).
   */
  encoderOnly: z.boolean().default(false),
  /** `--enable-prefix-mm-cache` on an encoder: embeddings cached by the item's own hash (hits counted at /sim/encoder). */
  enablePrefixMmCache: z.boolean().default(false),
  /** `--language-only`: media go to `encoderUrls` for their embeddings. */
  languageOnly: z.boolean().default(false),
  /** `--encoder-urls`: the encoders a language-only server posts media to. */
  encoderUrls: z.array(z.url()).max(64).default([]),
  /** `--encoder-transfer-backend`: only `zmq_to_tokenizer` applies caller mm_hashes to encoder-made items. */
  encoderTransferBackend: z.enum(["zmq_to_scheduler", "zmq_to_tokenizer", "mooncake"]).default("zmq_to_scheduler"),

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
  /**
   * `/server_info.version`. Default: "0.5.19-sim" when `acceptsMmHashes`, else "0.5.10-sim" (SGLang
   * took caller mm_hashes from 0.5.13 on; relays decide from this version whether to publish).
   */
  version: z.string().min(1).optional(),
  /** Take pad values from caller `mm_hashes` (SGLang >= 0.5.13); false ignores them like older SGLang. */
  acceptsMmHashes: z.boolean().default(true),
  /**
   * `--speculative-algorithm EAGLE`: SGLang's radix cache then keys pages by token bigrams and its
   * KV events carry `[t_j, t_{j+1}]` pairs (docs/simulator.md §EAGLE).
   */
  eagle: z.boolean().default(false),
  /**
   * `--enable-hierarchical-cache` (HiCache, hicache.ts): a host-memory tier of `ratio` ×
   * capacityTokens (`--hicache-ratio`: SGLang's default 2.0, must be > 1), written through (SGLang's
   * default `--hicache-write-policy write_through`, the one simulated), loaded back at `loadGBps`
   * for `kvBytesPerToken` bytes a token (Qwen3-VL-8B bf16: 147 456). null: GPU only.
   */
  hicache: z
    .strictObject({
      ratio: z.number().gt(1).max(1000).default(2),
      kvBytesPerToken: z.number().int().min(1).max(100_000_000).default(147_456),
      loadGBps: z.number().positive().max(10_000).default(37),
      /**
       * `--hicache-storage-backend file`: the backend's directory (SGLang reads it from
       * SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR, default /tmp/hicache: mem_cache/hicache_storage.py
       * HiCacheFile), shared by every simulated worker given the same one. null: no storage tier.
       */
      storageDir: z.string().min(1).nullable().default(null),
      /** Storage → GPU bandwidth, GB/s. */
      storageLoadGBps: z.number().positive().max(10_000).default(2),
    })
    .nullable()
    .default(null),
  /**
   * The served model's directory (config.json, preprocessor_config.json,
   * video_preprocessor_config.json): the simulator derives its own media contract from it.
   * Default: test/fixtures/models/<family> in this repository.
   */
  modelDir: z.string().min(1).optional(),
  /** Media fetch bounds. SGLang's REQUEST_TIMEOUT defaults: 3 s for images, 10 s for videos. */
  media: z
    .strictObject({
      maxBytes: z.number().int().positive().default(64 * 1024 * 1024),
      imageTimeoutMs: z.number().int().positive().default(3_000),
      videoTimeoutMs: z.number().int().positive().default(10_000),
      /** Hosts/CIDRs fetched although private (the simulator is a trusted local component). */
      allowlist: z.array(z.string().min(1)).default(["127.0.0.0/8", "[::1]", "localhost"]),
      /**
       * Locked down like a production worker: http(s) media only from the media store's
       * `/v1/media/` (signed URLs from the edge; none without `storeUrl`), plus inline data.
       * Off = fetch any URL (SGLang's default).
       */
      lockedDown: z.boolean().default(false),
      storeUrl: z.url().nullable().default(null),
      /**
       * `<worker id>:<media credential>`, sent as Basic auth on fetches from the store (what SGLang's
       * python-requests sends from a ~/.netrc entry for the store's host; src/media/signed-url.ts).
       */
      storeCredential: z.string().min(3).nullable().default(null),
      ffprobePath: z.string().min(1).default("ffprobe"),
      /** Video probing: native ffprobe, the embedded wasm build, or native when runnable (auto). */
      decoder: z.enum(["native", "wasm", "auto"]).default("auto"),
    })
    .prefault({}),

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
  /**
   * `--incremental-streaming-output`: /generate stream frames carry the new text, ids and output
   * logprobs only (SGLang's default sends all of each so far; sgl-project/sglang
   * python/sglang/srt/entrypoints/http_server.py @9d147fd L818-849).
   */
  incrementalStreamingOutput: z.boolean().default(false),
  /**
   * `--stream-interval`: a stream frame every this many output tokens (a request's
   * `sampling_params.stream_interval` wins), the finishing frame always (engine.ts).
   */
  streamInterval: z.int().positive().default(1),

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
  /**
   * SGLang's `--api-key`: every request needs `Authorization: Bearer <key>` except OPTIONS and paths
   * starting with /health or /metrics (401 `{"error":"Unauthorized"}`; http-auth.ts). Null: open.
   */
  apiKey: z.string().min(1).max(4096).nullable().default(null),
});

export type SimOptionsInput = z.input<typeof SimOptionsSchema>;
export type SimOptions = Omit<z.output<typeof SimOptionsSchema>, "version"> & { version: string };

export const MM_HASHES_VERSION = "0.5.19-sim";
export const LEGACY_VERSION = "0.5.10-sim";
const MM_HASHES_SINCE: [number, number, number] = [0, 5, 13];

export function parseSimOptions(input: unknown): SimOptions {
  const o = SimOptionsSchema.parse(input ?? {});
  const version = o.version ?? (o.acceptsMmHashes ? MM_HASHES_VERSION : LEGACY_VERSION);
  // Relays infer mm_hashes support from the version: a contradiction would publish a wrong contract.
  const v = parseVersion(version);
  if (v !== null && versionAtLeast(v, MM_HASHES_SINCE) !== o.acceptsMmHashes) {
    throw new z.ZodError([
      {
        code: "custom",
        path: ["version"],
        message: `version ${version} ${o.acceptsMmHashes ? "predates" : "implies"} caller mm_hashes support (0.5.13) but acceptsMmHashes is ${o.acceptsMmHashes}`,
        input: version,
      },
    ]);
  }
  // HiCache's host tier keys pages by plain token chains (hicache.ts), not EAGLE's bigram pages.
  if (o.hicache !== null && o.eagle) {
    throw new z.ZodError([{ code: "custom", path: ["hicache"], message: "hicache is not simulated together with eagle (bigram pages)", input: o.hicache }]);
  }
  return { ...o, version };
}
