/**
 * Approximate views of HiCache storage backends (L3) shared by several workers. SGLang reports
 * nothing for L3 (no KV event is sent for a storage write or for anything held there:
 * mem_cache/hiradix_cache.py @9d147fd `write_backup_storage` L865), but it backs every page written
 * to host memory up to its storage backend, and a worker attached to a shared backend can prefetch
 * a page any of them wrote. So each group of workers naming the same backend (relay hello
 * `hicacheStorage`, from /server_info) gets one view: every block stored in any member's host
 * tier is assumed stored, credited to every member, and aged out oldest first past the group's
 * capacity. Nothing here is exact: routing reports it as approximate.
 *
 * The hello's backend identity is the relay's own word, so it names a view only within what the
 * relay's key grants (storageViewKey): a key with a storage group (relay-auth.ts RelayKeyGrant)
 * shares views with the keys of that group, a key without one keeps a view of its worker's own
 * (its DP ranks share it). A relay can fill or age out only views its operator let it share.
 * Each member brings `memberRoom()` entries to its group's capacity (block-views.ts: the same even
 * split of the object's budget as its host tier), so all views together stay within the budget.
 */
import { RadixIndex } from "../block-index/radix-index.ts";
import type { WireBlock } from "../block-index/radix-index.ts";
import type { LocalHashes } from "../blocks/block-hash.ts";
import type { SlottedWorker } from "./worker-registry.ts";
import { parseRankTarget } from "./rank-target.ts";

/** Storage groups one index keeps at most; a backend past it is not tracked. */
export const MAX_STORAGE_GROUPS = 64;

/**
 * The view a target's hello joins: its key's storage group, else its worker (every rank of it),
 * then the backend identity it states. Group and worker names cannot contain a newline.
 */
export function storageViewKey(targetId: string, storageGroup: string | null, identity: string): string {
  const scope = storageGroup !== null ? `group ${storageGroup}` : `worker ${parseRankTarget(targetId).workerId}`;
  return `${scope}\n${identity}`;
}

export class SharedStorageViews {
  /** Slot k: group k's blocks. */
  readonly #index = new RadixIndex();
  readonly #groups = new Map<string, number>();
  readonly #groupOf = new Map<string, number>();
  /** Stored chains of each group, oldest first (the aging order). */
  readonly #chains = new Map<number, string[][]>();
  readonly #held = new Map<number, number>();
  /** Members of each group. */
  readonly #members = new Map<number, number>();
  readonly #capacityBlocks: number;
  readonly #memberRoom: () => number;
  #scores = new Int32Array(8);

  /** `memberRoom`: the entries each member adds to its group's capacity (capped at `capacityBlocks`). */
  constructor(capacityBlocks: number, memberRoom: () => number) {
    if (!Number.isInteger(capacityBlocks) || capacityBlocks < 1) throw new RangeError(`bad storage capacity ${capacityBlocks}`);
    this.#capacityBlocks = capacityBlocks;
    this.#memberRoom = memberRoom;
  }

  /** Entries held in every view together. */
  get size(): number {
    return this.#index.size;
  }

  /** The worker's hello named this view (storageViewKey; null: no backend, or it left one). */
  attach(workerId: string, identity: string | null): void {
    // A hello that names the same backend again (every reconnect) keeps the group and its view.
    if (identity !== null && this.#groupOf.has(workerId) && this.#groups.get(identity) === this.#groupOf.get(workerId)) return;
    this.detach(workerId);
    if (identity === null) return;
    let slot = this.#groups.get(identity);
    if (slot === undefined) {
      if (this.#groups.size >= MAX_STORAGE_GROUPS) return;
      slot = this.#freeSlot();
      this.#groups.set(identity, slot);
      this.#index.ensureWorker(slot);
      this.#chains.set(slot, []);
      this.#held.set(slot, 0);
      if (this.#scores.length <= slot) this.#scores = new Int32Array(this.#scores.length * 2);
    }
    this.#groupOf.set(workerId, slot);
    this.#members.set(slot, (this.#members.get(slot) ?? 0) + 1);
  }

  /**
   * The worker leaves its group; a group with no member left is dropped with its blocks, so the
   * groups held are the backends in use, not every identity a relay's hellos ever named.
   */
  detach(workerId: string): void {
    const slot = this.#groupOf.get(workerId);
    if (slot === undefined) return;
    this.#groupOf.delete(workerId);
    const left = this.#members.get(slot)! - 1;
    this.#members.set(slot, left);
    if (left > 0) return;
    this.#members.delete(slot);
    this.#index.clearWorker(slot);
    this.#chains.set(slot, []);
    this.#held.set(slot, 0);
    for (const [identity, s] of this.#groups) if (s === slot) this.#groups.delete(identity);
  }

  /** The lowest slot no group holds (slots index the radix index and the scores buffer). */
  #freeSlot(): number {
    const used = new Set(this.#groups.values());
    let slot = 0;
    while (used.has(slot)) slot++;
    return slot;
  }

  /** Whether the worker shares a storage backend this index keeps a view of. */
  attached(workerId: string): boolean {
    return this.#groupOf.has(workerId);
  }

  /** Blocks the worker stored in host memory: written to its group's backend too. */
  stored(workerId: string, parent: string | null, blocks: readonly WireBlock[]): void {
    const slot = this.#groupOf.get(workerId);
    if (slot === undefined || blocks.length === 0) return;
    const r = this.#index.applyStoredEvent(slot, parent, blocks);
    if (r.applied === 0) return;
    this.#chains.get(slot)!.push(blocks.map((b) => b.h));
    let held = this.#held.get(slot)! + r.applied;
    const chains = this.#chains.get(slot)!;
    const capacity = Math.min(this.#capacityBlocks, this.#members.get(slot)! * Math.max(0, this.#memberRoom()));
    while (held > capacity && chains.length > 0) held -= this.#index.applyRemoved(slot, chains.shift()!);
    this.#held.set(slot, held);
  }

  /** Each worker's longest prefix of the request in its group's storage view, in blocks (0: none). */
  overlaps(workers: readonly SlottedWorker[], localHashes: LocalHashes): number[] {
    if (this.#groupOf.size === 0 || this.#index.size === 0) return workers.map(() => 0);
    this.#index.findMatches(localHashes, this.#scores);
    return workers.map((w) => {
      const slot = this.#groupOf.get(w.workerId);
      return slot === undefined ? 0 : (this.#scores[slot] ?? 0);
    });
  }
}
