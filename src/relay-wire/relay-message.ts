/**
 * Validation of relay → index messages on the index's hot path. RelayMessageSchema (zod) is the
 * definition; in workerd zod runs without its compiled fast path, and checking a cold 32k-token
 * request's ~2 000 stored blocks through it took about as long as indexing them (perf-edge, cold).
 * `events` and `dump` messages in exactly the schema's shape (no extra keys, every value valid) are
 * accepted by a direct check and returned as they are, which is what zod would return for them;
 * everything else, valid or not, goes to zod, so its verdicts and error texts stay the only ones.
 * test/unit/relay-wire/relay-message.test.ts checks the direct path against zod.
 */
import type { z } from "zod";
import { KV_TIERS, MAX_BLOCKS_PER_MESSAGE, RelayMessageSchema, type RelayMessage } from "./relay-protocol.ts";
import { isRecord } from "../util/is-record.ts";

const ENGINE_HASH = /^-?\d{1,20}$/;
const LOCAL_HASH = /^[0-9a-f]{16}$/;

type Parsed = { success: true; data: RelayMessage } | { success: false; error: z.ZodError };

/** Own enumerable keys (JSON objects have no others); no array allocated per object. */
function keyCount(o: object): number {
  let n = 0;
  for (const _ in o) n++;
  return n;
}

function isCount(v: unknown, min: number): boolean {
  return typeof v === "number" && Number.isSafeInteger(v) && v >= min;
}

const isEngineHash = (v: unknown): boolean => typeof v === "string" && ENGINE_HASH.test(v);
const isLocalHash = (v: unknown): boolean => typeof v === "string" && LOCAL_HASH.test(v);
/** Keys an optional `tier` adds (0 when absent, 1 when a known tier, NaN otherwise: never a match). */
const tierKeys = (v: unknown): number => (v === undefined ? 0 : (KV_TIERS as readonly unknown[]).includes(v) ? 1 : NaN);
/** Keys an optional `moved` adds (0 when absent, 1 when true, NaN otherwise). */
const movedKeys = (v: unknown): number => (v === undefined ? 0 : v === true ? 1 : NaN);

function isEvent(e: unknown): boolean {
  if (!isRecord(e)) return false;
  switch (e.t) {
    case "stored": {
      const blocks = e.blocks;
      if (keyCount(e) !== 3 + tierKeys(e.tier) || !(e.parent === null || isEngineHash(e.parent)) || !Array.isArray(blocks) || blocks.length === 0) return false;
      for (const b of blocks) if (!isRecord(b) || keyCount(b) !== 2 || !isEngineHash(b.h) || !isLocalHash(b.l)) return false;
      return true;
    }
    case "removed": {
      const hashes = e.hashes;
      if (keyCount(e) !== 2 + tierKeys(e.tier) + movedKeys(e.moved) || !Array.isArray(hashes) || hashes.length === 0) return false;
      for (const h of hashes) if (!isEngineHash(h)) return false;
      return true;
    }
    case "cleared":
      return keyCount(e) === 1;
    default:
      return false;
  }
}

function isPlainEvents(m: Record<string, unknown>): boolean {
  const events = m.events;
  if (keyCount(m) !== 4 || !isCount(m.epoch, 0) || !isCount(m.seq, 0) || !Array.isArray(events) || events.length > MAX_BLOCKS_PER_MESSAGE) return false;
  for (const e of events) if (!isEvent(e)) return false;
  return true;
}

function isPlainDump(m: Record<string, unknown>): boolean {
  const blocks = m.blocks;
  const optional = (m.approximate === undefined ? 0 : typeof m.approximate === "boolean" ? 1 : NaN) + (m.continues === undefined ? 0 : isCount(m.continues, 0) ? 1 : NaN);
  if (keyCount(m) !== 4 + optional) return false;
  if (!isCount(m.epoch, 0) || !isCount(m.seq, -1) || !Array.isArray(blocks) || blocks.length > MAX_BLOCKS_PER_MESSAGE) return false;
  for (const b of blocks) if (!isRecord(b) || keyCount(b) !== 3 + tierKeys(b.tier) || !isEngineHash(b.h) || !(b.p === null || isEngineHash(b.p)) || !isLocalHash(b.l)) return false;
  return true;
}

/** RelayMessageSchema.safeParse, with the common messages checked directly. */
export function parseRelayMessage(raw: unknown): Parsed {
  if (isRecord(raw) && ((raw.type === "events" && isPlainEvents(raw)) || (raw.type === "dump" && isPlainDump(raw)))) {
    return { success: true, data: raw as RelayMessage };
  }
  return RelayMessageSchema.safeParse(raw);
}
