/**
 * The pool's worker registry: one record per worker (in memory; the Durable Object persists the
 * rows), the slot each worker holds in the indexes, the pool block size, relay hellos and their
 * fencing by epoch, status and lastSeen. Knows nothing of blocks, load or routing.
 */
import type { DisaggregationMode, RelayHello, WorkerStatus } from "../relay-wire/relay-protocol.ts";
import { contractDigestOf } from "./cohort.ts";
import { stripTrailing } from "../util/strip-trailing.ts";
import { parseRankTarget, rankClaimProblem, rankTargetId } from "./rank-target.ts";

export interface WorkerRecord {
  workerId: string;
  url: string;
  blockSize: number;
  epoch: number;
  status: WorkerStatus;
  modelName: string;
  contract: unknown;
  contractDigest: string | null;
  kvEvents: boolean;
  /** Stream frames carry deltas (`--incremental-streaming-output`), not cumulative text. */
  incrementalStreaming: boolean;
  lastSeen: number;
  /** Region and prefill rate from the hello (region-aware selection); absent = unknown. */
  region?: string | null;
  prefillTokensPerSec?: number | null;
  /** The worker's KV pool size in tokens from the hello (/server_info max_total_num_tokens); absent = unknown. */
  kvCapacityTokens?: number | null;
  /** Role in a prefill/decode pool from the hello (absent or "null": unified); a prefill's bootstrap port. */
  disaggregationMode?: DisaggregationMode;
  bootstrapPort?: number | null;
  /**
   * An edge could not connect to the worker: no routing to it before this time (ms), while its
   * relay's view and status stay as they are (in memory only: a restarted index forgets it).
   */
  quarantinedUntil?: number;
  /**
   * A DP-attention rank target (`<worker>#<rank>`, rank-target.ts): the worker's DP size from the
   * hello (in memory; the rank itself is read from the target id, so it survives a restore).
   */
  dpSize?: number;
  /** The worker takes media embeddings from encoder servers (hello `languageOnly`; in memory, restated by every hello). */
  languageOnly?: true;
}

/** Whether an edge's failed connect still keeps routing away from the worker at `at` (ms). */
export function isQuarantined(w: Pick<WorkerRecord, "quarantinedUntil">, at: number): boolean {
  return (w.quarantinedUntil ?? 0) > at;
}

/** A registered worker: its record and the slot it holds in the indexes and the load tracker. */
export type SlottedWorker = WorkerRecord & { slot: number };

export type HelloOutcome =
  | {
      ok: true;
      record: WorkerRecord;
      worker: SlottedWorker;
      /** The worker took a slot it did not hold before. */
      added: boolean;
      /** A new worker life (first hello or another epoch): whatever was cached of the old one is void. */
      newLife: boolean;
    }
  | { ok: false; reason: string; /** A stale-epoch refusal: the epoch the pool holds. */ indexEpoch?: number };

export class WorkerRegistry {
  #blockSize: number | null;
  readonly #workers = new Map<string, SlottedWorker>();
  readonly #bySlot: string[] = [];
  readonly #now: () => number;

  constructor(blockSize: number | null, now: () => number = Date.now) {
    this.#blockSize = blockSize;
    this.#now = now;
  }

  get blockSize(): number | null {
    return this.#blockSize;
  }

