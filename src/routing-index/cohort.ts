/**
 * Worker contracts and the pool's cohort: exact media routing only while every worker that is up
 * publishes the same valid contract (docs/layout.md, "Worker contract").
 */
import { cohortEligibility, contractDigest, parseWorkerContract, type CohortResult } from "../layout/index.ts";
import { isRecord } from "../util/is-record.ts";

/** Digest of a published contract, or null when it does not parse (requires initHashing()). */
export function contractDigestOf(published: unknown): string | null {
  if (!isRecord(published)) return null;
  const r = parseWorkerContract(published);
  return r.ok ? contractDigest(r.contract) : null;
}

/** The cohort verdict over the workers' published contracts. Recomputed on demand; cheap (a few workers). */
export function poolCohort(workers: readonly { status: string; contract: unknown }[]): CohortResult {
  const up = workers.filter((w) => w.status === "up");
  return cohortEligibility(up.map((w) => (isRecord(w.contract) ? w.contract : null)));
}
