/**
 * Edge configuration, from wrangler vars and secrets. zod is the source of truth: every field has a
 * safe default so a bare deployment works (closed: API keys required), and an invalid value stops
 * the Worker with a ConfigError naming the var and field — never a silent default. JSON-valued vars
 * arrive as strings and are parsed here once per isolate. Objects are strict: a misspelt field is an
 * error, not an ignored one.
 */
import { DEFAULT_PD_TRANSFER_GBPS } from "../selection/pd-transfer-cost.ts";
import { DEFAULT_DUPLICATE_COST } from "../selection/duplicate-cost.ts";
import { z } from "zod";
import { DEFAULT_BLOCK_BUDGET } from "../block-index/block-budget.ts";
import { ConfigError } from "../api/errors.ts";
import { LimitsSchema, type Limits } from "../api/limits.ts";
import { regionFromColo, RegionsConfigSchema } from "../selection/regions.ts";
import { DEFAULT_SELECTION_COST, SELECTION_COSTS } from "../selection/selection.ts";
import { DEFAULT_STORAGE_CAPACITY_BLOCKS, DEFAULT_TIER_COST } from "../selection/tier-cost.ts";
import { parseSafeFetchPolicy, SafeFetchPolicySchema, type SafeFetchPolicy } from "../media/safe-fetch.ts";
import { classifyHost } from "../media/ssrf.ts";
import { isCompatible } from "../prompt/model-profile.ts";
import { DEFAULT_TURN_CHECK_RATE } from "../prompt/turn-chain.ts";
import { MAX_SHARDS } from "../relay-wire/chain-shards.ts";
import { normalizeWorkerUrl } from "../relay-wire/relay-auth.ts";

export const ModelFamilySchema = z.enum(["qwen2_vl", "qwen2_5_vl", "qwen3_vl"]);
export const TemplateIdSchema = z.enum(["qwen2vl", "qwen3vl-instruct", "qwen3vl-thinking"]);

export const ModelConfigSchema = z.strictObject({
  /** The served model name clients send as `model`. */
  id: z.string().min(1).max(256),
  family: ModelFamilySchema,
  templateId: TemplateIdSchema,
  /** KV block size = the workers' SGLang page size. */
  blockSize: z.number().int().min(1).max(4096).default(16),
  ownedBy: z.string().default("kvedge"),
  /**
   * The model's context in tokens; a prompt that cannot fit is refused at the edge (400
   * context_length_exceeded) instead of being sent. Default per family (contextTokensOf).
   */
  contextTokens: z.number().int().min(1).max(16_777_216).optional(),
  /**
   * The workers run with SGLang's `--allow-auto-truncate`: an over-long input is truncated and
   * `max_new_tokens` clamped instead of refused, so the edge refuses neither (default false, as SGLang).
   */
  allowAutoTruncate: z.boolean().default(false),
  /**
   * The workers' --tool-call-parser / --reasoning-parser, which the edge applies itself (it talks to
   * /generate). Absent: chosen from the template (src/proxy/chat-output.ts `modelParsers`); null: off.
   */
  toolCallParser: z.enum(["qwen25"]).nullable().optional(),
  reasoningParser: z.enum(["qwen3", "qwen3-thinking"]).nullable().optional(),
  /**
   * LoRA adapters the pool's workers serve (SGLang `--lora-paths` names); a client selects one with
   * `model: "<id>:<adapter>"`, as SGLang's OpenAI API does. Each adapter's KV blocks live in their
   * own cache namespace (src/edge/cache-salt.ts).
   */
  loraAdapters: z.array(z.string().regex(/^[A-Za-z0-9._-]{1,128}$/, "LoRA adapter names are 1-128 characters of [A-Za-z0-9._-]")).max(256).default([]),
}).refine((m) => isCompatible(m.family, m.templateId), { path: ["templateId"], message: "templateId must be a chat template of the model's family (qwen2vl for qwen2_vl and qwen2_5_vl; qwen3vl-instruct or qwen3vl-thinking for qwen3_vl)" });
export type ModelConfig = z.infer<typeof ModelConfigSchema>;

/**
 * Context length per family: `max_position_embeddings` of the released checkpoints' config.json
 * (Qwen2-VL-7B-Instruct 32768, Qwen2.5-VL-7B-Instruct 128000, Qwen3-VL-8B-Instruct 262144).
 */
const FAMILY_CONTEXT_TOKENS: Record<z.infer<typeof ModelFamilySchema>, number> = {
  qwen2_vl: 32_768,
  qwen2_5_vl: 128_000,
  qwen3_vl: 262_144,
};

