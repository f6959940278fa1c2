/**
 * Admission of a request's first pick (src/admission/): the ticket it waits with in the pool's
 * object (band from service_tier, tenant from the client's label, decode budget), one pending RPC
 * while it waits, leaving the queue when the client goes, and the pool's refusal as a 429 with
 * Retry-After (rate-limit.ts RateLimitedError; status mapped in src/api/errors.ts).
 */
import { UpstreamError } from "../../api/errors.ts";
import type { ServiceTier } from "../../api/openai-schema.ts";
import { bandOf } from "../../admission/bands.ts";
import type { AdmissionFrontDoor, AdmissionTicket, AdmitRequest, RouteDecision } from "../../routing-index/front-door.ts";
import { clientLabel, type ClientRef } from "../client-label.ts";
import { RateLimitedError } from "../rate-limit.ts";

/** The tenant of requests from clients the edge cannot tell apart (no API key, no client address). */
export const ANONYMOUS_TENANT = "anonymous";

export interface AdmissionInput {
  /** Shard `shard` of the pool's index, as admission asks it. */
  index(model: string, shard?: number): AdmissionFrontDoor;
  ticket: AdmissionTicket;
  /** The conversation's key (affinity.ts); null: none. */
  affinityKey: string | null;
  /** The client's request signal: its going takes the request out of the queue. */
  signal: AbortSignal | null;
  waitUntil(p: Promise<unknown>): void;
}

export interface TicketInput {
  requestId: string;
  serviceTier: ServiceTier | undefined;
  /** SGLang's integer priority, if the request carries one. */
  priority?: number | undefined;
  client: ClientRef | null;
  /** Operator callers, or any caller where KVEDGE_ROUTING.admission.openPriority is on. */
  priorityAllowed: boolean;
  /** The output tokens the request may produce. */
  decodeBudget: number;
}

export function admissionTicket(t: TicketInput): AdmissionTicket {
  return {
    ticket: t.requestId,
    band: bandOf({ serviceTier: t.serviceTier, priority: t.priority, priorityAllowed: t.priorityAllowed }),
    tenant: t.client ? clientLabel(t.client) : ANONYMOUS_TENANT,
    decodeBudget: Math.max(0, Math.trunc(t.decodeBudget)),
  };
}

const REFUSALS = {
  queue_full: "The model's workers are at capacity and its queue is full.",
  deadline: "The model's workers stayed at capacity for as long as the request could wait.",
  evicted: "The model's workers are at capacity and higher-priority requests took the queue.",
} as const;

/** The first pick through admission: the decision, null when no worker is up, or the client's 429. */
export async function admitFirstPick(door: AdmissionFrontDoor, req: AdmitRequest, input: AdmissionInput): Promise<RouteDecision | null> {
  const cancelled = () => new UpstreamError("The client went away.", null, "cancelled");
  if (input.signal?.aborted) throw cancelled();
  const leave = () => input.waitUntil(door.leaveQueue(input.ticket.ticket).catch(() => undefined));
  input.signal?.addEventListener("abort", leave, { once: true });
  let r;
  try {
    r = await door.admit(req);
  } finally {
    input.signal?.removeEventListener("abort", leave);
  }
  switch (r.kind) {
    case "routed":
      return r.decision;
    case "none":
      return null;
    case "left":
      throw cancelled();
    case "refused":
      throw new RateLimitedError(r.retryAfterSeconds, `${REFUSALS[r.reason]} Retry after ${r.retryAfterSeconds} s.`, "pool_overloaded");
  }
}
