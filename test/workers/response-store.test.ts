/**
 * ResponseStore inside workerd (durable-objects/response-store.ts): records expire after their TTL,
 * a tenant over its byte budget loses its oldest records first, a record larger than the budget is
 * refused, delete says whether it removed anything, the alarm clears the object, and one tenant's
 * object never answers for another's ids. Chains: a conversation is read root first; a child keeps
 * its ancestors (expiry, budget, delete), so a continuable record always has its whole chain.
 */
import { env, runDurableObjectAlarm } from "cloudflare:test";
import { describe, expect, it } from "vitest";

const HOUR = 3_600_000;
/** Times from now: an expiry in the past would fire the object's alarm, which clears it. */
const NOW = Date.now();

describe("ResponseStore", () => {
  it("expires records after the TTL", async () => {
    const store = env.RESPONSE_STORE.getByName("responses:ttl");
    expect(await store.put("resp_a", null, '{"a":1}', NOW, HOUR, 1_000_000)).toBe(true);
    expect(await store.get("resp_a", NOW + HOUR - 1)).toBe('{"a":1}');
    expect(await store.get("resp_a", NOW + HOUR)).toBeNull();
  });

  it("drops the oldest records past the tenant's byte budget; refuses one larger than the budget", async () => {
    const store = env.RESPONSE_STORE.getByName("responses:budget");
    const body = "x".repeat(400);
    for (const [i, id] of ["resp_1", "resp_2", "resp_3"].entries()) expect(await store.put(id, null, body, NOW + i, HOUR, 1_000)).toBe(true);
    expect(await store.get("resp_1", NOW + 5)).toBeNull();
    expect(await store.get("resp_2", NOW + 5)).toBe(body);
    expect(await store.get("resp_3", NOW + 5)).toBe(body);
    expect(await store.put("resp_big", null, "y".repeat(1_001), NOW + 5, HOUR, 1_000)).toBe(false);
    expect(await store.get("resp_3", NOW + 5)).toBe(body);
  });

  it("delete reports whether a record was there; tenants are separate objects", async () => {
    const mine = env.RESPONSE_STORE.getByName("responses:mine");
    const theirs = env.RESPONSE_STORE.getByName("responses:theirs");
    await mine.put("resp_x", null, "{}", NOW, HOUR, 1_000_000);
    expect(await mine.get("resp_x", NOW)).toBe("{}");
    expect(await theirs.get("resp_x", NOW)).toBeNull();
    expect(await theirs.delete("resp_x")).toBe(false);
    expect(await mine.delete("resp_x")).toBe(true);
    expect(await mine.delete("resp_x")).toBe(false);
  });

  it("the alarm at the latest expiry leaves the object empty", async () => {
    const store = env.RESPONSE_STORE.getByName("responses:alarm");
    await store.put("resp_y", null, "{}", NOW, HOUR, 1_000_000);
    expect(await runDurableObjectAlarm(store)).toBe(true);
    expect(await store.get("resp_y", NOW)).toBeNull();
  });

  it("a chain is read root first; a child extends its ancestors' expiry", async () => {
    const store = env.RESPONSE_STORE.getByName("responses:chain");
    expect(await store.put("resp_c0", null, "a", NOW, HOUR, 1_000_000)).toBe(true);
    expect(await store.put("resp_c1", "resp_c0", "b", NOW + HOUR / 2, HOUR, 1_000_000)).toBe(true);
    expect(await store.put("resp_c2", "resp_c1", "c", NOW + HOUR / 2, HOUR, 1_000_000)).toBe(true);
    expect(await store.chain("resp_c2", NOW + HOUR / 2, 1_000)).toEqual(["a", "b", "c"]);
    expect(await store.chain("resp_c1", NOW + HOUR / 2, 1_000)).toEqual(["a", "b"]);
    expect(await store.chain("resp_c2", NOW + HOUR / 2, 2)).toBe("too_large");
    // Past the root's own TTL, within the child's: the whole chain is still there.
    expect(await store.chain("resp_c2", NOW + HOUR + 1, 1_000)).toEqual(["a", "b", "c"]);
    expect(await store.get("resp_c0", NOW + HOUR + 1)).toBe("a");
    expect(await store.chain("resp_c2", NOW + 2 * HOUR, 1_000)).toBeNull();
    // A child of a record that is gone is not stored.
    expect(await store.put("resp_c3", "resp_gone", "d", NOW, HOUR, 1_000_000)).toBe(false);
  });

  it("past the budget a parent outlives its children: the least recently continued leaves go first", async () => {
    const store = env.RESPONSE_STORE.getByName("responses:chain-budget");
    const body = "x".repeat(300);
    expect(await store.put("resp_r", null, body, NOW, HOUR, 1_000)).toBe(true);
    expect(await store.put("resp_a1", "resp_r", body, NOW + 1, HOUR, 1_000)).toBe(true);
    expect(await store.put("resp_b1", null, body, NOW + 2, HOUR, 1_000)).toBe(true);
    // Over 1000 bytes: the oldest childless record goes (resp_b1), not the older root that resp_a1 continues.
    expect(await store.put("resp_a2", "resp_a1", body, NOW + 3, HOUR, 1_000)).toBe(true);
    expect(await store.get("resp_b1", NOW + 4)).toBeNull();
    expect(await store.chain("resp_a2", NOW + 4, 10_000)).toEqual([body, body, body]);
  });

  it("deleting a continued record hides it and keeps it for its children; it goes with its last child", async () => {
    const store = env.RESPONSE_STORE.getByName("responses:chain-delete");
    await store.put("resp_p", null, "p", NOW, HOUR, 1_000_000);
    await store.put("resp_k", "resp_p", "k", NOW, HOUR, 1_000_000);
    expect(await store.delete("resp_p")).toBe(true);
    expect(await store.get("resp_p", NOW)).toBeNull();
    expect(await store.chain("resp_p", NOW, 1_000)).toBeNull();
    expect(await store.delete("resp_p")).toBe(false);
    expect(await store.chain("resp_k", NOW, 1_000)).toEqual(["p", "k"]);
    expect(await store.put("resp_k2", "resp_p", "k2", NOW, HOUR, 1_000_000)).toBe(true);
    expect(await store.delete("resp_k")).toBe(true);
    expect(await store.chain("resp_k2", NOW, 1_000)).toEqual(["p", "k2"]);
    expect(await store.delete("resp_k2")).toBe(true);
    // The hidden parent went with its last child: a new child of it is refused.
    expect(await store.put("resp_k3", "resp_p", "k3", NOW, HOUR, 1_000_000)).toBe(false);
  });
});