export function contextTokensOf(m: ModelConfig): number {
  return m.contextTokens ?? FAMILY_CONTEXT_TOKENS[m.family];
}

export const DEFAULT_MODELS: ModelConfig[] = [
  { id: "Qwen/Qwen3-VL-8B-Instruct", family: "qwen3_vl", templateId: "qwen3vl-instruct", blockSize: 16, ownedBy: "kvedge", allowAutoTruncate: false, loraAdapters: [] },
];

const WaitMsSchema = z.number().int().min(0).max(600_000);
/**
 * The admission wait's defaults per band: 1 s, a TTFT an interactive user still accepts. Flex waits
 * no longer by default: past capacity a flex request admitted in a lull holds KV when the next burst
 * comes (no preemption), so a longer flex wait costs the interactive bands' goodput (bench/suites/admission.mjs).
 */
export const DEFAULT_BAND_WAITS = { priority: 1_000, default: 1_000, flex: 1_000 } as const;
const BandWaitsSchema = z.strictObject({
  priority: WaitMsSchema.default(DEFAULT_BAND_WAITS.priority),
  default: WaitMsSchema.default(DEFAULT_BAND_WAITS.default),
  flex: WaitMsSchema.default(DEFAULT_BAND_WAITS.flex),
});

/**
 * `KVEDGE_ROUTING.admission`: when every worker of a pool is at its load bound, requests wait in the
 * pool's object (src/admission/admission-gate.ts) instead of piling into the workers' own queues.
 * The defaults never delay a request while a worker is under its bound, and bound no worker whose
 * relay reports no KV capacity: an unloaded pool routes as without admission.
 */
export const AdmissionConfigSchema = z.strictObject({
  /** Off: every request is routed at once, whatever the load. */
  enabled: z.boolean().default(true),
  /** A worker is full when the prompt KV tokens of its in-flight requests reach this fraction of its KV capacity (the hello's kvCapacityTokens). */
  loadFactor: z.number().min(0.05).max(16).default(1),
  /** The bound in tokens of a worker whose relay reports no capacity; absent: such a worker is never full. */
  workerTokens: z.number().int().min(1).max(2 ** 30).optional(),
  /** Requests waiting in one pool object at most; past it the newcomer (or a lower band's newest) gets 429. */
  maxQueue: z.number().int().min(0).max(100_000).default(1024),
  /**
   * Longest a request waits before it gets 429, per band (bands.ts); one number sets every band.
   * Short: past capacity a long wait serves requests late instead of refusing them (a 429 with
   * Retry-After lets the client retry or go elsewhere). A flex band that may wait longer: `{ "flex": 8000 }`.
   */
  maxWaitMs: z.union([WaitMsSchema, BandWaitsSchema]).default(DEFAULT_BAND_WAITS),
  /** Every this long of waiting moves a request one band up (no band waits for ever). */
  agingMs: z.number().int().min(100).max(600_000).default(10_000),
  /** Whether any caller may ask for the priority band (service_tier "priority", priority > 0); else operator keys only. */
  openPriority: z.boolean().default(false),
});
export type AdmissionConfig = z.infer<typeof AdmissionConfigSchema>;

