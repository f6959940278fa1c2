/** Relay configuration (zod is the source of truth; the CLI maps its flags onto this). */
import { z } from "zod";
import { parseRelayCredential } from "../../src/relay-wire/relay-auth.ts";

/**
 * Most blocks in one dump message. A block's largest encoding is 130 B: a continuation `stored`
 * event (index-session.ts sendDump) with a 20-character int64 hash and parent and the `CPU_PINNED`
 * tier, plus its comma (a `dump` row takes 99 B). 60 000 of them are 7.8 MB, 7 % under
 * MAX_RELAY_MESSAGE_BYTES (8 MiB), which the index refuses to exceed.
 */
export const MAX_DUMP_CHUNK_BLOCKS = 60_000;

const wsUrl = z
  .string()
  .url()
  .transform((s) => s.replace(/^http(s?):/, "ws$1:"))
  .refine((s) => /^wss?:\/\//.test(s), "index URL must be ws://, wss://, http:// or https://");

export const RelayOptionsSchema = z.object({
  /** The worker's SGLang HTTP server as the relay reaches it. */
  workerUrl: z.string().url(),
  /** The index's base URL (`/v1/relay` is appended when no path is given). */
  indexUrl: wsUrl,
  workerId: z.string().min(1).max(128).regex(/^[A-Za-z0-9._:-]+$/),
  /** Model pool name; defaults to the worker's served_model_name. */
  model: z.string().min(1).max(256).optional(),
  /**
   * This worker's relay credential `kvr1.<key id>.<key>` (issued by `kvedge relay-key issue`, bound
   * to this worker id and advertised URL); each connect mints a fresh signed token from it
   * (src/relay-wire/relay-auth.ts). The pool secret never reaches a relay host.
   */
  credential: z.string().refine((s) => parseRelayCredential(s) !== null, "relay credential must look like kvr1.<key id>.<64 hex digits>"),
  /**
   * The worker's SGLang `--api-key` (the edge's `workerApiKey` for this worker), sent as a bearer on
   * /server_info and /flush_cache. Read from the environment or a file by the CLI, never argv.
   */
  workerApiKey: z.string().min(1).max(4096).optional(),
  /** Worker URL announced to the index (as the edge should reach it); defaults to workerUrl. */
  advertiseUrl: z.string().url().optional(),
  /** Expected block size: refuse to start when the worker's page size differs. */
  blockSize: z.number().int().min(1).max(4096).optional(),
  /** Override the KV event PUB endpoint (else from /server_info kv_events). */
  kvEndpoint: z.string().min(1).optional(),
  /** Override the replay ROUTER endpoint; null disables replay. Else from kv_events_config. */
  replayEndpoint: z.string().min(1).nullable().optional(),
  topic: z.string().optional(),
  /**
   * KV events: "required" refuses to start when the worker publishes none; "off" never connects the
   * ZMQ feed (approximate mode: hello says `kvEvents: false`, dumps stay empty); "auto" follows the
   * worker's /server_info and falls back to approximate mode (logged) when it has no kv_events.
   */
  kvEvents: z.enum(["required", "off", "auto"]).default("required"),
  /** Region the worker runs in (a KVEDGE_REGIONS name), sent in hello for region-aware selection. */
  region: z.string().min(1).max(64).regex(/^[A-Za-z0-9._-]+$/).optional(),
  /** The worker's prefill throughput in tokens/s, sent in hello (else the pool's default applies). */
  prefillTokensPerSec: z.number().positive().max(1e9).optional(),
  /**
   * The served model's directory (config.json + processor configs): with it the relay derives the
   * worker contract and publishes it at hello (only if the worker accepts caller mm_hashes).
   */
  modelDir: z.string().min(1).optional(),
  dpRank: z.number().int().min(0).default(0),
  healthIntervalMs: z.number().int().min(10).default(500),
  /** Real SGLang's /health generates one token and sleeps ≥ 1 s: keep this well above that. */
  healthTimeoutMs: z.number().int().min(10).default(5000),
  healthFailures: z.number().int().min(1).default(2),
  serverInfoTimeoutMs: z.number().int().min(10).default(5000),
  /** How long startRelay waits for the worker's /server_info to answer at all. */
  startupTimeoutMs: z.number().int().min(0).default(60_000),
  replayTimeoutMs: z.number().int().min(10).default(2000),
  flushIntervalMs: z.number().int().min(0).default(5),
  flushBlocks: z.number().int().min(1).default(1000),
  backoffBaseMs: z.number().int().min(1).default(100),
  backoffCapMs: z.number().int().min(1).default(5000),
  welcomeTimeoutMs: z.number().int().min(10).default(10_000),
  dumpChunkBlocks: z.number().int().min(1).max(MAX_DUMP_CHUNK_BLOCKS).default(50_000),
  pingIntervalMs: z.number().int().min(100).default(30_000),
  /** No pong this long after a ping: the index path is dead, reconnect (index-session.ts DEFAULT_PONG_TIMEOUT_MS). */
  pongTimeoutMs: z.number().int().min(100).default(20_000),
  /**
   * Where the relay keeps its view of the worker (state-file.ts): resumed at start, so a restart
   * replays only the batches it missed. Unset: start from the worker's replay buffer alone.
   */
  stateFile: z.string().min(1).optional(),
  /** How often the view is saved while it changes (and always on shutdown). */
  stateIntervalMs: z.number().int().min(100).default(5000),
  /** A view larger than this is not saved (the previous file stays); also the largest file read. */
  stateMaxBytes: z.number().int().min(1024).default(128 * 1024 * 1024),
  /**
   * When the worker's replay buffer cannot cover what the relay missed: "approximate" keeps the
   * relay's view and marks the worker approximate in the index until its cache is cleared or it
   * restarts; "flush" also asks the worker to drop its cache (SGLang POST /flush_cache, retried
   * while it is busy), which makes the view exact at once at the cost of every cached prefix.
   */
  onHistoryLost: z.enum(["approximate", "flush"]).default("approximate"),
  flushRetryMs: z.number().int().min(10).default(2000),
});

export type RelayOptionsInput = z.input<typeof RelayOptionsSchema>;
export type RelayOptions = z.output<typeof RelayOptionsSchema>;
