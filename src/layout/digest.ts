/**
 * Canonical contract digest and the cohort rule. Canonical JSON: object keys sorted (UTF-16 code
 * unit order), no whitespace, undefined members dropped, numbers in ECMAScript shortest
 * round-trip form with -0 written as 0 (so 2 and 2.0 are the same value and the same text),
 * non-finite numbers rejected. Digest = blake3 over a domain tag + that text.
 */
import { blake3Hex } from "../util/hash.ts";
import type { WorkerContract } from "./contract.ts";

export function canonicalJson(value: unknown): string {
  if (value === null) return "null";
  switch (typeof value) {
    case "boolean":
      return value ? "true" : "false";
    case "string":
      return JSON.stringify(value);
    case "number":
      if (!Number.isFinite(value)) throw new TypeError("canonicalJson: non-finite number");
      return Object.is(value, -0) ? "0" : String(value);
    case "object": {
      if (Array.isArray(value)) return "[" + value.map((v) => canonicalJson(v === undefined ? null : v)).join(",") + "]";
      const obj = value as Record<string, unknown>;
      const keys = Object.keys(obj).filter((k) => obj[k] !== undefined).sort();
      return "{" + keys.map((k) => JSON.stringify(k) + ":" + canonicalJson(obj[k])).join(",") + "}";
    }
    default:
      throw new TypeError(`canonicalJson: unsupported ${typeof value}`);
  }
}

const DIGEST_TAG = "kvedge/worker-contract/v1\n";

/** blake3 hex of the canonical contract. Requires `await initHashing()` first. */
export function contractDigest(contract: WorkerContract): string {
  return blake3Hex(DIGEST_TAG + canonicalJson(contract));
}

/** Cohort rule on digests: all present and equal → that digest, else null (also for an empty cohort). */
export function cohortDigest(digests: readonly (string | null | undefined)[]): string | null {
  const first = digests[0];
  if (!first) return null;
  for (const d of digests) if (d !== first) return null;
  return first;
}

/** Cohort rule on contracts: exact media routing only when every member publishes the same contract. */
export function cohortContract(members: readonly (WorkerContract | null | undefined)[]): WorkerContract | null {
  const digests = members.map((m) => (m ? contractDigest(m) : null));
  return cohortDigest(digests) === null ? null : members[0]!;
}
