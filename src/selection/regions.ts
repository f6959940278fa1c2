/**
 * Region-aware selection: with workers in several regions the cheapest worker is the one with the
 * lowest estimated time to first token as the client at this edge sees it,
 *
 *   ttft(w) = rtt(edge region, w's region)
 *           + (w's active prefill tokens + uncached tokens of this request) / w's prefill rate
 *           + decodeMsPerBlock × (w's active decode blocks + this request's new blocks)
 *
 * where uncached = max(0, ISL − overlap × block size). Cache overlap is worth exactly the prefill
 * time it saves, so it is traded against extra round-trip time and queueing in the same unit:
 * a cold request lands in the nearest region with a healthy, unloaded worker; a long cached prefix
 * far away wins once the prefill it saves exceeds the extra round trip.
 *
 * Configuration (`KVEDGE_REGIONS`, JSON): the edge's region (fixed, or from request.cf.colo via a
 * colo map), an RTT matrix, and defaults for workers that report no prefill rate. Without it the
 * default block-count cost of selection.ts applies unchanged.
 */
import { z } from "zod";
import type { Candidate, Scored } from "./selection.ts";

const RegionName = z.string().min(1).max(64).regex(/^[A-Za-z0-9._-]+$/);

export const RegionsConfigSchema = z.strictObject({
  /** This edge's region when fixed by configuration (single-region deploys, local development). */
  self: RegionName.optional(),
  /** Cloudflare colo (request.cf.colo, an IATA code) → region. */
  colos: z.record(z.string(), RegionName).default({}),
  /** Round-trip time between regions in ms; one direction is enough (the other is assumed equal). */
  rttMs: z.record(RegionName, z.record(RegionName, z.number().min(0).max(10_000))).default({}),
  /** Round trip assumed for a pair missing from the table (and for workers without a region). */
  defaultRttMs: z.number().min(0).max(10_000).default(150),
  /** Prefill throughput assumed for workers that report none (tokens/s). */
  defaultPrefillTokensPerSec: z.number().positive().max(1e9).default(10_000),
  /** Time-to-first-token cost of one active decode block on a worker (batch interference), ms. */
  decodeMsPerBlock: z.number().min(0).max(1_000).default(0.01),
});
export type RegionsConfig = z.infer<typeof RegionsConfigSchema>;

/** Parses the `KVEDGE_REGIONS` var; undefined/empty → null (regions off). Throws on bad config. */
export function parseRegionsVar(raw: string | undefined | null): RegionsConfig | null {
  if (raw === undefined || raw === null || raw.trim() === "") return null;
  let json: unknown;
  try {
    json = JSON.parse(raw);
  } catch {
    throw new RangeError("KVEDGE_REGIONS is not valid JSON");
  }
  const r = RegionsConfigSchema.safeParse(json);
  if (!r.success) throw new RangeError(`KVEDGE_REGIONS: ${r.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}`);
  return r.data;
}

/** Where this edge is: the configured region, else its colo's region, else null (regions unused). */
export function resolveEdgeRegion(cfg: RegionsConfig, colo: string | null | undefined): string | null {
  if (cfg.self) return cfg.self;
  if (colo && Object.hasOwn(cfg.colos, colo)) return cfg.colos[colo]!;
  return null;
}

/** Round trip between two regions (null = unknown region → the default). */
export function rttMs(cfg: RegionsConfig, a: string | null, b: string | null): number {
  if (a === null || b === null) return cfg.defaultRttMs;
  const ab = Object.hasOwn(cfg.rttMs, a) ? cfg.rttMs[a]! : undefined;
  if (ab && Object.hasOwn(ab, b)) return ab[b]!;
  const ba = Object.hasOwn(cfg.rttMs, b) ? cfg.rttMs[b]! : undefined;
  if (ba && Object.hasOwn(ba, a)) return ba[a]!;
  return a === b ? 0 : cfg.defaultRttMs;
}

/** Where a candidate runs and how fast it prefills (from its relay's hello). */
export interface Placement {
  region: string | null;
  prefillTokensPerSec: number | null;
}

export interface TtftBreakdown {
  rttMs: number;
  queueMs: number;
  prefillMs: number;
  decodeLoadMs: number;
  totalMs: number;
}

export function estimateTtft(
  cfg: RegionsConfig,
  edgeRegion: string,
  c: Candidate,
  p: Placement,
  isl: number,
  blockSize: number,
): TtftBreakdown {
  const rate = p.prefillTokensPerSec ?? cfg.defaultPrefillTokensPerSec;
  const uncached = Math.max(0, isl - c.overlapBlocks * blockSize);
  const rtt = rttMs(cfg, edgeRegion, p.region);
  const queueMs = (Math.max(0, c.activePrefillTokens) / rate) * 1000;
  const prefill = (uncached / rate) * 1000;
  // New decode blocks: the request's, minus a leading run the worker's active requests already hold.
  const requestBlocks = Math.max(0, Math.ceil(isl / blockSize) - (c.sharedActiveBlocks ?? 0));
  const decodeLoadMs = cfg.decodeMsPerBlock * (c.activeDecodeBlocks + requestBlocks);
  return { rttMs: rtt, queueMs, prefillMs: prefill, decodeLoadMs, totalMs: rtt + queueMs + prefill + decodeLoadMs };
}

/** Scores candidates by estimated TTFT in ms (lower wins); same shape as scoreCandidates. */
export function scoreCandidatesByTtft(input: {
  candidates: readonly Candidate[];
  placements: readonly Placement[];
  isl: number;
  blockSize: number;
  edgeRegion: string;
  config: RegionsConfig;
}): Scored[] {
  return input.candidates.map((c, i) => ({
    slot: c.slot,
    cost: estimateTtft(input.config, input.edgeRegion, c, input.placements[i]!, input.isl, input.blockSize).totalMs,
    overlapBlocks: c.overlapBlocks,
  }));
}
