/**
 * One worker's current KV block set, maintained from its decoded KV events, and the translation of
 * each applied batch into the relay protocol (src/relay-wire/relay-protocol.ts).
 *
 * Rules (as Dynamo ingests SGLang's events: ai-dynamo/dynamo lib/kv-router/src/zmq_wire/convert.rs
 * @4fb5a208 `convert_event`, `create_stored_blocks`):
 *  - Stored: block i's parent is the event's parent (i = 0) or block i-1. The local hash of each
 *    block is recomputed from its token ids; the first block whose token count differs from the
 *    block size ends the event (later blocks would hang off a block the index never saw).
 *  - A block whose hash equals its parent, or a hash repeated inside one event, voids the event.
 *  - A parent we do not hold voids the event and flags `needsResync`: we missed its store, so our
 *    view is incomplete (the blocks are still on the worker, the index just never learns them).
 *  - Removed: the block and every block below it go (SGLang evicts leaves first, so normally there
 *    is nothing below; cascading keeps the set a forest rooted at parent = null regardless). The
 *    emitted `removed` event lists every hash actually removed so the index needs no cascade rule.
 *  - Cleared: everything goes; the view is exact again.
 *  - Salted blocks (SGLang cache_salt, from BlockStoredWithMetadata) get local hashes tagged with
 *    their salt (block-hash.ts namespaceTag), so they only ever match requests of that namespace.
 * Invariant: every block's parent is null or in the set, so a dump can list parents first.
 * Requires initHashing() before `apply`.
 */
import { localBlockHash, namespacedLocalHash, namespaceTag, type NamespaceTag } from "../../src/blocks/block-hash.ts";
import type { KvCacheEvent } from "../../src/engine-events/event-decode.ts";
import { hexToLocalHash, localHashToHex, type RelayDump, type RelayEvent } from "../../src/relay-wire/relay-protocol.ts";

export interface BlockEntry {
  parent: bigint | null;
  localHash: bigint;
  tokensLength: number;
}

export type BlockSetDropReason =
  | "wrong_block_size"
  | "self_parent"
  | "duplicate_in_event"
  | "unknown_parent"
  | "unknown_removed"
  /** A medium the relay keeps no view of (DISK, EXTERNAL: declared by SGLang, never sent). */
  | "untracked_medium";

export interface BlockSetDrop {
  reason: BlockSetDropReason;
  /** Blocks (or hashes) affected. */
  count: number;
  detail: string;
}

export interface ApplyOutcome {
  /** The applied changes in protocol shape (empty when nothing changed). */
  events: RelayEvent[];
  dropped: BlockSetDrop[];
  stored: number;
  removed: number;
}

export type DumpBlock = RelayDump["blocks"][number];

export class WorkerBlockSet {
  readonly blockSize: number;
  private readonly blocks = new Map<bigint, BlockEntry>();
  private readonly children = new Map<bigint, Set<bigint>>();
  private incomplete = false;

  constructor(blockSize: number) {
    if (!Number.isInteger(blockSize) || blockSize <= 0) throw new RangeError(`bad block size ${blockSize}`);
    this.blockSize = blockSize;
  }

  get size(): number {
    return this.blocks.size;
  }

  /** True once an event referenced a parent we never saw stored (cleared by `clear`). */
  get needsResync(): boolean {
    return this.incomplete;
  }

  get(hash: bigint): BlockEntry | undefined {
    return this.blocks.get(hash);
  }

  has(hash: bigint): boolean {
    return this.blocks.has(hash);
  }

  clear(): void {
    this.blocks.clear();
    this.children.clear();
    this.incomplete = false;
  }

  apply(events: readonly KvCacheEvent[]): ApplyOutcome {
    const out: ApplyOutcome = { events: [], dropped: [], stored: 0, removed: 0 };
    for (const ev of events) {
      switch (ev.type) {
        case "BlockStored":
          this.applyStored(ev.blockHashes, ev.parentBlockHash, ev.tokenIds, ev.blockSize, namespaceTag(ev.cacheSalt), out);
          break;
        case "BlockRemoved":
          this.applyRemoved(ev.blockHashes, out);
          break;
        case "AllBlocksCleared":
          this.clear();
          out.events.push({ t: "cleared" });
          break;
      }
    }
    return out;
  }

