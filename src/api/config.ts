/**
 * Edge configuration, from wrangler vars and secrets. zod is the source of truth; every field has a
 * default so a bare deployment works. JSON-valued vars arrive as strings and are parsed here once
 * per isolate.
 */
import { z } from "zod";
import { DEFAULT_BLOCK_BUDGET } from "../kv/block-budget.ts";

export const ModelFamilySchema = z.enum(["qwen2_vl", "qwen2_5_vl", "qwen3_vl"]);
export const TemplateIdSchema = z.enum(["qwen2vl", "qwen3vl-instruct", "qwen3vl-thinking"]);

export const ModelConfigSchema = z.object({
  /** The served model name clients send as `model`. */
  id: z.string().min(1).max(256),
  family: ModelFamilySchema,
  templateId: TemplateIdSchema,
  /** KV block size = the workers' SGLang page size. */
  blockSize: z.number().int().min(1).max(4096).default(16),
  ownedBy: z.string().default("kvedge"),
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
});
export type ModelConfig = z.infer<typeof ModelConfigSchema>;

export const DEFAULT_MODELS: ModelConfig[] = [
  { id: "Qwen/Qwen3-VL-8B-Instruct", family: "qwen3_vl", templateId: "qwen3vl-instruct", blockSize: 16, ownedBy: "kvedge", loraAdapters: [] },
];

export const RoutingConfigSchema = z.object({
  /**
   * Worker cost: "ttft" = estimated time to first token (queued + uncached prefill at the worker's
   * prefill rate, decode interference, and round trip when KVEDGE_REGIONS is set; src/kv/regions.ts);
   * "blocks" = Dynamo's block count (uncached + queued prefill blocks + decodeWeight × decode blocks).
   */
  cost: z.enum(["ttft", "blocks"]).default("ttft"),
  /** Softmax temperature for selection; 0 = argmin with random tie-break. */
  temperature: z.number().min(0).max(10).default(0),
  /** cost "blocks": weight of decode load (active + new KV blocks) against prefill/overlap; 1 = Dynamo's. */
  decodeWeight: z.number().min(0).max(10).default(1),
  /** Attempts across workers when a worker refuses the connection before any byte. */
  maxAttempts: z.number().int().min(1).max(8).default(3),
  /** Timeout for the worker's response headers. */
  upstreamHeadersTimeoutMs: z.number().int().min(100).max(600_000).default(120_000),
  /** How long the edge caches a pool profile in the isolate. */
  profileTtlMs: z.number().int().min(0).max(60_000).default(2_000),
  /** Sharded index: longest delay before one shard's load changes reach the others (docs/scale.md). */
  loadSyncMs: z.number().int().min(0).max(1_000).default(5),
  /** Most (worker, block) entries one index object holds; beyond it blocks are refused (src/kv/block-budget.ts, docs/scale.md §4). */
  blockBudget: z.number().int().min(1_000).max(1_500_000).default(DEFAULT_BLOCK_BUDGET),
});
export type RoutingConfig = z.infer<typeof RoutingConfigSchema>;

/** `KVEDGE_SHARDS`: a whole number 1…1024, as a string var or a number. */
export const ShardCountVarSchema = z
  .union([z.string().regex(/^\s*\d{1,4}\s*$/, "KVEDGE_SHARDS must be a whole number").transform(Number), z.number()])
  .pipe(z.number().int().min(1, "KVEDGE_SHARDS must be at least 1").max(1024, "KVEDGE_SHARDS must be at most 1024"));

/** The shard count a Durable Object reads from its env; a bad value there means 1 (the edge reports it). */
export function shardCountOf(raw: unknown): number {
  const r = ShardCountVarSchema.safeParse(raw);
  return r.success ? r.data : 1;
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

/** Raw environment → typed config. Unknown vars are ignored (bindings live in the same object). */
export const EdgeEnvSchema = z.object({
  KVEDGE_MODELS: jsonVar(z.array(ModelConfigSchema).min(1).max(64), "KVEDGE_MODELS"),
  KVEDGE_LIMITS: jsonVar(z.record(z.string(), z.unknown()), "KVEDGE_LIMITS"),
  KVEDGE_ROUTING: jsonVar(RoutingConfigSchema.partial(), "KVEDGE_ROUTING"),
  /** SSRF-safe media fetch policy (caps, timeouts, a local-development allowlist; off by default). */
  KVEDGE_MEDIA: jsonVar(z.record(z.string(), z.unknown()), "KVEDGE_MEDIA"),
  /** Regional decode service for videos (probe → content hash, frames, fps, size). */
  KVEDGE_DECODE_URL: z.string().url().optional(),
  DECODE_TOKEN: z.string().min(1).optional(),
  /** "off" disables exact media routing (every media request routes on its text prefix). */
  KVEDGE_EXACT_MEDIA: z.enum(["on", "off"]).optional(),
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
  ADMIN_TOKEN: z.string().min(16).optional(),
  /** Comma-separated client API keys; when set, `Authorization: Bearer <key>` is required. */
  KVEDGE_API_KEYS: z.string().optional(),
  /** Shard objects per pool's block index (1 = one object; docs/scale.md). */
  KVEDGE_SHARDS: ShardCountVarSchema.optional(),
});

export interface EdgeConfig {
  models: ModelConfig[];
  media: Record<string, unknown>;
  decode: { url?: string; token?: string; timeoutMs?: number };
  exactMedia: boolean;
  limitsOverride: Record<string, unknown>;
  routing: RoutingConfig;
  /** Shard objects per pool (KVEDGE_SHARDS). */
  shards: number;
  relaySecret: string | null;
  /** KVEDGE_RELAY_ALLOW_HTTP=1: plain-http worker URLs allowed (development). */
  relayAllowHttp: boolean;
  /** KVEDGE_KV_SHARING. */
  kvSharing: "per_tenant" | "shared";
  adminToken: string | null;
  apiKeys: Set<string> | null;
}

export function parseEdgeConfig(env: Record<string, unknown>): EdgeConfig {
  const parsed = EdgeEnvSchema.parse(env);
  const keys = parsed.KVEDGE_API_KEYS?.split(",").map((k) => k.trim()).filter(Boolean) ?? [];
  return {
    models: parsed.KVEDGE_MODELS ?? DEFAULT_MODELS,
    media: parsed.KVEDGE_MEDIA ?? {},
    decode: {
      ...(parsed.KVEDGE_DECODE_URL ? { url: parsed.KVEDGE_DECODE_URL } : {}),
      ...(parsed.DECODE_TOKEN ? { token: parsed.DECODE_TOKEN } : {}),
    },
    exactMedia: parsed.KVEDGE_EXACT_MEDIA !== "off",
    limitsOverride: parsed.KVEDGE_LIMITS ?? {},
    routing: RoutingConfigSchema.parse(parsed.KVEDGE_ROUTING ?? {}),
    shards: parsed.KVEDGE_SHARDS ?? 1,
    relaySecret: parsed.RELAY_SECRET ?? null,
    relayAllowHttp: parsed.KVEDGE_RELAY_ALLOW_HTTP === "1",
    kvSharing: parsed.KVEDGE_KV_SHARING ?? "per_tenant",
    adminToken: parsed.ADMIN_TOKEN ?? null,
    apiKeys: keys.length ? new Set(keys) : null,
  };
}