export const RoutingConfigSchema = z.strictObject({
  /**
   * Worker cost: "ttft" = estimated time to first token (queued + uncached prefill at the worker's
   * prefill rate, decode interference, and round trip when KVEDGE_REGIONS is set; src/selection/ttft-cost.ts);
   * "blocks" = Dynamo's block count (uncached + queued prefill blocks + decodeWeight × decode blocks;
   * src/selection/block-cost.ts).
   */
  cost: z.enum(SELECTION_COSTS).default(DEFAULT_SELECTION_COST),
  /** Softmax temperature for selection; 0 = argmin with random tie-break. */
  temperature: z.number().min(0).max(10).default(0),
  /** cost "blocks": weight of decode load (active + new KV blocks) against prefill/overlap; 1 = Dynamo's. */
  decodeWeight: z.number().min(0).max(10).default(1),
  /**
   * cost "ttft": on a worker whose cache is full, the prefill of tokens another worker holds costs
   * this weight × their prefill time again (a copy evicts as much of other prefixes), never lifting
   * the worker's estimate past duplicateTargetMs; 0 = off (src/selection/duplicate-cost.ts).
   */
  duplicateWeight: z.number().min(0).max(10).default(DEFAULT_DUPLICATE_COST.weight),
  duplicateTargetMs: z.number().int().min(0).max(600_000).default(DEFAULT_DUPLICATE_COST.targetMs),
  /**
   * Learn each worker's prefill rate from its own prefills (route to first output on a worker with
   * nothing queued; src/routing-index/prefill-rates.ts) and price and drain it at that rate while its
   * relay's hello reports none (`--prefill-tokens-per-sec` wins); false: the pool default
   * (KVEDGE_REGIONS defaultPrefillTokensPerSec) for such workers. Off by default: in the routing
   * replay the learned rates (4-6k tok/s on agent loops, 12-25k on document QA) cost goodput against
   * the 10k default on some traces and seeds (docs/benchmarks.md §5).
   */
  learnPrefillRate: z.boolean().default(false),
  /**
   * cost "ttft", HiCache workers: the KV bytes one token takes on the pool's model (layers × KV
   * heads × head dim × 2 × bytes per element) and the host-memory → GPU load-back bandwidth in GB/s,
   * which price a prefix held in a worker's host memory (src/selection/tier-cost.ts).
   */
  kvBytesPerToken: z.number().int().min(1).max(100_000_000).default(DEFAULT_TIER_COST.kvBytesPerToken),
  hostLoadGBps: z.number().positive().max(10_000).default(DEFAULT_TIER_COST.hostLoadGBps),
  /** Load bandwidth of a HiCache storage backend shared by workers (GB/s), and the blocks its approximate view keeps. */
  storageLoadGBps: z.number().positive().max(10_000).default(DEFAULT_TIER_COST.storageLoadGBps),
  storageCapacityBlocks: z.number().int().min(1).max(16_777_216).default(DEFAULT_STORAGE_CAPACITY_BLOCKS),
  /**
   * cost "ttft", prefill/decode pools: the prefill → decode KV transfer bandwidth in GB/s; a pair's
   * estimate adds the prompt's KV bytes over it (src/selection/pd-transfer-cost.ts).
   */
  pdTransferGBps: z.number().positive().max(10_000).default(DEFAULT_PD_TRANSFER_GBPS),
  /** Attempts across workers when a worker refuses the connection before any byte. */
  maxAttempts: z.number().int().min(1).max(8).default(3),
  /** Timeout for the worker's response headers. */
  upstreamHeadersTimeoutMs: z.number().int().min(100).max(600_000).default(120_000),
  /** Longest silence between two chunks of a worker's body (streamed or not) before the edge cuts it. */
  upstreamIdleTimeoutMs: z.number().int().min(100).max(600_000).default(60_000),
  /** Longest a whole upstream exchange may take, headers to last byte. */
  upstreamDeadlineMs: z.number().int().min(1_000).max(3_600_000).default(900_000),
  /** Cap on a non-streamed worker answer (bytes); larger answers are cut with a 502. */
  maxUpstreamBodyBytes: z.number().int().min(1024).max(128 * 1024 * 1024).default(16 * 1024 * 1024),
  /**
   * Output tokens per stream frame asked of the worker for streamed requests: sent as
   * `sampling_params.stream_interval`, which wins over the worker's `--stream-interval`
   * (src/proxy/generate-request.ts); each frame costs the edge a read, a translation and a write
   * (docs/operations.md, Stream frames). Unset: never sent (an SGLang without the field refuses the
   * request). At most 64: a chunk then
   * holds up to 64 tokens (seconds of a slow decode), past which the answer no longer reads as
   * streamed while the CPU left to save is a few ms per 1 000 tokens.
   */
  streamInterval: z.number().int().min(1).max(64).optional(),
  /** How long the edge caches a pool profile in the isolate. */
  profileTtlMs: z.number().int().min(0).max(60_000).default(2_000),
  /** Sharded index: longest delay before one shard's load changes reach the others (docs/scale.md). */
  loadSyncMs: z.number().int().min(0).max(1_000).default(5),
  /** Most (worker, block) entries one index object holds; beyond it blocks are refused (src/block-index/block-budget.ts, docs/scale.md §4). */
  blockBudget: z.number().int().min(1_000).max(1_500_000).default(DEFAULT_BLOCK_BUDGET),
  /** Admission per pool under overload (AdmissionConfigSchema). */
  admission: AdmissionConfigSchema.default(AdmissionConfigSchema.parse({})),
});
export type RoutingConfig = z.infer<typeof RoutingConfigSchema>;

