/**
 * Which relay socket speaks for a worker. A relay that reconnects leaves its old socket behind: the
 * index may never see it close (a half-open connection) and frames delayed on it may arrive after
 * the new session's dump. Only the worker's newest session counts: an accepted hello starts one
 * (recorded in the socket's attachment, so it survives hibernation) and closes every older socket
 * of the worker; frames from any other socket are history; only the newest session's close means the
 * relay is gone. Runtime-free: it sees the sockets through RelaySocket, which workerd's WebSocket has.
 */

/** What the routing index keeps on each relay socket (serializeAttachment). */
export interface RelayAttachment {
  workerId: string;
  /** The relay key the connect was signed with, and the worker URL it is bound to (relay-auth.ts). */
  keyId?: string;
  url?: string;
  /** What that key grants (relay-auth.ts RelayKeyGrant); absent on sockets from before grants: one rank, no group. */
  dpSize?: number;
  storageGroup?: string | null;
  /** Set when this socket's hello is accepted: its session (ms clock, strictly increasing). */
  session?: number;
}

/** What this bookkeeping uses of a hibernatable WebSocket (workerd's `WebSocket` has all of it). */
export interface RelaySocket {
  readonly readyState: number;
  deserializeAttachment(): unknown;
  serializeAttachment(attachment: unknown): void;
  close(code?: number, reason?: string): void;
}

/** readyState of an open socket (the WHATWG WebSocket OPEN). */
const OPEN = 1;

/** Close code for a socket whose relay has opened a newer session. */
export const SUPERSEDED_CLOSE = 4009;
const SUPERSEDED_REASON = "superseded by a newer relay session";

export class RelaySessions {
  readonly #socketsOf: (workerId: string) => readonly RelaySocket[];
  /** Each worker's newest session, remembered here and rebuilt from attachments after a wake. */
  readonly #current = new Map<string, number>();
  #last = 0;

  constructor(socketsOf: (workerId: string) => readonly RelaySocket[]) {
    this.#socketsOf = socketsOf;
  }

  /**
   * The worker's newest session, if any socket of it said an accepted hello. Rebuilt after a wake
   * from the open sockets only: one this index closed as superseded may still be listed while its
   * peer never answers the close, and must not become current again.
   */
  current(workerId: string): number | undefined {
    let s = this.#current.get(workerId);
    if (s !== undefined) return s;
    for (const ws of this.#socketsOf(workerId)) {
      const a = ws.deserializeAttachment() as RelayAttachment;
      if (a.session === undefined) continue;
      // Sessions stay increasing across a wake even on a clock behind an earlier host's.
      this.#last = Math.max(this.#last, a.session);
      if (ws.readyState === OPEN && (s === undefined || a.session > s)) s = a.session;
    }
    if (s !== undefined) this.#current.set(workerId, s);
    return s;
  }

  /**
   * A hello was accepted on `ws`: its session is the worker's now, and sockets of older sessions are
   * closed. A socket that has not said hello yet is left alone (it may be the relay's newer
   * connection, whose hello is on its way); its frames are not heard unless its hello is accepted.
   */
  start(ws: RelaySocket, att: RelayAttachment): void {
    this.current(att.workerId); // after a wake: learn the sessions already handed out first
    const session = Math.max(Date.now(), this.#last + 1);
    this.#last = session;
    ws.serializeAttachment({ ...att, session } satisfies RelayAttachment);
    this.#current.set(att.workerId, session);
    for (const other of this.#socketsOf(att.workerId)) {
      if (other !== ws && (other.deserializeAttachment() as RelayAttachment).session !== undefined) close(other);
    }
  }

  /** Whether frames from this socket are the worker's relay (sockets from before sessions existed count while none has one). */
  isCurrent(att: RelayAttachment): boolean {
    return att.session === this.current(att.workerId);
  }

  /** Closes a socket that is not the worker's relay any more. */
  refuse(ws: RelaySocket): void {
    close(ws);
  }

  /** Whether another socket than `ws` carries the worker's newest session and is open. */
  hasLiveSession(workerId: string, ws: RelaySocket): boolean {
    const current = this.current(workerId);
    if (current === undefined) return false;
    return this.#socketsOf(workerId).some((s) => s !== ws && s.readyState === OPEN && (s.deserializeAttachment() as RelayAttachment).session === current);
  }

  /**
   * `ws`'s relay key was revoked: whether another open socket of the worker connected with another
   * key (a relay already reconnected with a valid key keeps the worker up).
   */
  servedByAnotherKey(workerId: string, ws: RelaySocket, revokedKeyId: string): boolean {
    return this.#socketsOf(workerId).some((s) => s !== ws && s.readyState === OPEN && (s.deserializeAttachment() as RelayAttachment).keyId !== revokedKeyId);
  }

  /**
   * A socket closed: whether that was the worker's relay (its newest session, or a socket from
   * before sessions while none has one). The closing socket may no longer be listed, so it counts as
   * newest when nothing newer is known.
   */
  closed(att: RelayAttachment): boolean {
    const current = this.current(att.workerId);
    if (current !== undefined && (att.session ?? -1) < current) return false;
    if (att.session !== undefined) this.#current.set(att.workerId, att.session);
    return true;
  }
}

function close(ws: RelaySocket): void {
  try {
    ws.close(SUPERSEDED_CLOSE, SUPERSEDED_REASON);
  } catch {
    // Already closing.
  }
}
