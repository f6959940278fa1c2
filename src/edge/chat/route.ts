/**
 * Stage 7, route: the shard that holds this request's blocks, and the pick it makes (a worker, its
 * predicted overlap and a receipt). Endpoint-neutral: any `/generate`-backed route reuses it.
 */
import { NoWorkerAvailableError } from "../../api/errors.ts";
import type { LocalHashes } from "../../blocks/block-hash.ts";
import { shardForRequest, shardObjectName } from "../../routing-index/pool-address.ts";
import type { AdmissionFrontDoor, ChatFrontDoor, RouteDecision } from "../../routing-index/front-door.ts";
import { admitFirstPick, type AdmissionInput } from "./admission.ts";
import type { EdgeConfig } from "../../config/config.ts";
import type { FallbackReason } from "./layout.ts";
import type { ReceiptOutbox } from "./receipt-outbox.ts";

export interface RouteInput {
  /** Shard `shard` of a pool's routing index. */
  index(model: string, shard?: number): ChatFrontDoor;
  /** The pool's shard count (KVEDGE_SHARDS). */
  shards: number;
  model: string;
  /** The routed sequence's block hashes, in the request's cache namespace (a BigUint64Array is sent as it is: not changed after). */
  localHashes: LocalHashes;
  isl: number;
  fallbackReason: FallbackReason;
  /** The Cloudflare colo serving the request where the index maps colos to regions (edgeColoOf); else null. */
  edgeColo: string | null;
  traceId: string;
  /** Only workers that stream increments (a costly logprob stream, chat-answer.ts). */
  incrementalOnly: boolean;
  /** The first pick waits in the pool's admission queue when every worker is full (chat/admission.ts); absent: routed at once. */
  admission?: AdmissionInput;
  /** The isolate's receipt queue: each pick carries the shard's queued receipts (receipt-outbox.ts). */
  receiptOutbox: ReceiptOutbox;
  waitUntil(p: Promise<unknown>): void;
}

export interface RouteTarget {
  shard: number;
  /** The shard's object name: its receipts' queue (receipt-outbox.ts). */
  shardKey: string;
  index: ChatFrontDoor;
  /**
   * The pool was short of room at the first pick: it waited in the pool's admission queue, or its
   * pick left requests waiting or no worker under its load bound (admission-gate.ts `crowded`).
   * The request's settlement frees room a waiting request (of any isolate) likely needs now:
   * settle.ts sends it at once.
   */
  readonly roomWanted: boolean;
  /**
   * A worker for the request, never one in `exclude`; null when none is up (or passes the filter).
   * `first`: the request's first pick (admission may hold it); a later one was admitted already.
   */
  pick(exclude: readonly string[], first: boolean): Promise<RouteDecision | null>;
}

