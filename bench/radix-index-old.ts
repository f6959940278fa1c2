/**
 * The router's block index: a radix tree over local block hashes (xxh3 of each full block's
 * tokens), one shared tree for all workers of a pool. Each node records which workers hold that
 * block. The engine's own block hashes are opaque ids: they are only used to find the node a
 * parent link or a removal refers to (one lookup table per worker), so the router never has to
 * reproduce the engine's hash function. Overlap = consecutive leading blocks a worker holds.
 */

export interface IndexNode {
  /** Local hash of the block this node stands for (0n at the root). */
  readonly key: bigint;
  readonly parent: IndexNode | null;
  children: Map<bigint, IndexNode> | null;
  /** Worker slots holding this block (small; usually 1–3). */
  workers: number[];
}

export interface StoredBlock {
  engineHash: string;
  localHash: bigint;
}

export type ApplyResult = { ok: true; applied: number } | { ok: false; applied: number; error: "parent_not_found" | "self_parent" | "unknown_worker" };

interface WorkerState {
  /** engine hash → node */
  byEngineHash: Map<string, IndexNode>;
}

export class RadixIndex {
  readonly root: IndexNode = { key: 0n, parent: null, children: null, workers: [] };
  #workers: (WorkerState | undefined)[] = [];
  #blockCount = 0;

  /** Number of (worker, block) entries held. */
  get size(): number {
    return this.#blockCount;
  }

  workerBlockCount(slot: number): number {
    return this.#workers[slot]?.byEngineHash.size ?? 0;
  }

  ensureWorker(slot: number): void {
    if (!this.#workers[slot]) this.#workers[slot] = { byEngineHash: new Map() };
  }

  hasWorker(slot: number): boolean {
    return this.#workers[slot] !== undefined;
  }

  /** Stores a chain of blocks below `parentEngineHash` (null = root). */
  applyStored(slot: number, parentEngineHash: string | null, blocks: readonly StoredBlock[]): ApplyResult {
    const ws = this.#workers[slot];
    if (!ws) return { ok: false, applied: 0, error: "unknown_worker" };
    let cur: IndexNode;
    if (parentEngineHash === null) cur = this.root;
    else {
      const p = ws.byEngineHash.get(parentEngineHash);
      if (!p) return { ok: false, applied: 0, error: "parent_not_found" };
      cur = p;
    }
    let applied = 0;
    for (const b of blocks) {
      if (b.engineHash === parentEngineHash) return { ok: false, applied, error: "self_parent" };
      const existing = ws.byEngineHash.get(b.engineHash);
      let child = cur.children?.get(b.localHash);
      if (!child) {
        child = { key: b.localHash, parent: cur, children: null, workers: [] };
        (cur.children ??= new Map()).set(b.localHash, child);
      }
      if (existing && existing !== child) {
        // The engine re-used a hash for a different position: drop the old placement first.
        this.#detach(slot, existing);
        ws.byEngineHash.delete(b.engineHash);
      }
      if (!child.workers.includes(slot)) {
        child.workers.push(slot);
        this.#blockCount++;
      }
      ws.byEngineHash.set(b.engineHash, child);
      cur = child;
      applied++;
    }
    return { ok: true, applied };
  }

  /** Removes blocks by engine hash; unknown hashes are ignored (they may predate our view). */
  applyRemoved(slot: number, engineHashes: readonly string[]): number {
    const ws = this.#workers[slot];
    if (!ws) return 0;
    let removed = 0;
    for (const h of engineHashes) {
      const node = ws.byEngineHash.get(h);
      if (!node) continue;
      ws.byEngineHash.delete(h);
      this.#detach(slot, node);
      removed++;
    }
    return removed;
  }

  /** Drops every block of a worker (AllBlocksCleared, dump replacement, worker down). */
  clearWorker(slot: number): void {
    const ws = this.#workers[slot];
    if (!ws) return;
    for (const node of ws.byEngineHash.values()) this.#detach(slot, node);
    ws.byEngineHash.clear();
  }

  /** Forgets the worker slot entirely. */
  removeWorker(slot: number): void {
    this.clearWorker(slot);
    this.#workers[slot] = undefined;
  }

  #detach(slot: number, node: IndexNode): void {
    const i = node.workers.indexOf(slot);
    if (i < 0) return;
    node.workers[i] = node.workers[node.workers.length - 1]!;
    node.workers.pop();
    this.#blockCount--;
    // Prune empty leaves upward so the tree does not keep dead paths.
    let n: IndexNode | null = node;
    while (n && n.parent && n.workers.length === 0 && (!n.children || n.children.size === 0)) {
      n.parent.children!.delete(n.key);
      if (n.parent.children!.size === 0) n.parent.children = null;
      n = n.parent;
    }
  }

  /**
   * Overlap per worker slot: the number of consecutive leading blocks of `localHashes` it holds.
   * `scores` is a caller-owned buffer (length ≥ max slot + 1), zeroed here.
   */
  findMatches(localHashes: readonly bigint[], scores: Int32Array): void {
    scores.fill(0);
    let cur = this.root;
    for (let depth = 0; depth < localHashes.length; depth++) {
      const nxt = cur.children?.get(localHashes[depth]!);
      if (!nxt) return;
      let advanced = false;
      for (const w of nxt.workers) {
        if (scores[w] === depth) {
          scores[w] = depth + 1;
          advanced = true;
        }
      }
      if (!advanced) return;
      cur = nxt;
    }
  }

  /** Local hashes of every block a worker holds, for parity checks and dumps. */
  workerLocalHashes(slot: number): bigint[] {
    const ws = this.#workers[slot];
    if (!ws) return [];
    return [...ws.byEngineHash.values()].map((n) => n.key);
  }

  workerEngineHashes(slot: number): string[] {
    const ws = this.#workers[slot];
    return ws ? [...ws.byEngineHash.keys()] : [];
  }
}
