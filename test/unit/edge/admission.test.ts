/**
 * The edge's side of admission against a real RoutingCore behind the door: the ticket's band and
 * tenant, a refusal rendered as 429 in the OpenAI error shape with Retry-After (the one error
 * mapping, src/api/errors.ts), and a client that goes while waiting taking its request out.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { RoutingCore } from "../../../src/routing-index/routing-core.ts";
import type { AdmissionFrontDoor } from "../../../src/routing-index/front-door.ts";
import { AdmissionConfigSchema } from "../../../src/config/config.ts";
import { localBlockHashes } from "../../../src/blocks/block-hash.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { errorResponse } from "../../../src/api/errors.ts";
import { rateLimitHeaders } from "../../../src/edge/rate-limit.ts";
import { admissionTicket, admitFirstPick, ANONYMOUS_TENANT, type AdmissionInput } from "../../../src/edge/chat/admission.ts";
import { BAND_DEFAULT, BAND_FLEX, BAND_PRIORITY } from "../../../src/admission/bands.ts";
import { clientLabel } from "../../../src/edge/client-label.ts";

beforeAll(() => initHashing());

function fullPool(maxWaitMs: number) {
  const core = new RoutingCore({ blockSize: 4, admission: AdmissionConfigSchema.parse({ maxWaitMs }) });
  core.hello({ type: "hello", workerId: "a", url: "http://a", blockSize: 4, epoch: 1, modelName: "m", contract: null, kvEvents: true, kvCapacityTokens: 16 }, "a");
  const door: AdmissionFrontDoor = { admit: async (r) => core.admit(r, r.admission), leaveQueue: async (t) => core.leaveQueue(t) };
  return { core, door };
}

const tokens = (seed: number) => Array.from({ length: 16 }, (_, i) => seed * 100 + i + 1);
const routeReq = (seed: number) => ({ localHashes: BigUint64Array.from(localBlockHashes(tokens(seed), 4)), isl: 16 });

function input(door: AdmissionFrontDoor, requestId: string, signal: AbortSignal | null = null): AdmissionInput {
  return {
    index: () => door,
    ticket: admissionTicket({ requestId, serviceTier: undefined, client: null, priorityAllowed: false, decodeBudget: 8 }),
    affinityKey: null,
    signal,
    waitUntil: () => undefined,
  };
}

describe("edge admission", () => {
  it("tickets: band from service_tier (priority only where allowed), tenant from the client's label", () => {
    const base = { requestId: "r", client: null, decodeBudget: 10 };
    expect(admissionTicket({ ...base, serviceTier: undefined, priorityAllowed: false })).toEqual({ ticket: "r", band: BAND_DEFAULT, tenant: ANONYMOUS_TENANT, decodeBudget: 10 });
    expect(admissionTicket({ ...base, serviceTier: "flex", priorityAllowed: false }).band).toBe(BAND_FLEX);
    expect(admissionTicket({ ...base, serviceTier: "priority", priorityAllowed: false }).band).toBe(BAND_DEFAULT);
    expect(admissionTicket({ ...base, serviceTier: "priority", priorityAllowed: true }).band).toBe(BAND_PRIORITY);
    expect(admissionTicket({ ...base, serviceTier: undefined, priority: 10, priorityAllowed: true }).band).toBe(BAND_PRIORITY);
    expect(admissionTicket({ ...base, serviceTier: undefined, priority: -1, priorityAllowed: false }).band).toBe(BAND_FLEX);
    const keyed = admissionTicket({ ...base, client: { apiKey: "sk-a" }, serviceTier: undefined, priorityAllowed: false });
    expect(keyed.tenant).toBe(clientLabel({ apiKey: "sk-a" }));
    expect(keyed.tenant).not.toContain("sk-a");
  });

  it("a request refused by a full pool is a 429 in the OpenAI shape with Retry-After", async () => {
    const { door } = fullPool(50);
    const first = await admitFirstPick(door, { ...routeReq(1), admission: input(door, "r1").ticket }, input(door, "r1"));
    expect(first?.workerId).toBe("a");
    const err = await admitFirstPick(door, { ...routeReq(2), admission: input(door, "r2").ticket }, input(door, "r2")).then(
      () => null,
      (e: unknown) => e,
    );
    const res = errorResponse(err, rateLimitHeaders(err));
    expect(res.status).toBe(429);
    expect(Number(res.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    const body = (await res.json()) as { error: Record<string, unknown> };
    expect(body.error).toMatchObject({ type: "rate_limit_error", code: "pool_overloaded", param: null });
    expect(String(body.error.message)).toMatch(/at capacity.*Retry after \d+ s\./);
  });

  it("a client that goes while waiting takes its request out of the queue", async () => {
    const { core, door } = fullPool(30_000);
    await admitFirstPick(door, { ...routeReq(1), admission: input(door, "r1").ticket }, input(door, "r1"));
    const abort = new AbortController();
    const waiting = admitFirstPick(door, { ...routeReq(2), admission: input(door, "r2").ticket }, input(door, "r2", abort.signal));
    await new Promise((r) => setTimeout(r, 10));
    expect(core.admissionSnapshot().bands[BAND_DEFAULT]!.queued).toBe(1);
    abort.abort();
    await expect(waiting).rejects.toMatchObject({ code: "cancelled" });
    expect(core.admissionSnapshot().bands[BAND_DEFAULT]!.queued).toBe(0);
    expect(core.admissionSnapshot().bands[BAND_DEFAULT]!.left).toBe(1);
  });
});