  private applyStored(
    hashes: readonly bigint[],
    parent: bigint | null,
    tokens: readonly number[],
    declaredBlockSize: number | null,
    ns: NamespaceTag,
    out: ApplyOutcome,
  ): void {
    if (hashes.length === 0) return;
    const B = this.blockSize;
    if (declaredBlockSize !== null && declaredBlockSize !== B) {
      out.dropped.push({
        reason: "wrong_block_size",
        count: hashes.length,
        detail: `event block_size ${declaredBlockSize} ≠ ${B}`,
      });
      return;
    }
    const seen = new Set<bigint>();
    let prev = parent;
    for (const h of hashes) {
      if (h === prev) {
        out.dropped.push({ reason: "self_parent", count: hashes.length, detail: `block ${h} is its own parent` });
        return;
      }
      if (seen.has(h)) {
        out.dropped.push({ reason: "duplicate_in_event", count: hashes.length, detail: `block ${h} repeated` });
        return;
      }
      seen.add(h);
      prev = h;
    }
    if (parent !== null && !this.blocks.has(parent)) {
      this.incomplete = true;
      out.dropped.push({ reason: "unknown_parent", count: hashes.length, detail: `parent ${parent} not held` });
      return;
    }

    // Runs of newly inserted blocks, each a chain hanging off `runParent`.
    let runParent = parent;
    let run: { h: string; l: string }[] = [];
    const flush = (): void => {
      if (run.length > 0) out.events.push({ t: "stored", parent: runParent === null ? null : runParent.toString(), blocks: run });
      run = [];
    };
    prev = parent;
    for (let i = 0; i < hashes.length; i++) {
      const h = hashes[i]!;
      const start = i * B;
      const end = Math.min(start + B, tokens.length);
      if (end - start !== B) {
        out.dropped.push({
          reason: "wrong_block_size",
          count: hashes.length - i,
          detail: `block ${h} has ${Math.max(0, end - start)} tokens, block size ${B}`,
        });
        break;
      }
      const existing = this.blocks.get(h);
      if (existing && existing.parent === prev) {
        // Already held (e.g. re-announced): nothing changes; later blocks continue from it.
        flush();
        runParent = h;
        prev = h;
        continue;
      }
      if (existing) {
        // Same id under another parent: the old placement is stale. The engine evicted nothing.
        flush();
        const gone = this.removeSubtree(h);
        out.removed += gone.length;
        out.events.push({ t: "removed", hashes: gone.map(String), moved: true });
        if (prev !== null && !this.blocks.has(prev)) {
          // The parent sat below the moved block (a hash cycle): nothing sound to attach to.
          this.incomplete = true;
          out.dropped.push({ reason: "unknown_parent", count: hashes.length - i, detail: `parent ${prev} removed by re-parenting` });
          break;
        }
      }
      if (run.length === 0) runParent = prev;
      const localHash = namespacedLocalHash(localBlockHash(tokens.slice(start, end)), ns);
      this.insert(h, prev, localHash, B);
      run.push({ h: h.toString(), l: localHashToHex(localHash) });
      out.stored++;
      prev = h;
    }
    flush();
  }

  private applyRemoved(hashes: readonly bigint[], out: ApplyOutcome): void {
    const removed: string[] = [];
    const gone = new Set<bigint>();
    let unknown = 0;
    for (const h of hashes) {
      if (!this.blocks.has(h)) {
        // SGLang lists a node's pages root-first, so later ones may already have gone with it.
        if (!gone.has(h)) unknown++;
        continue;
      }
      for (const g of this.removeSubtree(h)) {
        gone.add(g);
        removed.push(g.toString());
      }
    }
    if (unknown > 0) out.dropped.push({ reason: "unknown_removed", count: unknown, detail: `${unknown} hash(es) not held` });
    if (removed.length > 0) {
      out.removed += removed.length;
      out.events.push({ t: "removed", hashes: removed });
    }
  }

  private insert(h: bigint, parent: bigint | null, localHash: bigint, tokensLength: number): void {
    this.blocks.set(h, { parent, localHash, tokensLength });
    if (parent !== null) {
      let set = this.children.get(parent);
      if (!set) this.children.set(parent, (set = new Set()));
      set.add(h);
    }
  }

  /** Removes `root` and everything below it; returns the removed hashes, root first. */
  private removeSubtree(root: bigint): bigint[] {
    const removed: bigint[] = [];
    const stack = [root];
    while (stack.length > 0) {
      const h = stack.pop()!;
      const entry = this.blocks.get(h);
      if (!entry) continue;
      this.blocks.delete(h);
      removed.push(h);
      const kids = this.children.get(h);
      if (kids) {
        for (const k of kids) stack.push(k);
        this.children.delete(h);
      }
      if (entry.parent !== null) this.children.get(entry.parent)?.delete(h);
    }
    return removed;
  }

  /** Every block, parents before children. */
  dumpBlocks(): DumpBlock[] {
    const out: DumpBlock[] = [];
    const stack: bigint[] = [];
    for (const [h, e] of this.blocks) if (e.parent === null) stack.push(h);
    while (stack.length > 0) {
      const h = stack.pop()!;
      const e = this.blocks.get(h)!;
      out.push({ h: h.toString(), p: e.parent === null ? null : e.parent.toString(), l: localHashToHex(e.localHash) });
      const kids = this.children.get(h);
      if (kids) for (const k of kids) stack.push(k);
    }
    return out;
  }

  /**
   * Replaces the set with dumped rows (parents before children), e.g. a relay's saved view.
   * Returns how many rows were skipped (parent not held, or a repeated hash).
   */
  restore(rows: readonly DumpBlock[]): number {
    this.clear();
    let skipped = 0;
    for (const r of rows) {
      const h = BigInt(r.h);
      const parent = r.p === null ? null : BigInt(r.p);
      if (this.blocks.has(h) || h === parent || (parent !== null && !this.blocks.has(parent))) {
        skipped++;
        continue;
      }
      this.insert(h, parent, hexToLocalHash(r.l), this.blockSize);
    }
    return skipped;
  }

  /** The protocol's full dump (seq: last engine batch folded in, -1 when none). */
  dump(epoch: number, seq: number): RelayDump {
    return { type: "dump", epoch, seq, blocks: this.dumpBlocks() };
  }
}
