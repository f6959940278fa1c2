/**
 * The relay's side of a sharded routing index (docs/scale.md §3): one IndexSession per shard
 * object, and a ChainRootRouter that mirrors the worker's block set so every block (in dumps and in
 * event batches) goes to the shard of its chain's root.
 *
 * Shard 0 is the pool object: its `welcome` says how many shards there are. The fan-out starts
 * with shard 0 alone and opens (or closes) the others when that number changes; a shard that says
 * another number is logged and outvoted. With one shard there is no router and everything goes to
 * session 0, exactly as before sharding.
 *
 * Invariant: the router places exactly the blocks of the set (the relay rebuilds it whenever it
 * clears or replaces the set, and feeds it every applied batch), so a shard's dump is simply the
 * set's dump filtered by the router, parents still before children.
 */
import type { RelayEvent, WorkerStatus } from "../../src/relay-wire/relay-protocol.ts";
import { ChainRootRouter, MAX_SHARDS } from "../../src/relay-wire/chain-shards.ts";
import { splitRelayEvents } from "../../src/relay-wire/split-events.ts";
import type { DumpBlock } from "./worker-block-set.ts";
import type { IndexSession, IndexSessionOptions, IndexSessionStats, WelcomeInfo } from "./index-session.ts";
import { errorMessage, type Logger } from "./log.ts";

/** What the fan-out uses of a session (an IndexSession; a stand-in in tests). */
export type ShardSession = Pick<IndexSession, "start" | "close" | "pushEvents" | "resync" | "restart" | "stats" | "sendStatus">;

export type SessionSnapshot = ReturnType<IndexSessionOptions["snapshot"]>;

export interface ShardSessionHooks {
  /** The shard's part of the worker's view, for its dumps. */
  snapshot(): SessionSnapshot;
  onWelcome(welcome: WelcomeInfo): void;
}

export interface ShardFanoutOptions {
  /** Builds (without starting) the session that feeds shard `shard`, wired to `hooks`. */
  newSession(shard: number, hooks: ShardSessionHooks): ShardSession;
  /** The worker's current blocks, parents before children (WorkerBlockSet.dumpBlocks). */
  blocks(): DumpBlock[];
  /** Epoch and last folded seq of a dump taken now. */
  position(): { epoch: number; seq: number; approximate?: boolean };
  log: Logger;
}

export interface ShardFanoutStats {
  shards: number;
  /** Index = shard. */
  sessions: IndexSessionStats[];
}

export class ShardFanout {
  private readonly opts: ShardFanoutOptions;
  private readonly log: Logger;
  private count = 1;
  /** null while unsharded: there is nothing to route. */
  private router: ChainRootRouter | null = null;
  private readonly sessions: ShardSession[] = [];
  private readonly closing = new Set<Promise<void>>();
  private started = false;
  private closed = false;

  constructor(opts: ShardFanoutOptions) {
    this.opts = opts;
    this.log = opts.log;
    this.add(0);
  }

  get shardCount(): number {
    return this.count;
  }

  start(): void {
    if (this.started || this.closed) return;
    this.started = true;
    for (const s of this.sessions) s.start();
  }

  async close(): Promise<void> {
    this.closed = true;
    await Promise.all([...this.sessions.map((s) => s.close()), ...this.closing]);
  }

  stats(): ShardFanoutStats {
    return { shards: this.count, sessions: this.sessions.map((s) => s.stats()) };
  }

  /** Blocks of shard `shard` in dump order (all of them while unsharded). */
  blocksFor(shard: number): DumpBlock[] {
    if (this.router === null) return shard === 0 ? this.opts.blocks() : [];
    const rows = gpuRows(this.opts.blocks());
    const mine = this.router.size === rows.length ? pick(this.router, rows, shard) : null;
    if (mine !== null) return mine;
    // Only a bug breaks the mirror; a rebuild makes this dump (and later events) right again.
    this.log.warn("shard_router_out_of_sync", { routed: this.router.size, blocks: rows.length });
    this.rebuildRouter();
    return pick(this.router!, rows, shard) ?? [];
  }

