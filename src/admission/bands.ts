/**
 * Priority bands of the admission queue: 0 runs first. OpenAI's `service_tier` values (auto,
 * default, flex, scale, priority; `fast` is shown as priority) and SGLang's integer `priority`
 * (larger runs first unless the worker runs --schedule-low-priority-values-first;
 * python/sglang/srt/server_args.py, sgl-project/sglang) map onto three bands.
 */
import type { ServiceTier } from "../api/openai-schema.ts";

export const BAND_PRIORITY = 0;
export const BAND_DEFAULT = 1;
export const BAND_FLEX = 2;
export const BAND_COUNT = 3;
export const BAND_NAMES = ["priority", "default", "flex"] as const;
export type BandName = (typeof BAND_NAMES)[number];

export interface BandInput {
  serviceTier?: ServiceTier | undefined;
  /** SGLang's request priority: > 0 asks for the priority band, < 0 for flex, 0 for nothing. */
  priority?: number | undefined;
  /** Whether this caller may use the priority band (KVEDGE_ROUTING.admission.openPriority, or an operator key). */
  priorityAllowed: boolean;
}

/**
 * The band a request waits in. A caller not allowed the priority band is served in the default
 * band (as OpenAI serves a priority request as default when it downgrades it); flex is open to all.
 * With both fields, the lower band wins: asking for flex in either is honoured.
 */
export function bandOf(r: BandInput): number {
  const asks: number[] = [];
  if (r.serviceTier !== undefined) asks.push(r.serviceTier === "flex" ? BAND_FLEX : r.serviceTier === "priority" || r.serviceTier === "fast" ? BAND_PRIORITY : BAND_DEFAULT);
  if (r.priority !== undefined && r.priority !== 0) asks.push(r.priority > 0 ? BAND_PRIORITY : BAND_FLEX);
  const asked = asks.length > 0 ? Math.max(...asks) : BAND_DEFAULT;
  return asked === BAND_PRIORITY && !r.priorityAllowed ? BAND_DEFAULT : asked;
}

/** Longest waits: one for every band, or one per band. */
export type BandWaits = number | Readonly<Record<BandName, number>>;

/** The longest a request of `band` waits before it is refused. */
export function bandWaitMs(waits: BandWaits, band: number): number {
  return typeof waits === "number" ? waits : waits[BAND_NAMES[Math.min(BAND_COUNT - 1, Math.max(0, band))]!];
}
