/**
 * Messages between a relay (beside one SGLang worker) and its pool's routing index, carried as JSON
 * text frames over an authenticated WebSocket (`GET /v1/relay?worker=<id>`, `Authorization: Bearer`).
 *
 * 64-bit values travel as strings: engine block hashes (SGLang's signed int64) as decimal, the
 * router's local block hashes (unsigned xxh3-64) as 16 lower-case hex digits.
 *
 * Session: relay → `hello`; index → `welcome`; relay → `dump` (the worker's full current block set,
 * parents before children); then `events` batches in order. A `dump` replaces everything the index
 * holds for that worker. A new `epoch` (worker restart) fences out all blocks of older epochs.
 */
import { z } from "zod";
import { MAX_SHARDS } from "./chain-shards.ts";
import { normalizeWorkerUrl } from "./relay-auth.ts";

export const MAX_RELAY_MESSAGE_BYTES = 8 * 1024 * 1024;
export const MAX_BLOCKS_PER_MESSAGE = 200_000;
/** 2^34 tokens: beyond any GPU's KV pool; a larger claim is refused at hello. */
export const MAX_KV_CAPACITY_TOKENS = 2 ** 34;

const engineHash = z.string().regex(/^-?\d{1,20}$/, "engine hash must be a decimal int64");
const localHash = z.string().regex(/^[0-9a-f]{16}$/, "local hash must be 16 lower-case hex digits");

export const WorkerStatusSchema = z.enum(["up", "down", "draining"]);
export type WorkerStatus = z.infer<typeof WorkerStatusSchema>;

/** SGLang's DisaggregationMode values (python/sglang/srt/disaggregation/utils.py): "null" is a unified worker. */
export const DisaggregationModeSchema = z.enum(["null", "prefill", "decode"]);
export type DisaggregationMode = z.infer<typeof DisaggregationModeSchema>;

export const RelayHelloSchema = z.object({
  type: z.literal("hello"),
  workerId: z.string().min(1).max(128).regex(/^[A-Za-z0-9._:-]+$/),
  /**
   * Base URL of the worker's SGLang HTTP server, as the edge should reach it: http(s) only, no
   * credentials (the index also requires it to equal the URL the relay's key is bound to).
   */
  url: z
    .string()
    .max(2048)
    .refine((u) => normalizeWorkerUrl(u, { allowHttp: true }).ok, "url must be an http(s) URL without credentials, query or fragment"),
  /** SGLang page size (= /server_info kv_events.block_size). Must equal the pool's block size. */
  blockSize: z.number().int().min(1).max(4096),
  /** Identifies one life of the worker process; a restart must send a larger epoch. */
  epoch: z.number().int().min(0),
  modelName: z.string().min(1).max(256),
  /** Worker processor contract (media layout issue); null when the worker publishes none. */
  contract: z.unknown().nullable().default(null),
  /** Whether this worker has KV events (false → approximate mode). */
  kvEvents: z.boolean().default(true),
  /**
   * The worker runs `--incremental-streaming-output` (/server_info `incremental_streaming_output`):
   * its `/generate` stream frames carry the new text only, not all of it so far. Absent (older
   * relays): SGLang's default, cumulative frames.
   */
  incrementalStreaming: z.boolean().optional(),
  /**
   * The worker's KV pool size in tokens (/server_info `max_total_num_tokens`): bounds how many of
   * its blocks the index holds (block-views.ts). Absent: only the worker's fair share bounds it.
   */
  kvCapacityTokens: z.number().int().min(1).max(MAX_KV_CAPACITY_TOKENS).optional(),
  relayVersion: z.string().max(64).optional(),
  /** Region the worker runs in (a name from KVEDGE_REGIONS; src/selection/regions.ts). */
  region: z.string().min(1).max(64).regex(/^[A-Za-z0-9._-]+$/).optional(),
  /** The worker's prefill throughput (measured or configured), tokens/s, for region-aware selection. */
  prefillTokensPerSec: z.number().positive().max(1e9).optional(),
  /**
   * The HiCache storage backend (L3) the worker is attached to (/server_info
   * `hicache_storage_backend` and its extra config; services/relay/worker-info.ts): workers naming the
   * same one share it, and the index keeps an approximate view of it (src/routing-index/storage-views.ts).
   * Absent: none.
   */
  hicacheStorage: z.string().min(1).max(256).optional(),
  /**
   * The worker takes its media embeddings from encoder servers: /server_info `language_only`
   * (SGLang's EPD, `--language-only --encoder-urls …`: server_args.py L2481-2510 @9d147fd). The
   * worker itself posts media to its encoders; they publish no KV events and are never routing
   * targets. Absent: the worker encodes media itself.
   */
  languageOnly: z.literal(true).optional(),
  /**
   * The worker's role in a prefill/decode disaggregated pool: /server_info `disaggregation_mode`
   * (SGLang `--disaggregation-mode null|prefill|decode`, python/sglang/srt/server_args.py L2434 @9d147fd).
   * Absent: "null", a unified worker.
   */
  disaggregationMode: DisaggregationModeSchema.optional(),
  /**
   * A prefill worker's bootstrap server port (/server_info `disaggregation_bootstrap_port`, SGLang's
   * default 8998, server_args.py L2445): the edge sends it to both sides as `bootstrap_port`.
   */
  bootstrapPort: z.number().int().min(1).max(65535).optional(),
  /**
   * The worker's attention-DP size (/server_info `dp_size` with `enable_dp_attention`) and which
   * rank's KV event stream this session carries (SGLang publishes each rank on port base + rank).
   * With `dpSize` > 1 each rank is its own routing target (src/routing-index/rank-target.ts), and
   * the relay connects with `&rank=<rank>`. Absent: one rank, today's single-rank worker.
   */
  dpSize: z.number().int().min(1).max(1024).optional(),
  dpRank: z.number().int().min(0).max(1023).optional(),
});
export type RelayHello = z.infer<typeof RelayHelloSchema>;

