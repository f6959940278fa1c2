/**
 * The relay's persisted view of its worker: the block set and the last engine batch folded into it,
 * so a restarted relay resumes from that batch and replays only what it missed (docs/relay.md
 * "Restarts"). One JSON file, replaced atomically (write a temp file, fsync it, rename over the old
 * one, fsync the directory): a crash leaves either the old file or the new one, never a torn one.
 * The file is always a consistent pair (blocks, seq), so an old file is still a correct place to
 * resume from; a view too large for `maxBytes` is not written (the previous file stays).
 */
import { createHash } from "node:crypto";
import { closeSync, fsyncSync, openSync, readFileSync, renameSync, statSync, writeSync } from "node:fs";
import { dirname } from "node:path";
import { z } from "zod";
import { DumpBlockSchema } from "../../src/relay-wire/relay-protocol.ts";

export const STATE_VERSION = 1;

export const RelayStateSchema = z.object({
  v: z.literal(STATE_VERSION),
  workerId: z.string().min(1),
  model: z.string().min(1),
  blockSize: z.number().int().min(1),
  /** The relay's epoch for this worker life (kept when the restarted relay proves the same life). */
  epoch: z.number().int().min(0),
  /** The worker's reported start time, when it reports one (a different one: another process). */
  startTimeMs: z.number().nullable(),
  /** Last engine batch folded into `blocks` (-1: none). */
  lastSeq: z.number().int().min(-1),
  /** SHA-256 of that batch's payload: the replayed batch must match it to prove the same stream. */
  lastBatchSha256: z.string().regex(/^[0-9a-f]{64}$/).nullable(),
  /** Why the view was already approximate when saved (null: exact). */
  approximate: z.string().max(512).nullable(),
  savedAt: z.number(),
  blocks: z.array(DumpBlockSchema),
});
export type RelayState = z.infer<typeof RelayStateSchema>;

export function payloadDigest(payload: Uint8Array): string {
  return createHash("sha256").update(payload).digest("hex");
}

export type SaveResult = { ok: true; bytes: number } | { ok: false; reason: "too_large"; bytes: number };

/** Writes `state` to `path` atomically; refuses (keeping the old file) beyond `maxBytes`. */
export function saveRelayState(path: string, state: RelayState, maxBytes: number): SaveResult {
  const text = JSON.stringify(state);
  const bytes = Buffer.byteLength(text);
  if (bytes > maxBytes) return { ok: false, reason: "too_large", bytes };
  const tmp = `${path}.tmp-${process.pid}`;
  const fd = openSync(tmp, "w", 0o600);
  try {
    writeSync(fd, text);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, path);
  // The rename is durable only once the directory entry is.
  const dirFd = openSync(dirname(path), "r");
  try {
    fsyncSync(dirFd);
  } finally {
    closeSync(dirFd);
  }
  return { ok: true, bytes };
}

export type LoadResult =
  | { ok: true; state: RelayState }
  | { ok: false; reason: "missing" | "too_large" | "unreadable" | "invalid"; detail?: string };

/** Reads and validates a state file (never throws; a bad file is reported, not trusted). */
export function loadRelayState(path: string, maxBytes: number): LoadResult {
  let size: number;
  try {
    size = statSync(path).size;
  } catch {
    return { ok: false, reason: "missing" };
  }
  if (size > maxBytes) return { ok: false, reason: "too_large", detail: `${size} bytes` };
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, "utf8"));
  } catch (e) {
    return { ok: false, reason: "unreadable", detail: e instanceof Error ? e.message : String(e) };
  }
  const r = RelayStateSchema.safeParse(raw);
  if (!r.success) return { ok: false, reason: "invalid", detail: r.error.issues[0]?.message };
  return { ok: true, state: r.data };
}


/**
 * How a saved state relates to the worker's replay buffer, from the buffer's first batch at or
 * after the saved seq (`first`: its seq and payload digest; null: the buffer is empty):
 * - "continue": the buffer still holds the saved batch with the same payload — same stream, replay
 *   the rest: the view is exact again;
 * - "gap": the buffer starts after the saved seq — batches were missed (or, without a start time to
 *   compare, this may be another process): resume on the saved view, marked approximate;
 * - "other": the buffer holds that seq with another payload, or nothing at all, or the worker
 *   reports another start time — a different process: discard the state.
 */
export function resumeVerdict(
  saved: Pick<RelayState, "lastSeq" | "lastBatchSha256" | "startTimeMs">,
  workerStartTimeMs: number | null,
  first: { seq: number; sha256: string } | null,
): "continue" | "gap" | "other" {
  if (saved.startTimeMs !== null && workerStartTimeMs !== null && saved.startTimeMs !== workerStartTimeMs) return "other";
  if (first === null) return "other";
  if (first.seq < saved.lastSeq) return "other"; // the buffer was asked from lastSeq: a lower seq is another stream
  if (first.seq === saved.lastSeq) return saved.lastBatchSha256 !== null && first.sha256 === saved.lastBatchSha256 ? "continue" : "other";
  return "gap";
}
