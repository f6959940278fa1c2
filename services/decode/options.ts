/**
 * Decode service configuration. zod is the source of truth; defaults give a service bound to
 * 127.0.0.1 on an ephemeral port. A bearer token is required unless `allowNoAuth` says otherwise
 * (local experiments only).
 */
import os from "node:os";
import { z } from "zod";
import { SafeFetchPolicySchema } from "../../src/media/safe-fetch.ts";

export const DecodeServiceOptionsSchema = z
  .strictObject({
    host: z.string().min(1).default("127.0.0.1"),
    port: z.number().int().min(0).max(65535).default(0),
    token: z.string().min(1).nullable().default(null),
    allowNoAuth: z.boolean().default(false),
    decoder: z.enum(["native", "wasm", "auto"]).default("auto"),
    ffprobePath: z.string().min(1).default("ffprobe"),
    /** Probes running at once (native processes or wasm threads); default = cores. */
    concurrency: z.number().int().min(1).max(256).default(() => os.availableParallelism()),
    /** Probes allowed to wait for a slot before the service answers 503. */
    maxQueue: z.number().int().min(0).default(256),
    /** Largest raw-bytes request body. */
    maxBodyBytes: z.number().int().positive().default(256 * 1024 * 1024),
    /** Media fetched by URL (SSRF policy, byte and time caps, local-dev allowlist). */
    fetch: SafeFetchPolicySchema.extend({
      maxBytes: z.number().int().positive().default(256 * 1024 * 1024),
      timeoutMs: z.number().int().positive().default(30_000),
    }).prefault({}),
    probeTimeoutMs: z.number().int().positive().default(60_000),
    /** Entries in each cache (results by content hash; URL → validators + content hash). */
    cacheEntries: z.number().int().min(0).default(10_000),
    tmpDir: z.string().min(1).default(() => os.tmpdir()),
    verbose: z.boolean().default(false),
  })
  .refine((o) => o.token !== null || o.allowNoAuth, "a token is required (or set allowNoAuth for local experiments)");

export type DecodeServiceOptions = z.output<typeof DecodeServiceOptionsSchema>;
export type DecodeServiceOptionsInput = z.input<typeof DecodeServiceOptionsSchema>;