/**
 * The cache tier a block lives in, by SGLang's StorageMedium name (disaggregation/kv_events.py
 * @9d147fd L82-88). Only the tiers SGLang reports are carried: its HiCache emits GPU and CPU_PINNED
 * (host memory); DISK and EXTERNAL are declared there but never sent. Absent on an event or dump
 * row: GPU, what a relay without tiers sends.
 */
export const KV_TIERS = ["GPU", "CPU_PINNED"] as const;
export const KvTierSchema = z.enum(KV_TIERS);
export type KvTier = z.infer<typeof KvTierSchema>;
/** The tier below the GPU: blocks there are loaded back before use (src/selection/tier-cost.ts). */
export const HOST_TIER: KvTier = "CPU_PINNED";

export const StoredBlockSchema = z.object({ h: engineHash, l: localHash });
export const DumpBlockSchema = z.object({ h: engineHash, p: engineHash.nullable(), l: localHash, tier: KvTierSchema.optional() });

export const RelayEventSchema = z.discriminatedUnion("t", [
  z.object({ t: z.literal("stored"), parent: engineHash.nullable(), blocks: z.array(StoredBlockSchema).min(1), tier: KvTierSchema.optional() }),
  z.object({
    t: z.literal("removed"),
    hashes: z.array(engineHash).min(1),
    tier: KvTierSchema.optional(),
    /**
     * The relay's own removal of blocks the engine stored again elsewhere (under another parent, or
     * in another shard's chain): the engine evicted nothing, so the worker's cache is no fuller
     * (block-views.ts cacheFull). Absent: the engine removed them.
     */
    moved: z.literal(true).optional(),
  }),
  z.object({ t: z.literal("cleared") }),
]);
export type RelayEvent = z.infer<typeof RelayEventSchema>;

export const RelayDumpSchema = z.object({
  type: z.literal("dump"),
  epoch: z.number().int().min(0),
  /** Last engine sequence number folded into this dump (-1 when none yet). */
  seq: z.number().int().min(-1),
  blocks: z.array(DumpBlockSchema).max(MAX_BLOCKS_PER_MESSAGE),
  /**
   * The relay lost history (its worker's replay buffer no longer reached back): the view may hold
   * blocks the worker evicted meanwhile. The index marks the worker approximate until a dump
   * without this flag or a `cleared` event.
   */
  approximate: z.boolean().optional(),
  /**
   * Blocks of this dump still to come, as `stored` events right after it (a dump larger than one
   * message): until they have arrived the index holds part of the worker's blocks and does not
   * report it synced. Absent: the dump is complete (and what an index that predates the field
   * ignores).
   */
  continues: z.number().int().min(0).optional(),
});
export type RelayDump = z.infer<typeof RelayDumpSchema>;

export const RelayEventsSchema = z.object({
  type: z.literal("events"),
  epoch: z.number().int().min(0),
  /** Engine batch sequence number these events came from. */
  seq: z.number().int().min(0),
  events: z.array(RelayEventSchema).max(MAX_BLOCKS_PER_MESSAGE),
});
export type RelayEvents = z.infer<typeof RelayEventsSchema>;

export const RelayStatusSchema = z.object({
  type: z.literal("status"),
  epoch: z.number().int().min(0),
  status: WorkerStatusSchema,
  reason: z.string().max(512).optional(),
});

export const RelayPingSchema = z.object({ type: z.literal("ping"), t: z.number() });

export const RelayMessageSchema = z.discriminatedUnion("type", [
  RelayHelloSchema,
  RelayDumpSchema,
  RelayEventsSchema,
  RelayStatusSchema,
  RelayPingSchema,
]);
export type RelayMessage = z.infer<typeof RelayMessageSchema>;

/** index → relay. Unknown keys are dropped (a newer index may send more). */
export const IndexToRelaySchema = z.discriminatedUnion("type", [
  z.object({
    type: z.literal("welcome"),
    /** The socket id: a worker id (<= 128) or, for a DP rank, `<workerId>#<rank>` (rank < 1024, rank-target.ts). */
    workerId: z.string().min(1).max(128 + "#".length + String(1024 - 1).length),
    epoch: z.number().int().min(0),
    poolBlockSize: z.number().int().min(1).max(4096),
    /** How many shard objects the pool's block index is split into (absent = 1; docs/scale.md). */
    shards: z.number().int().min(1).max(MAX_SHARDS).optional(),
    /** Which shard this socket feeds (absent = 0). */
    shard: z.number().int().min(0).max(MAX_SHARDS - 1).optional(),
  }),
  z.object({ type: z.literal("ack"), seq: z.number().int() }),
  z.object({ type: z.literal("resync"), reason: z.string().max(4096) }),
  z.object({
    type: z.literal("error"),
    message: z.string().max(4096),
    /**
     * With a hello refused as older than the life the pool holds, once the index has ended that
     * life (no relay of it connected): its epoch, so the relay can say hello above it.
     */
    indexEpoch: z.number().int().min(0).optional(),
  }),
  z.object({ type: z.literal("pong"), t: z.number() }),
]);
export type IndexToRelay = z.infer<typeof IndexToRelaySchema>;
/** The message types a relay knows; a frame of another type is a newer index's, and is ignored. */
export const INDEX_TO_RELAY_TYPES: ReadonlySet<string> = new Set(IndexToRelaySchema.options.map((o) => o.shape.type.value));

export function localHashToHex(h: bigint): string {
  return h.toString(16).padStart(16, "0");
}
export function hexToLocalHash(s: string): bigint {
  return BigInt("0x" + s);
}