/** `KVEDGE_SHARDS`: a whole number 1…MAX_SHARDS (1024), as a string var or a number. */
export const ShardCountVarSchema = z
  .union([z.string().regex(/^\s*\d{1,4}\s*$/, "KVEDGE_SHARDS must be a whole number").transform(Number), z.number()])
  .pipe(z.number().int().min(1, "KVEDGE_SHARDS must be at least 1").max(MAX_SHARDS, `KVEDGE_SHARDS must be at most ${MAX_SHARDS}`));

/** One token bucket: `burst` requests at once, refilled at requestsPerMinute / 60 per second. */
export const BucketConfigSchema = z.strictObject({
  requestsPerMinute: z.number().positive().max(10_000_000),
  burst: z.number().int().min(1).max(1_000_000),
});
export type BucketConfig = z.infer<typeof BucketConfigSchema>;

/**
 * `KVEDGE_RATE_LIMIT`: on by default. The top-level bucket is the generate routes' (chat,
 * completions, responses: one per API key, else per client /64 or /32); the others are per client network: failed authentication on any route,
 * operator routes (`/admin/*`, `/metrics`, `/dashboard`), relay connects.
 */
export const RateLimitsSchema = z.strictObject({
  requestsPerMinute: z.number().positive().max(10_000_000).default(600),
  burst: z.number().int().min(1).max(1_000_000).default(120),
  authFailures: BucketConfigSchema.default({ requestsPerMinute: 30, burst: 10 }),
  admin: BucketConfigSchema.default({ requestsPerMinute: 300, burst: 100 }),
  relay: BucketConfigSchema.default({ requestsPerMinute: 60, burst: 30 }),
  /** Prompt tokens per minute per API key (else client network) on every generate route; absent: no token quota (src/edge/token-quota.ts). */
  inputTokensPerMinute: z.number().int().min(1).max(1_000_000_000).optional(),
  /** Output tokens per minute, counted up front as each request's max_tokens (or the edge's cap), as OpenAI counts them; absent: no quota. */
  outputTokensPerMinute: z.number().int().min(1).max(1_000_000_000).optional(),
});
export type RateLimits = z.infer<typeof RateLimitsSchema>;

/** The shard count a Durable Object reads from its env (the same rule as the edge; throws ConfigError). */
export function shardCountOf(raw: unknown): number {
  if (raw === undefined || raw === "") return 1;
  const r = ShardCountVarSchema.safeParse(raw);
  if (!r.success) throw configError("KVEDGE_SHARDS", r.error.issues);
  return r.data;
}

/** `KVEDGE_ROUTING` as a Durable Object reads it (throws ConfigError; the edge refuses the same value). */
export function parseRoutingVar(raw: unknown): RoutingConfig {
  const r = z.object({ KVEDGE_ROUTING: jsonVar(RoutingConfigSchema, "KVEDGE_ROUTING") }).safeParse({ KVEDGE_ROUTING: raw });
  if (!r.success) throw configError(null, r.error.issues);
  return r.data.KVEDGE_ROUTING ?? RoutingConfigSchema.parse({});
}

/** zod issues → one ConfigError naming the var and field (`KVEDGE_ROUTING.maxAttempts: …`); never the value. */
export function configError(varName: string | null, issues: readonly z.core.$ZodIssue[]): ConfigError {
  const parts = issues.slice(0, 3).map((i) => {
    const path = [...(varName ? [varName] : []), ...i.path.map(String)].join(".");
    return `${path || "config"}: ${i.message}`;
  });
  return new ConfigError(`Invalid configuration: ${parts.join("; ")}.`);
}

function jsonVar<T extends z.ZodType>(schema: T, name: string) {
  return z
    .union([z.string(), z.unknown()])
    .optional()
    .transform((v, ctx) => {
      if (v === undefined || v === "") return undefined;
      if (typeof v !== "string") return v;
      try {
        return JSON.parse(v) as unknown;
      } catch {
        ctx.addIssue({ code: "custom", message: `${name} is not valid JSON` });
        return z.NEVER;
      }
    })
    .pipe(schema.optional());
}

/**
 * The URL of a service the edge calls with a bearer secret (the decode service) or hands to workers
 * (the media store): https, or plain http to a loopback address only (a local fleet on one host);
 * no credentials, query or fragment, which would travel with every call or signed URL.
 */
function serviceUrl(name: string) {
  return z
    .string()
    .url()
    .refine((v) => {
      const u = new URL(v);
      const host = classifyHost(u.hostname);
      const loopback = host.kind === "ip" ? host.blocked === "loopback" : host.name === "localhost";
      return (u.protocol === "https:" || (u.protocol === "http:" && loopback)) && u.username === "" && u.password === "" && u.search === "" && u.hash === "";
    }, `${name} must be an https URL (plain http only to a loopback address) without credentials, query or fragment`);
}

