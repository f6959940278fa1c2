/**
 * Decode service configuration. zod is the source of truth; defaults give a service bound to
 * 127.0.0.1 on an ephemeral port. A bearer token is required unless `allowNoAuth` says otherwise
 * (local experiments only).
 */
import os from "node:os";
import { z } from "zod";
import { SafeFetchPolicySchema } from "../../src/media/safe-fetch.ts";
import { MAX_URL_FRESH_SEC } from "../../src/media/store-result.ts";
import { DEFAULT_PROBE_MEMORY_BYTES } from "./ffprobe-run.ts";

export const DecodeServiceOptionsSchema = z
  .strictObject({
    host: z.string().min(1).default("127.0.0.1"),
    port: z.number().int().min(0).max(65535).default(0),
    /** The edge's bearer token (KVEDGE_DECODE_TOKEN; the edge's DECODE_TOKEN): as long as the edge's other secrets. */
    token: z.string().min(32, "the decode token (KVEDGE_DECODE_TOKEN) must be at least 32 characters").nullable().default(null),
    allowNoAuth: z.boolean().default(false),
    decoder: z.enum(["native", "wasm", "auto"]).default("auto"),
    ffprobePath: z.string().min(1).default("ffprobe"),
    /** Probes running at once (native processes or wasm threads); default = cores. */
    concurrency: z.number().int().min(1).max(256).default(() => os.availableParallelism()),
    /**
     * Native decoder: ffprobe processes kept started and waiting for a probe (ffprobe-pool.ts),
     * about 10 MiB of private memory each while they wait. null: min(concurrency, 16); 0: none,
     * every probe starts its own ffprobe.
     */
    warmProbes: z.number().int().min(0).max(64).nullable().default(null),
    /** Probes allowed to wait for a slot before the service answers 503. */
    maxQueue: z.number().int().min(0).default(256),
    /** Downloads of client URLs running at once, and how many may wait before the service answers 503. */
    maxDownloads: z.number().int().min(1).max(1024).default(8),
    maxDownloadQueue: z.number().int().min(0).max(100_000).default(64),
    /**
     * Largest fraction of the probe slots, the download slots and each queue one client holds
     * (fair-slots.ts; clients as the edge labels them). 1: no cap (a freed slot still goes to the waiting client holding the fewest).
     */
    clientShare: z.number().gt(0).max(1).default(0.5),
    /** Whole request (fetch, store, probe) deadline; the answer is 504 past it. Also node's requestTimeout. */
    requestTimeoutMs: z.number().int().positive().default(120_000),
    /** A download that delivers no bytes for this long is abandoned. */
    idleTimeoutMs: z.number().int().positive().default(15_000),
    /**
     * Largest media the wasm decoder probes: each thread holds the whole file (in its in-memory
     * file system, outside the wasm heap, which probeMemoryBytes caps), so larger media are not
     * probed by it (routing falls back).
     */
    wasmMaxMediaBytes: z.number().int().positive().default(192 * 1024 * 1024),
    /** The regional media store (content-addressed by SHA-256; LRU by bytes per client, media-store.ts). */
    store: z
      .strictObject({
        /** Directory of the stored files, re-indexed at start (default: a fresh temp directory, removed on close). */
        dir: z.string().min(1).nullable().default(null),
        maxTotalBytes: z.number().int().positive().default(4 * 1024 * 1024 * 1024),
        /** Most items stored at once (also bounds the re-index of a directory at start). */
        maxItems: z.number().int().positive().max(10_000_000).default(100_000),
        /**
         * Largest fraction of maxTotalBytes one client label's stored media may hold (media-store.ts);
         * past it, that client's own least recently used items go. 1: no quota.
         */
        clientShare: z.number().gt(0).max(1).default(0.25),
        /**
         * How long an item the edge stored or asked about (`POST /v1/store`, `/v1/store/held`) is kept from eviction, so the
         * edge forwards it without asking while more than its URL lifetime is left (media-store.ts
         * lease). 0: no leases (the edge asks every turn).
         */
        leaseSec: z.number().int().min(0).max(3_600).default(600),
        /** Most of maxTotalBytes, of maxItems and of each client's share that leases hold at once. */
        leaseShare: z.number().min(0).max(0.5).default(0.25),
        /** HMAC key shared with the edge for `/v1/media/<digest>?exp&sig` (null: the store serves nothing). */
        urlKey: z.string().min(32).nullable().default(null),
        /**
         * A signed URL is served only to the worker it names, proven by its media credential
         * (Basic auth, src/media/signed-url.ts workerMediaCredential). false: anyone holding the URL.
         */
        requireWorkerCredential: z.boolean().default(true),
        /** Signatures claiming a longer life than this are refused. */
        maxUrlTtlSec: z.number().int().positive().default(900),
      })
      .prefault({}),
    /** Static name → addresses answers consulted before DNS (tests; split-horizon names). Still SSRF-checked. */
    hostMap: z.record(z.string(), z.array(z.string().min(1)).min(1)).default({}),
    /** Largest raw-bytes request body. */
    maxBodyBytes: z.number().int().positive().default(256 * 1024 * 1024),
    /** Media fetched by URL (SSRF policy, byte and time caps, local-dev allowlist). */
    fetch: SafeFetchPolicySchema.extend({
      maxBytes: z.number().int().positive().default(256 * 1024 * 1024),
      timeoutMs: z.number().int().positive().default(30_000),
    }).prefault({}),
    probeTimeoutMs: z.number().int().positive().default(60_000),
    /** Data-segment cap of each native ffprobe (ffprobe-run.ts memoryCapped), and wasm-heap cap of each wasm thread (wasm-core.ts withMemoryMax). */
    probeMemoryBytes: z.number().int().min(64 * 1024 * 1024).default(DEFAULT_PROBE_MEMORY_BYTES),
    /**
     * Longest time the store reuses a URL's bytes on the origin's word alone (its Cache-Control
     * max-age / s-maxage or Expires, http-freshness.ts) before asking it again; 0: every use is a
     * conditional request, as for responses that state no freshness.
     */
    maxUrlFreshSec: z.number().int().min(0).max(MAX_URL_FRESH_SEC).default(3_600),
    /** Entries in each cache (results by content hash; URL → validators + content hash). */
    cacheEntries: z.number().int().min(0).default(10_000),
    tmpDir: z.string().min(1).default(() => os.tmpdir()),
    verbose: z.boolean().default(false),
  })
  .refine((o) => o.token !== null || o.allowNoAuth, "a token is required (or set allowNoAuth for local experiments)");

export type DecodeServiceOptions = z.output<typeof DecodeServiceOptionsSchema>;
export type DecodeServiceOptionsInput = z.input<typeof DecodeServiceOptionsSchema>;
