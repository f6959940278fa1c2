/**
 * The edge's bearer token, compared in constant time, and a bound on failed attempts. Each peer
 * network (an IPv4 address, an IPv6 /64: the edge's clientNetwork rule) may fail `burst` times,
 * then once per `refillMs`; past that its wrong tokens are answered 429, so nobody tries more than
 * that many tokens per network. The token is compared first: a right token always passes and never
 * counts, so a guesser sharing the edge's address (a proxy or tunnel) cannot lock the edge out. The bound is
 * defence in depth beside the token's length (>= 32 characters, options.ts); behind a proxy every
 * caller shares one budget, so guessing is throttled for all. Peers tracked are bounded; the least recently
 * failed is forgotten first.
 */
import type http from "node:http";
import { AuthenticationError, RateLimitError } from "../../src/api/errors.ts";
import { clientNetwork } from "../../src/edge/rate-limit.ts";
import { timingSafeEqualString } from "../../src/util/constant-time.ts";

export interface FailedAuthLimits {
  /** Failed attempts a peer network may make at once. */
  burst: number;
  /** One more failed attempt per this many milliseconds. */
  refillMs: number;
  /** Peer networks remembered at most. */
  maxPeers: number;
}

export const DEFAULT_FAILED_AUTH_LIMITS: FailedAuthLimits = { burst: 20, refillMs: 3_000, maxPeers: 4096 };

/** A peer network's failure budget: attempts left as of `at` (ms). */
interface Budget {
  left: number;
  at: number;
}

export class EdgeAuth {
  readonly #token: string | null;
  readonly #limits: FailedAuthLimits;
  readonly #now: () => number;
  readonly #budgets = new Map<string, Budget>();

  /** `token` null: no token required (allowNoAuth). */
  constructor(token: string | null, limits: FailedAuthLimits = DEFAULT_FAILED_AUTH_LIMITS, now: () => number = Date.now) {
    this.#token = token;
    this.#limits = limits;
    this.#now = now;
  }

  /** Passes the right token always; a wrong one is 401 (counted), or 429 once the peer's budget is spent. */
  require(req: http.IncomingMessage): void {
    if (this.#token === null) return;
    const peer = clientNetwork(req.socket.remoteAddress ?? null);
    // Compare first: behind a proxy every caller shares its address, so a spent budget must not
    // lock out the right token; only wrong ones are counted and, past the budget, answered 429.
    if (this.#matches(req)) return;
    if (this.#left(peer) < 1) throw new RateLimitError(`Too many failed token attempts from this network; one more is allowed every ${this.#limits.refillMs / 1000} s.`, "auth_rate_limited");
    this.#fail(peer);
    throw new AuthenticationError("Decode service token required.");
  }

  /**
   * Does the request carry the right token? For a route that answers anyone but tells the edge
   * more: no Authorization header is not an attempt; a wrong one counts; the right one passes whatever
   * the budget.
   */
  presents(req: http.IncomingMessage): boolean {
    if (this.#token === null) return true;
    if (req.headers.authorization === undefined) return false;
    const peer = clientNetwork(req.socket.remoteAddress ?? null);
    if (this.#matches(req)) return true;
    if (this.#left(peer) < 1) return false;
    this.#fail(peer);
    return false;
  }

  #matches(req: http.IncomingMessage): boolean {
    const m = /^Bearer\s+(\S+)\s*$/i.exec(req.headers.authorization ?? "");
    return m !== null && timingSafeEqualString(m[1]!, this.#token!);
  }

  /** Attempts `peer` has left now (refilled since its last failure, capped at the burst). */
  #left(peer: string): number {
    const b = this.#budgets.get(peer);
    if (!b) return this.#limits.burst;
    return Math.min(this.#limits.burst, b.left + Math.max(0, this.#now() - b.at) / this.#limits.refillMs);
  }

  #fail(peer: string): void {
    const left = this.#left(peer) - 1;
    // Re-inserted so the map's order is least recently failed first.
    this.#budgets.delete(peer);
    if (this.#budgets.size >= this.#limits.maxPeers) this.#budgets.delete(this.#budgets.keys().next().value!);
    this.#budgets.set(peer, { left, at: this.#now() });
  }
}