export function routeTarget(input: RouteInput): RouteTarget {
  // A sharded pool: the shard of the first block holds every worker's overlap for this request.
  const shard = shardForRequest(input.localHashes, input.shards);
  const index = input.index(input.model, shard);
  // One buffer over the RPC instead of thousands of BigInts (serialized and read back per attempt),
  // filled by index: BigUint64Array.from goes through the iterator, ~4× slower (0.11 vs 0.025 ms for
  // 6k hashes, a 100k-token prompt, in Node).
  const given = input.localHashes;
  let localHashes: BigUint64Array;
  if (given instanceof BigUint64Array) localHashes = given;
  else {
    localHashes = new BigUint64Array(given.length);
    for (let i = 0; i < localHashes.length; i++) localHashes[i] = given[i]!;
  }
  const shardKey = shardObjectName(input.model, shard);
  let roomWanted = false;
  return {
    shard,
    shardKey,
    index,
    get roomWanted() {
      return roomWanted;
    },
    pick: async (exclude, first) => {
      // The shard's queued receipts ride the pick: applied before it decides (receipt-outbox.ts).
      const carried = input.receiptOutbox.take(shardKey);
      const req = {
        ...(carried ? { receipts: carried.entries } : {}),
        localHashes,
        isl: input.isl,
        exclude,
        fallbackReason: input.fallbackReason,
        edgeColo: input.edgeColo,
        traceId: input.traceId,
        ...(input.incrementalOnly ? { incrementalOnly: true } : {}),
      };
      // The first pick may wait for room in the pool's queue; a retry was admitted already.
      const admission = input.admission;
      // The call carrying the receipts: if it fails unanswered they go again on their own from this
      // request (their own requests' timers settle their promises: receipt-outbox.ts); applying one
      // twice changes nothing (routing-core.ts applyReceipts). The resend hangs on the call under
      // this request's waitUntil from the call's start: a handler cancelled while the call waits
      // (the client went) never runs its own path again. An answer (a refusal, 429, included)
      // applied them; a call never made sends them at once.
      let called = false;
      const carrying = <T>(call: Promise<T>): Promise<T> => {
        called = true;
        if (carried) input.waitUntil(call.then(() => undefined, () => carried.sendAlone(index)));
        return call;
      };
      let d: RouteDecision | null;
      try {
        if (admission && first) {
          const door = admission.index(input.model, shard);
          const answering: AdmissionFrontDoor = {
            admit: async (r) => {
              const a = await carrying(door.admit(r));
              // An older index (rolling deploy) omits waited and crowded: read as "wait for a carrier".
              roomWanted = a.kind === "routed" && (a.waited || a.crowded);
              return a;
            },
            leaveQueue: (t) => door.leaveQueue(t),
          };
          d = await admitFirstPick(answering, { ...req, admission: admission.ticket, affinityKey: admission.affinityKey }, admission);
        } else d = await carrying(index.route(req));
      } catch (err) {
        if (carried && !called) input.waitUntil(carried.sendAlone(index));
        throw err;
      }
      // No pick on the first try: a prefill/decode pool that cannot pair is named, not a bare 503.
      if (d === null && first) {
        const problem = (await index.profile()).pdProblem;
        if (problem) throw new NoWorkerAvailableError(`This model's pool cannot serve requests: ${problem}.`);
      }
      return d;
    },
  };
}

/** The pick as response headers (admin callers and debug only: they reveal topology). */
export function routingHeaders(d: RouteDecision, fallbackReason: FallbackReason, requestId: string, attempts: number, shard: number): Record<string, string> {
  const h: Record<string, string> = {
    "x-request-id": requestId,
    "x-kvedge-worker": d.workerId,
    "x-kvedge-overlap-blocks": String(d.overlapBlocks),
    "x-kvedge-total-blocks": String(d.totalBlocks),
    "x-kvedge-receipt": d.receiptId,
    "x-kvedge-routing": fallbackReason === null ? "exact" : "text_prefix",
    "x-kvedge-attempts": String(attempts),
  };
  // A prefill/decode pair: x-kvedge-worker is its prefill (where the prefix is), this its decode.
  if (d.pd) h["x-kvedge-decode-worker"] = d.pd.decodeWorkerId;
  // Of the overlap, blocks in the worker's host memory (HiCache): loaded back there, not prefilled.
  if (d.hostBlocks) h["x-kvedge-host-blocks"] = String(d.hostBlocks);
  // Of the overlap, blocks assumed in a storage backend the worker shares: an approximate view.
  if (d.storageBlocks) h["x-kvedge-storage-blocks"] = `${d.storageBlocks}; approximate`;
  if (fallbackReason) h["x-kvedge-fallback-reason"] = fallbackReason;
  if (shard > 0) h["x-kvedge-shard"] = String(shard);
  return h;
}

/**
 * The Cloudflare colo serving this request where the index maps colos to regions
 * (src/selection/regions.ts regionFromColo); null elsewhere and outside Cloudflare. Read only
 * then: workerd builds `request.cf` on its first read.
 */
export function edgeColoOf(request: Request, config: Pick<EdgeConfig, "regionsByColo">): string | null {
  if (!config.regionsByColo) return null;
  const colo = (request as { cf?: { colo?: unknown } }).cf?.colo;
  return typeof colo === "string" ? colo : null;
}