/**
 * `KVEDGE_WORKER_KEYS`: worker URL (the spelling relay keys bind, normalizeWorkerUrl) → that worker's
 * SGLang API key, a header-safe token (it travels as `Authorization: Bearer <key>`).
 */
const WorkerKeysSchema = z
  .record(z.string(), z.string().regex(/^[\x21-\x7e]{16,512}$/, "each worker key must be 16-512 visible ASCII characters"))
  .superRefine((m, ctx) => {
    const urls = Object.keys(m);
    if (urls.length > 4096) ctx.addIssue({ code: "custom", message: "KVEDGE_WORKER_KEYS holds at most 4096 workers" });
    for (const u of urls) {
      const n = normalizeWorkerUrl(u, { allowHttp: true });
      if (!n.ok || n.url !== u)
        ctx.addIssue({ code: "custom", path: [u], message: "each KVEDGE_WORKER_KEYS name must be a worker URL as relay keys bind it (scheme://host[:port][/path], no trailing slash, credentials, query or fragment)" });
    }
  });

/** KVEDGE_API_KEYS as the list of keys (comma-separated, trimmed, empty entries dropped). */
function apiKeyList(raw: string | undefined): string[] {
  return raw?.split(",").map((k) => k.trim()).filter(Boolean) ?? [];
}

