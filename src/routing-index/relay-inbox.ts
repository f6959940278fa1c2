/**
 * One frame from a relay socket, decided without the runtime: size and schema checks, the session
 * check, hello fencing, and what the index applies. The Durable Object carries the verdict out
 * (sends the replies, closes or refuses the socket, starts the session, writes the rows to SQLite,
 * tells the other shards of load changes) and decides nothing itself.
 */
import { helloUrlMatchesKey, type RelayKeyGrant } from "../relay-wire/relay-auth.ts";
import { parseRelayMessage } from "../relay-wire/relay-message.ts";
import { MAX_RELAY_MESSAGE_BYTES, type IndexToRelay, type RelayHello } from "../relay-wire/relay-protocol.ts";
import type { RoutingCore, WorkerRecord } from "./routing-core.ts";

/** Close code for a hello the pool refuses (another life, a URL or DP size the key does not grant). */
export const HELLO_REFUSED_CLOSE = 4003;

/** What the socket a frame came on says about it. */
export interface RelaySocketView {
  /** The worker the edge authenticated for this socket. */
  workerId: string;
  /** The worker URL the socket's relay key is bound to (relay-auth.ts). */
  boundUrl: string | undefined;
  /** What the socket's relay key grants: the DP ranks a hello may claim, the storage group its view joins. */
  grant: RelayKeyGrant;
  /** Whether this socket carries the worker's newest session (relay-sessions.ts). */
  isCurrent(): boolean;
  /** Whether another open socket carries the worker's newest session. */
  hasLiveSession(): boolean;
}

/** Where this index sits in its pool (told to the relay in its welcome). */
export interface ShardPlace {
  shards: number;
  shard: number;
}

/** What the object does with a frame, in this order: start, persist, log, reply, close, refuse. */
export interface RelayFrameVerdict {
  /** The hello was accepted: this socket starts the worker's newest session. */
  startSession: boolean;
  /** Registry rows to write. */
  persist: WorkerRecord[];
  /** A structured log line (console.warn). */
  warn: Record<string, unknown> | null;
  replies: IndexToRelay[];
  close: { code: number; reason: string } | null;
  /** The socket belongs to an older session of its relay: refuse it (relay-sessions.ts). */
  superseded: boolean;
  /** The relay was heard at this time (its lastSeen, in memory; null: unknown worker). */
  heardAt: number | null;
}

function verdict(parts: Partial<RelayFrameVerdict>): RelayFrameVerdict {
  return { startSession: false, persist: [], warn: null, replies: [], close: null, superseded: false, heardAt: null, ...parts };
}

/** A frame the index drops: counted under `dropReason`, answered with an error. */
function rejected(core: RoutingCore, message: string, dropReason = "bad_message", extra: Partial<RelayFrameVerdict> = {}): RelayFrameVerdict {
  core.countDropped(dropReason);
  return verdict({ replies: [{ type: "error", message }], ...extra });
}

export function relayFrame(core: RoutingCore, frame: string | ArrayBuffer, socket: RelaySocketView, place: ShardPlace): RelayFrameVerdict {
  const size = typeof frame === "string" ? frame.length : frame.byteLength;
  if (size > MAX_RELAY_MESSAGE_BYTES) return rejected(core, "message too large");
  let raw: unknown;
  try {
    raw = JSON.parse(typeof frame === "string" ? frame : new TextDecoder().decode(frame));
  } catch {
    return rejected(core, "malformed JSON");
  }
  const parsed = parseRelayMessage(raw);
  if (!parsed.success) return rejected(core, `invalid message: ${parsed.error.issues[0]?.message ?? "schema"}`);
  const msg = parsed.data;
  const workerId = socket.workerId;
  if (msg.type === "hello") return relayHello(core, msg, socket, place);
  // An older connection of a relay that has reconnected since: its frames are history.
  if (!socket.isCurrent()) return rejected(core, "superseded by a newer relay session", "superseded_session", { superseded: true });
  const heardAt = core.touch(workerId);
  switch (msg.type) {
    case "dump": {
      const r = core.applyDump(workerId, msg);
      const reply: IndexToRelay = !r.ok && r.reason === "unknown_worker" ? { type: "resync", reason: "say hello first" } : { type: "ack", seq: msg.seq };
      return verdict({ heardAt, replies: [reply] });
    }
    case "events": {
      const r = core.applyEvents(workerId, msg);
      return verdict({ heardAt, replies: !r.ok && r.resync ? [{ type: "resync", reason: r.reason }] : [] });
    }
    case "status": {
      if (msg.epoch !== core.worker(workerId)?.epoch) return verdict({ heardAt });
      const rec = core.setStatus(workerId, msg.status);
      return verdict({ heardAt, persist: rec ? [rec] : [] });
    }
    case "ping":
      return verdict({ heardAt, replies: [{ type: "pong", t: msg.t }] });
  }
}

/**
 * A hello: registered under the key's bound URL, or refused. A refused hello (an older epoch,
 * another block size) while no session of the registered life is open fences that life: its blocks
 * stop counting and the worker is down, and only then may the relay take an epoch above it (never
 * past a live relay). A session whose relay has been silent past the limit is a half-open socket.
 */
function relayHello(core: RoutingCore, msg: RelayHello, socket: RelaySocketView, place: ShardPlace): RelayFrameVerdict {
  const workerId = socket.workerId;
  // The worker URL is part of the relay key: a key cannot announce any other address.
  if (!helloUrlMatchesKey(msg.url, socket.boundUrl))
    return verdict({
      replies: [{ type: "error", message: "hello url is not the URL this relay key is bound to" }],
      close: { code: HELLO_REFUSED_CLOSE, reason: "hello url not bound to relay key" },
    });
  // The key bounds the ranks one worker opens (the edge bounds each connect's rank the same way).
  if ((msg.dpSize ?? 1) > socket.grant.dpSize) {
    const reason = `dp size ${msg.dpSize} is more than the ${socket.grant.dpSize} rank(s) this relay key grants`;
    return verdict({ replies: [{ type: "error", message: `worker ${msg.workerId}: ${reason}: issue its key with the worker's dpSize` }], close: { code: HELLO_REFUSED_CLOSE, reason } });
  }
  // Registered under the bound URL's one spelling (the edge appends /generate to it).
  const r = core.hello({ ...msg, url: socket.boundUrl ?? msg.url }, workerId, socket.grant.storageGroup);
  if (!r.ok) {
    const live = socket.hasLiveSession() && !core.relaySilent(workerId);
    const fenced = live ? undefined : core.fenceRefusedLife(workerId, msg.epoch);
    return verdict({
      persist: fenced ? [fenced] : [],
      warn: fenced ? { event: "worker_down", workerId, reason: `refused hello of another life: ${r.reason}` } : null,
      replies: [{ type: "error", message: r.reason, ...(fenced && r.indexEpoch !== undefined ? { indexEpoch: r.indexEpoch } : {}) }],
      close: { code: HELLO_REFUSED_CLOSE, reason: r.reason.slice(0, 120) },
    });
  }
  return verdict({
    startSession: true,
    persist: [r.record],
    replies: [{ type: "welcome", workerId, epoch: msg.epoch, poolBlockSize: core.blockSize ?? msg.blockSize, shards: place.shards, shard: place.shard }],
  });
}
