/**
 * The incremental path's sampled checks, counted per kind for this isolate: a `KVEDGE_TURN_CHECK_RATE`
 * share of requests also computes each reused stage the full way and compares (parse.ts,
 * chat/exactness-check.ts; the render's own check is the turn chain's: its `checks` and
 * `mismatches`). A mismatch logs one `exactness_mismatch` line (its kind and sizes, never content),
 * is counted here (GET /admin/edge-caches, `/metrics`), drops the cache entries that gave the wrong
 * piece, and the request goes on with the full path's result.
 */

/** What a sampled check compared: a stage's reused result against the same stage run whole. */
export const EXACTNESS_KINDS = [
  /** A held body's text (turn chain) against decoding the body's bytes whole. */
  "body_prefix",
  /** Reused validated messages (turn chain) against parsing the body whole. */
  "parse",
  /** Token ids from the prompt-prefix cache (its pieces and the partial last block's ids) against encoding the whole prompt. */
  "prompt_ids",
  /** Block hashes from the prompt-prefix cache against hashing the whole prompt's ids. */
  "block_hashes",
  /** A media request's view length and block hashes (kept views) against expanding and hashing it whole. */
  "view_hashes",
  /** The /generate body from cached escaping against JSON.stringify of the body. */
  "generate_body",
  /** A salted chat request's namespaced block hashes (runs kept per cached hash piece) against namespacing its whole plain hashes. */
  "routed_hashes",
  /** A media request's items and their routed forms (earlier turns' kept per item) against identifying and laying out every item again. */
  "routed_items",
] as const;

export type ExactnessKind = (typeof EXACTNESS_KINDS)[number];

/** Checks made and mismatches found, per kind. */
export type ExactnessStats = Record<ExactnessKind | "render", { checks: number; mismatches: number }>;

const counts = new Map<ExactnessKind, { checks: number; mismatches: number }>(EXACTNESS_KINDS.map((k) => [k, { checks: 0, mismatches: 0 }]));

/** Whether this request's stage is checked: a `checkRate` share (0–1) of calls (`random`: tests draw their own). */
export function sampledCheck(checkRate: number, random: () => number = Math.random): boolean {
  return checkRate > 0 && random() < checkRate;
}

/** One sampled check of `kind` made. */
export function countCheck(kind: ExactnessKind): void {
  counts.get(kind)!.checks++;
}

/**
 * A sampled check of `kind` found the incremental result different from the full one: counted and
 * logged (`detail`: sizes and counts only, no request content).
 */
export function countMismatch(kind: ExactnessKind, detail: Readonly<Record<string, number>> = {}): void {
  counts.get(kind)!.mismatches++;
  console.warn(JSON.stringify({ event: "exactness_mismatch", kind, ...detail }));
}

/** Every kind's counts, the render's taken from the turn chain's stats. */
export function exactnessStats(render: { checks: number; mismatches: number }): ExactnessStats {
  const out = { render: { checks: render.checks, mismatches: render.mismatches } } as ExactnessStats;
  for (const [k, c] of counts) out[k] = { ...c };
  return out;
}