/** Raw environment → typed config. Unknown vars are ignored (bindings live in the same object). */
export const EdgeEnvSchema = z.object({
  KVEDGE_MODELS: jsonVar(z.array(ModelConfigSchema).min(1).max(64), "KVEDGE_MODELS"),
  KVEDGE_LIMITS: jsonVar(LimitsSchema, "KVEDGE_LIMITS"),
  KVEDGE_ROUTING: jsonVar(RoutingConfigSchema, "KVEDGE_ROUTING"),
  /** Regions and RTT table (read by the index; validated here too so a bad value stops the edge). */
  KVEDGE_REGIONS: jsonVar(RegionsConfigSchema, "KVEDGE_REGIONS"),
  /** "off", or JSON overriding the default buckets (RateLimitsSchema). */
  KVEDGE_RATE_LIMIT: z.preprocess((v) => (v === "off" ? undefined : v), jsonVar(RateLimitsSchema, "KVEDGE_RATE_LIMIT")),
  /**
   * "public" serves `/v1` without API keys (an explicit operator choice). Unset = closed: without
   * KVEDGE_API_KEYS every `/v1` request is refused.
   */
  KVEDGE_ACCESS: z.enum(["api_keys", "public"]).optional(),
  /** "on" sends the `x-kvedge-*` routing headers to every client (else only to admin callers). */
  KVEDGE_DEBUG_HEADERS: z.enum(["on", "off"]).optional(),
  /** SSRF-safe media fetch policy (caps, timeouts, a local-development allowlist; off by default). */
  KVEDGE_MEDIA: jsonVar(z.strictObject(SafeFetchPolicySchema.shape), "KVEDGE_MEDIA"),
  /** Regional decode service for videos (probe → content hash, frames, fps, size). */
  KVEDGE_DECODE_URL: serviceUrl("KVEDGE_DECODE_URL").optional(),
  /** Bearer token for the decode service (the same value as its KVEDGE_DECODE_TOKEN; secret). */
  DECODE_TOKEN: z.string().min(32, "DECODE_TOKEN must be at least 32 characters").optional(),
  /** The media store's URL as workers reach it (default: KVEDGE_DECODE_URL). */
  KVEDGE_MEDIA_STORE_URL: serviceUrl("KVEDGE_MEDIA_STORE_URL").optional(),
  /** HMAC key shared with the media store for signed worker URLs (secret; required with KVEDGE_DECODE_URL). */
  KVEDGE_MEDIA_URL_KEY: z.string().min(32, "KVEDGE_MEDIA_URL_KEY must be at least 32 characters").optional(),
  /** Images fetched by the edge itself (no media store) are forwarded inline up to this size. */
  KVEDGE_MEDIA_INLINE_MAX_BYTES: z.coerce.number().int().positive().max(64 * 1024 * 1024).optional(),
  /** UNSAFE: forward client media URLs to workers, which then fetch them (SSRF from GPU nodes). */
  KVEDGE_FORWARD_CLIENT_URLS: z.enum(["true", "false"]).optional(),
  /** "off" disables exact media routing (every media request routes on its text prefix). */
  KVEDGE_EXACT_MEDIA: z.enum(["on", "off"]).optional(),
  /** Share (0–1) of turn-chain hits also rendered whole and compared (src/prompt/turn-chain.ts); default 0.01. */
  KVEDGE_TURN_CHECK_RATE: z.coerce.number().min(0).max(1).optional(),
  RELAY_SECRET: z.string().min(16).optional(),
  /**
   * Development only: "1" lets relay keys bind plain-http worker URLs (the local fleet's simulated
   * workers). Unset: worker URLs must be https.
   */
  KVEDGE_RELAY_ALLOW_HTTP: z.enum(["0", "1"]).optional(),
  /**
   * KV cache sharing between API keys: "per_tenant" (default) sends each key's keyed hash as SGLang's
   * cache_salt, so tenants never reuse or detect each other's cached prefixes; "shared" shares them.
   */
  KVEDGE_KV_SHARING: z.enum(["per_tenant", "shared"]).optional(),
  /**
   * Edge → worker authentication (src/edge/worker-auth.ts): "required" (default) sends nothing to a
   * worker the edge holds no credential for (it is skipped as unavailable); "none" calls workers
   * without one (a closed network of your own; development).
   */
  KVEDGE_WORKER_AUTH: z.enum(["required", "none"]).optional(),
  /**
   * Secret from which the edge derives each worker's SGLang `--api-key`, bound to the worker URL its
   * relay key registers (POST /admin/relay-keys returns it once as `workerApiKey`).
   */
  KVEDGE_WORKER_KEY_SECRET: z.string().min(32, "KVEDGE_WORKER_KEY_SECRET must be at least 32 characters").optional(),
  /** Secret: JSON {"<worker URL>": "<its SGLang --api-key>"}, for keys chosen outside the edge; wins over the derived key. */
  KVEDGE_WORKER_KEYS: jsonVar(WorkerKeysSchema, "KVEDGE_WORKER_KEYS"),
  /** Cloudflare Access service token sent to every worker (workers behind an Access-protected Tunnel); both or neither. */
  CF_ACCESS_CLIENT_ID: z.string().regex(/^[\x21-\x7e]{1,256}$/, "CF_ACCESS_CLIENT_ID must be 1-256 visible ASCII characters").optional(),
  CF_ACCESS_CLIENT_SECRET: z.string().regex(/^[\x21-\x7e]{16,512}$/, "CF_ACCESS_CLIENT_SECRET must be 16-512 visible ASCII characters").optional(),
  ADMIN_TOKEN: z.string().min(16).regex(/^\S+$/, "ADMIN_TOKEN must not contain whitespace").optional(),
  /** Comma-separated client API keys; when set, `Authorization: Bearer <key>` is required. */
  KVEDGE_API_KEYS: z.string().optional(),
  /** Shard objects per pool's block index (1 = one object; docs/scale.md). */
  KVEDGE_SHARDS: ShardCountVarSchema.optional(),
  /** CORS for `/v1`: "*" (default), "off", or comma-separated origins (src/edge/cors.ts). */
  KVEDGE_CORS: z
    .string()
    .optional()
    .refine(
      (v) => v === undefined || v === "*" || v === "off" || v.split(",").every((o) => /^https?:\/\/[A-Za-z0-9.-]+(?::\d{1,5})?$/.test(o.trim())),
      'KVEDGE_CORS must be "*", "off", or comma-separated origins like https://app.example.com',
    ),
});

/** Which browser origins may call `/v1` (src/edge/cors.ts); null = none. */
export type CorsPolicy = { origins: "*" | ReadonlySet<string> } | null;