  /** The set was cleared or replaced (or may have drifted): place its blocks afresh. */
  rebuildRouter(): void {
    if (this.count === 1) {
      this.router = null;
      return;
    }
    const router = new ChainRootRouter(this.count);
    for (const row of gpuRows(this.opts.blocks())) router.routeDumpRow(row);
    this.router = router;
  }

  /** One applied batch of the set: split by shard and queued on each shard's session. */
  pushEvents(epoch: number, seq: number, events: RelayEvent[]): void {
    if (events.length === 0) return;
    if (this.router === null) {
      this.sessions[0]!.pushEvents(epoch, seq, events);
      return;
    }
    const { perShard, resync } = splitRelayEvents(this.router, events.filter((e) => e.t === "cleared" || e.tier === undefined));
    if (resync) {
      // The set only emits chains whose parent it holds, so the mirror broke: start over.
      this.log.warn("shard_split_resync", { seq, note: "router lost a parent the block set holds" });
      this.rebuildRouter();
      this.resyncAll("shard router out of sync");
      return;
    }
    perShard.forEach((list, k) => {
      if (list.length > 0) this.sessions[k]?.pushEvents(epoch, seq, list);
    });
  }

  /** Every streaming session replaces its shard's view with a fresh dump. */
  resyncAll(reason: string): void {
    for (const s of this.sessions) s.resync(reason);
  }

  /** Every streaming session tells its shard the worker's status (a relay's SIGTERM: draining). */
  announce(status: WorkerStatus, reason: string): void {
    for (const s of this.sessions) s.sendStatus(status, reason);
  }

  /** Every session starts over with a new hello (new epoch). */
  restartAll(reason: string): void {
    for (const s of this.sessions) s.restart(reason);
  }

  private add(shard: number): ShardSession {
    // The hooks check identity: a session closed by a shrink must not speak for its shard.
    const session: ShardSession = this.opts.newSession(shard, {
      snapshot: () => ({ ...this.opts.position(), blocks: this.blocksFor(shard) }),
      onWelcome: (w) => {
        if (this.sessions[shard] === session) this.onWelcome(shard, w);
      },
    });
    this.sessions.push(session);
    return session;
  }

  private onWelcome(shard: number, w: WelcomeInfo): void {
    if (w.shard !== undefined && w.shard !== shard) this.log.warn("shard_mismatch", { socket: shard, welcome: w.shard });
    const said = w.shards ?? 1;
    if (shard !== 0) {
      if (said !== this.count) this.log.warn("shard_count_disagrees", { shard, says: said, shard0: this.count });
      return;
    }
    if (!Number.isInteger(said) || said < 1 || said > MAX_SHARDS) {
      this.log.error("bad_shard_count", { shards: w.shards, keeping: this.count });
      return;
    }
    if (said !== this.count) this.reshard(said);
  }

  /**
   * Called from shard 0's welcome, before its dump: that dump is cut by the new router; the other
   * streaming sessions re-dump (their share changed); new shards dump after their own welcome.
   */
  private reshard(to: number): void {
    const from = this.count;
    this.log.info("shards_changed", { from, to });
    this.count = to;
    this.rebuildRouter();
    while (this.sessions.length > to) {
      const gone = this.sessions.pop()!.close().catch((e: unknown) => this.log.warn("shard_close_failed", { error: errorMessage(e) }));
      this.closing.add(gone);
      void gone.finally(() => this.closing.delete(gone));
    }
    this.resyncAll(`shards ${from} → ${to}`);
    if (this.closed) return;
    for (let k = this.sessions.length; k < to; k++) {
      const s = this.add(k);
      if (this.started) s.start();
    }
  }
}

/**
 * A sharded index tracks the GPU tier only: a host copy shares its engine hash with the GPU block
 * it backs up, and the chain-root router places each hash once.
 */
function gpuRows(rows: DumpBlock[]): DumpBlock[] {
  return rows.some((r) => r.tier !== undefined) ? rows.filter((r) => r.tier === undefined) : rows;
}

/** The rows the router places in `shard` (order kept), or null when it does not know a row. */
function pick(router: ChainRootRouter, rows: readonly DumpBlock[], shard: number): DumpBlock[] | null {
  const out: DumpBlock[] = [];
  for (const row of rows) {
    const s = router.shardOfBlock(row.h);
    if (s === undefined) return null;
    if (s === shard) out.push(row);
  }
  return out;
}