  /** Sets the pool block size if none is known yet (from configuration, before any worker). */
  adoptBlockSize(blockSize: number): void {
    if (this.#blockSize === null) this.#blockSize = blockSize;
  }

  /** Slots ever handed out and not reused yet (free slots included): the indexes' width. */
  get slotCount(): number {
    return this.#bySlot.length;
  }

  slotOf(workerId: string): number {
    return this.#workers.get(workerId)?.slot ?? -1;
  }

  get(workerId: string): SlottedWorker | undefined {
    return this.#workers.get(workerId);
  }

  /** The worker holding the slot, if any. */
  atSlot(slot: number): SlottedWorker | undefined {
    const id = this.#bySlot[slot];
    return id ? this.#workers.get(id) : undefined;
  }

  all(): SlottedWorker[] {
    return [...this.#workers.values()];
  }

  /** The workers without copying them (hot paths). */
  values(): IterableIterator<SlottedWorker> {
    return this.#workers.values();
  }

  /** The record without its slot (what callers persist and show). */
  record(workerId: string): WorkerRecord | undefined {
    const w = this.#workers.get(workerId);
    if (!w) return undefined;
    const { slot: _slot, ...rec } = w;
    return rec;
  }

  /** Restores a registry row (after a Durable Object restart). Returns the worker and whether it took a new slot. */
  restore(rec: WorkerRecord): { worker: SlottedWorker; added: boolean } {
    const r = this.#upsert(rec);
    if (this.#blockSize === null) this.#blockSize = rec.blockSize;
    return r;
  }

  /** A relay said hello: the record to persist, or a refusal. */
  hello(msg: RelayHello, authenticatedWorkerId: string): HelloOutcome {
    const dpSize = msg.dpSize ?? 1;
    const rankProblem = rankClaimProblem(msg.workerId, msg.dpRank ?? 0, dpSize);
    if (rankProblem !== null) return { ok: false, reason: rankProblem };
    // The edge names the socket by the connect's worker and rank (`<worker>#<rank>` for a DP worker).
    const targetId = rankTargetId(msg.workerId, msg.dpRank ?? 0, dpSize);
    if (targetId !== authenticatedWorkerId) return { ok: false, reason: "worker id does not match the authenticated worker" };
    if (this.#blockSize !== null && msg.blockSize !== this.#blockSize) {
      const who = dpSize > 1 ? `worker ${msg.workerId} rank ${msg.dpRank ?? 0}: ` : "";
      return { ok: false, reason: `${who}block size ${msg.blockSize} differs from the pool's ${this.#blockSize}` };
    }
    const sibling = this.#rankSiblingProblem(msg.workerId, targetId, dpSize, msg.url);
    if (sibling !== null) return { ok: false, reason: sibling };
    const prev = this.#workers.get(targetId);
    if (prev && msg.epoch < prev.epoch) return { ok: false, reason: `stale epoch ${msg.epoch} < ${prev.epoch}`, indexEpoch: prev.epoch };
    if (this.#blockSize === null) this.#blockSize = msg.blockSize;
    const prevEpoch = prev?.epoch;
    // A drain is the operator's word on this worker life: a relay reconnecting to the same life
    // (same epoch, a pool object restart included) keeps it; a new life joins up.
    const keepsDrain = prev !== undefined && prev.epoch === msg.epoch && prev.status === "draining";
    const record: WorkerRecord = {
      workerId: targetId,
      url: stripTrailing(msg.url, "/"),
      blockSize: msg.blockSize,
      epoch: msg.epoch,
      status: keepsDrain ? "draining" : "up",
      modelName: msg.modelName,
      contract: msg.contract ?? null,
      contractDigest: contractDigestOf(msg.contract),
      kvEvents: msg.kvEvents,
      incrementalStreaming: msg.incrementalStreaming ?? false,
      lastSeen: this.#now(),
      region: msg.region ?? null,
      prefillTokensPerSec: msg.prefillTokensPerSec ?? null,
      kvCapacityTokens: msg.kvCapacityTokens ?? null,
      disaggregationMode: msg.disaggregationMode ?? "null",
      bootstrapPort: msg.bootstrapPort ?? null,
      ...(dpSize > 1 ? { dpSize } : {}),
      ...(msg.languageOnly ? { languageOnly: true as const } : {}),
    };
    const { worker, added } = this.#upsert(record);
    return { ok: true, record, worker, added, newLife: prevEpoch === undefined || msg.epoch !== prevEpoch };
  }

  /**
   * Ranks of one worker must agree on what the worker is: its DP size and URL (the pool's block size
   * is checked for every target). A rank claiming otherwise while another is up is refused, naming
   * the worker and rank; ranks that are down belong to an ended life (a restart may change dp size).
   */
  #rankSiblingProblem(workerId: string, targetId: string, dpSize: number, url: string): string | null {
    for (const w of this.#workers.values()) {
      if (w.workerId === targetId || w.status !== "up") continue;
      const other = parseRankTarget(w.workerId);
      if (other.workerId !== workerId) continue;
      const otherSize = other.rank === null ? 1 : (w.dpSize ?? dpSize);
      if (otherSize !== dpSize)
        return `worker ${workerId}: ${targetId} says dp size ${dpSize} but ${w.workerId} said ${otherSize} (restart every rank's relay, or remove the stale target)`;
      if (stripTrailing(url, "/") !== w.url) return `worker ${workerId}: ${targetId} says url ${url} but ${w.workerId} said ${w.url}`;
    }
    return null;
  }

  /** Any message from the worker's relay: the time operators see as lastSeen (in memory). */
  touch(workerId: string): number | null {
    const w = this.#workers.get(workerId);
    if (!w) return null;
    w.lastSeen = this.#now();
    return w.lastSeen;
  }

  /** Sets the status (and lastSeen); the worker, or undefined when unknown. */
  setStatus(workerId: string, status: WorkerStatus): SlottedWorker | undefined {
    const w = this.#workers.get(workerId);
    if (!w) return undefined;
    w.status = status;
    w.lastSeen = this.#now();
    return w;
  }

  /** Keeps routing away from the worker until `until` (ms); the worker, or undefined when unknown. */
  quarantine(workerId: string, until: number): SlottedWorker | undefined {
    const w = this.#workers.get(workerId);
    if (!w) return undefined;
    w.quarantinedUntil = Math.max(w.quarantinedUntil ?? 0, until);
    return w;
  }

  /** Forgets the worker and frees its slot for the next new worker; the removed worker, if any. */
  remove(workerId: string): SlottedWorker | undefined {
    const w = this.#workers.get(workerId);
    if (!w) return undefined;
    this.#bySlot[w.slot] = "";
    this.#workers.delete(workerId);
    return w;
  }

  #upsert(rec: WorkerRecord): { worker: SlottedWorker; added: boolean } {
    const existing = this.#workers.get(rec.workerId);
    if (existing) {
      Object.assign(existing, rec);
      return { worker: existing, added: false };
    }
    let slot = this.#bySlot.indexOf("");
    if (slot < 0) slot = this.#bySlot.length;
    this.#bySlot[slot] = rec.workerId;
    const worker = { ...rec, slot };
    this.#workers.set(rec.workerId, worker);
    return { worker, added: true };
  }
}