export interface EdgeConfig {
  models: ModelConfig[];
  /** KVEDGE_MEDIA, parsed once (parseSafeFetchPolicy): each request's fetcher takes it as is. */
  media: SafeFetchPolicy;
  decode: { url?: string; token?: string; timeoutMs?: number };
  /** What the worker may receive for media: verified inline bytes or signed store URLs (docs/media.md). */
  mediaStore: { publicUrl: string | null; urlKey: string | null; urlTtlSec: number; inlineMaxBytes: number; forwardClientUrls: boolean };
  exactMedia: boolean;
  /** KVEDGE_TURN_CHECK_RATE: share of the prompt stage's turn-chain hits checked against a full render. */
  turnCheckRate: number;
  limits: Limits;
  routing: RoutingConfig;
  /** null = rate limiting switched off (`KVEDGE_RATE_LIMIT=off`). */
  rateLimits: RateLimits | null;
  /** `/v1` without an API key: only with KVEDGE_ACCESS=public. */
  publicAccess: boolean;
  /** `x-kvedge-*` routing headers for every client (KVEDGE_DEBUG_HEADERS=on); else admin only. */
  debugHeaders: boolean;
  /** Shard objects per pool (KVEDGE_SHARDS). */
  shards: number;
  /**
   * KVEDGE_REGIONS maps colos to regions and fixes none of its own (src/selection/regions.ts
   * regionFromColo): the index reads the edge's region from its colo, the one use of request.cf.
   */
  regionsByColo: boolean;
  /** KVEDGE_CORS: which browser origins may call `/v1` (null: none). */
  cors: CorsPolicy;
  relaySecret: string | null;
  /** KVEDGE_RELAY_ALLOW_HTTP=1: plain-http worker URLs allowed (development). */
  relayAllowHttp: boolean;
  /** KVEDGE_KV_SHARING. */
  kvSharing: "per_tenant" | "shared";
  adminToken: string | null;
  apiKeys: ReadonlySet<string> | null;
  /** Edge → worker credentials (src/edge/worker-auth.ts). */
  workerAuth: WorkerAuthConfig;
}

export interface WorkerAuthConfig {
  /** KVEDGE_WORKER_AUTH: a worker without a credential is never called (default true). */
  required: boolean;
  /** KVEDGE_WORKER_KEY_SECRET: each worker's key is derived from it and the worker's URL. */
  keySecret: string | null;
  /** KVEDGE_WORKER_KEYS: explicit keys by worker URL (win over derived ones). */
  keys: ReadonlyMap<string, string>;
  /** Cloudflare Access service token headers for every worker call. */
  access: { clientId: string; clientSecret: string } | null;
}

