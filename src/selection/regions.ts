/**
 * Regions for the TTFT cost (ttft-cost.ts): with workers in several regions, the round trip from
 * this edge to each worker is part of its estimated time to first token, so a cold request lands in
 * the nearest region with a healthy, unloaded worker and a long cached prefix far away wins once the
 * prefill it saves exceeds the extra round trip.
 *
 * Configuration (`KVEDGE_REGIONS`, JSON): the edge's region (fixed, or from request.cf.colo via a
 * colo map), an RTT matrix, and the TTFT estimate's tunables. Without it, or while the edge's region
 * is unknown, no round trip is counted: cost "ttft" scores every worker as if next door, and cost
 * "blocks" applies Dynamo's block cost (selection.ts).
 */
import { z } from "zod";
import { DEFAULT_TTFT_PARAMS } from "./ttft-cost.ts";

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
  defaultPrefillTokensPerSec: z.number().positive().max(1e9).default(DEFAULT_TTFT_PARAMS.defaultPrefillTokensPerSec),
  /** Time-to-first-token cost of one active decode block on a worker (batch interference), ms. */
  decodeMsPerBlock: z.number().min(0).max(1_000).default(DEFAULT_TTFT_PARAMS.decodeMsPerBlock),
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

/**
 * Whether resolveEdgeRegion reads the colo: a colo map and no fixed region. Otherwise the edge need
 * not read request.cf.colo at all (EdgeConfig.regionsByColo).
 */
export function regionFromColo(cfg: RegionsConfig): boolean {
  return cfg.self === undefined && Object.keys(cfg.colos).length > 0;
}

/** Where this edge is: the configured region, else its colo's region (regionFromColo), else null (regions unused). */
export function resolveEdgeRegion(cfg: RegionsConfig, colo: string | null | undefined): string | null {
  if (cfg.self !== undefined) return cfg.self;
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