/** Raw environment → EdgeConfig; throws ConfigError naming the first invalid var and field. */
export function parseEdgeConfig(env: Record<string, unknown>): EdgeConfig {
  const r = EdgeEnvSchema.superRefine((e, ctx) => {
    if (e.KVEDGE_DECODE_URL && !e.KVEDGE_MEDIA_URL_KEY) {
      ctx.addIssue({ code: "custom", path: ["KVEDGE_MEDIA_URL_KEY"], message: "KVEDGE_MEDIA_URL_KEY is required with KVEDGE_DECODE_URL (workers fetch stored media only through signed URLs)" });
    }
    if (e.KVEDGE_MEDIA_STORE_URL && !e.KVEDGE_DECODE_URL) {
      ctx.addIssue({ code: "custom", path: ["KVEDGE_MEDIA_STORE_URL"], message: "KVEDGE_MEDIA_STORE_URL needs KVEDGE_DECODE_URL (the store is the decode service)" });
    }
    const keys = apiKeyList(e.KVEDGE_API_KEYS);
    if (keys.some((k) => k.length < 16)) ctx.addIssue({ code: "custom", path: ["KVEDGE_API_KEYS"], message: "every API key must be at least 16 characters" });
    // One secret, one role: a tenant key that is also the admin token would open /admin to that tenant.
    const others: [string, string | undefined][] = [["RELAY_SECRET", e.RELAY_SECRET], ["DECODE_TOKEN", e.DECODE_TOKEN], ["KVEDGE_MEDIA_URL_KEY", e.KVEDGE_MEDIA_URL_KEY], ["KVEDGE_WORKER_KEY_SECRET", e.KVEDGE_WORKER_KEY_SECRET]];
    if ((e.CF_ACCESS_CLIENT_ID === undefined) !== (e.CF_ACCESS_CLIENT_SECRET === undefined))
      ctx.addIssue({ code: "custom", path: [e.CF_ACCESS_CLIENT_ID === undefined ? "CF_ACCESS_CLIENT_ID" : "CF_ACCESS_CLIENT_SECRET"], message: "CF_ACCESS_CLIENT_ID and CF_ACCESS_CLIENT_SECRET go together (a Cloudflare Access service token)" });
    // A worker key that is also a tenant key or the admin token would let that worker call the edge as them.
    for (const [url, k] of Object.entries(e.KVEDGE_WORKER_KEYS ?? {}))
      if (keys.includes(k) || k === e.ADMIN_TOKEN) ctx.addIssue({ code: "custom", path: ["KVEDGE_WORKER_KEYS", url], message: "a worker key must not also be an API key or the admin token" });
    if (e.ADMIN_TOKEN !== undefined) {
      if (keys.includes(e.ADMIN_TOKEN)) ctx.addIssue({ code: "custom", path: ["ADMIN_TOKEN"], message: "ADMIN_TOKEN must not also be an API key (KVEDGE_API_KEYS)" });
      for (const [name, v] of others) if (v === e.ADMIN_TOKEN) ctx.addIssue({ code: "custom", path: ["ADMIN_TOKEN"], message: `ADMIN_TOKEN must differ from ${name}` });
    }
    for (const [name, v] of others) if (v !== undefined && keys.includes(v)) ctx.addIssue({ code: "custom", path: ["KVEDGE_API_KEYS"], message: `an API key must not equal ${name}` });
    const ids = new Set<string>();
    for (const [i, m] of (e.KVEDGE_MODELS ?? []).entries()) {
      if (ids.has(m.id)) ctx.addIssue({ code: "custom", path: ["KVEDGE_MODELS", i, "id"], message: `model id "${m.id}" is listed twice` });
      ids.add(m.id);
    }
  }).safeParse(env);
  if (!r.success) throw configError(null, r.error.issues);
  const parsed = r.data;
  const keys = apiKeyList(parsed.KVEDGE_API_KEYS);
  return {
    models: parsed.KVEDGE_MODELS ?? DEFAULT_MODELS,
    media: parseSafeFetchPolicy(parsed.KVEDGE_MEDIA ?? {}),
    decode: {
      ...(parsed.KVEDGE_DECODE_URL ? { url: parsed.KVEDGE_DECODE_URL } : {}),
      ...(parsed.DECODE_TOKEN ? { token: parsed.DECODE_TOKEN } : {}),
    },
    mediaStore: {
      publicUrl: parsed.KVEDGE_MEDIA_STORE_URL ?? parsed.KVEDGE_DECODE_URL ?? null,
      urlKey: parsed.KVEDGE_MEDIA_URL_KEY ?? null,
      urlTtlSec: 300,
      inlineMaxBytes: parsed.KVEDGE_MEDIA_INLINE_MAX_BYTES ?? 8 * 1024 * 1024,
      forwardClientUrls: parsed.KVEDGE_FORWARD_CLIENT_URLS === "true",
    },
    exactMedia: parsed.KVEDGE_EXACT_MEDIA !== "off",
    turnCheckRate: parsed.KVEDGE_TURN_CHECK_RATE ?? DEFAULT_TURN_CHECK_RATE,
    limits: parsed.KVEDGE_LIMITS ?? LimitsSchema.parse({}),
    routing: parsed.KVEDGE_ROUTING ?? RoutingConfigSchema.parse({}),
    // "off" is the one way to switch limits off: a JSON null is refused, not read as "off".
    rateLimits: env["KVEDGE_RATE_LIMIT"] === "off" ? null : (parsed.KVEDGE_RATE_LIMIT ?? RateLimitsSchema.parse({})),
    publicAccess: parsed.KVEDGE_ACCESS === "public",
    debugHeaders: parsed.KVEDGE_DEBUG_HEADERS === "on",
    shards: parsed.KVEDGE_SHARDS ?? 1,
    regionsByColo: parsed.KVEDGE_REGIONS !== undefined && regionFromColo(parsed.KVEDGE_REGIONS),
    cors:
      parsed.KVEDGE_CORS === "off" ? null
      : parsed.KVEDGE_CORS === undefined || parsed.KVEDGE_CORS === "*" ? { origins: "*" }
      : { origins: new Set(parsed.KVEDGE_CORS.split(",").map((o) => o.trim())) },
    relaySecret: parsed.RELAY_SECRET ?? null,
    relayAllowHttp: parsed.KVEDGE_RELAY_ALLOW_HTTP === "1",
    kvSharing: parsed.KVEDGE_KV_SHARING ?? "per_tenant",
    adminToken: parsed.ADMIN_TOKEN ?? null,
    apiKeys: keys.length ? new Set(keys) : null,
    workerAuth: {
      required: parsed.KVEDGE_WORKER_AUTH !== "none",
      keySecret: parsed.KVEDGE_WORKER_KEY_SECRET ?? null,
      keys: new Map(Object.entries(parsed.KVEDGE_WORKER_KEYS ?? {})),
      access: parsed.CF_ACCESS_CLIENT_ID && parsed.CF_ACCESS_CLIENT_SECRET ? { clientId: parsed.CF_ACCESS_CLIENT_ID, clientSecret: parsed.CF_ACCESS_CLIENT_SECRET } : null,
    },
  };
}
