/**
 * ResponseStore inside workerd (durable-objects/response-store.ts): records expire after their TTL,
 * a tenant over its byte budget loses its oldest records first, a record larger than the budget is
 * refused, delete says whether it removed anything, the alarm clears the object, and one tenant's
 * object never answers for another's ids.
 */
import { env, runDurableObjectAlarm } from "cloudflare:test";
import { describe, expect, it } from "vitest";

const HOUR = 3_600_000;
/** Times from now: an expiry in the past would fire the object's alarm, which clears it. */
const NOW = Date.now();

describe("ResponseStore", () => {
  it("expires records after the TTL", async () => {
    const store = env.RESPONSE_STORE.getByName("responses:ttl");
    expect(await store.put("resp_a", '{"a":1}', NOW, HOUR, 1_000_000)).toBe(true);
    expect(await store.get("resp_a", NOW + HOUR - 1)).toBe('{"a":1}');
    expect(await store.get("resp_a", NOW + HOUR)).toBeNull();
  });

  it("drops the oldest records past the tenant's byte budget; refuses one larger than the budget", async () => {
    const store = env.RESPONSE_STORE.getByName("responses:budget");
    const body = "x".repeat(400);
    for (const [i, id] of ["resp_1", "resp_2", "resp_3"].entries()) expect(await store.put(id, body, NOW + i, HOUR, 1_000)).toBe(true);
    expect(await store.get("resp_1", NOW + 5)).toBeNull();
    expect(await store.get("resp_2", NOW + 5)).toBe(body);
    expect(await store.get("resp_3", NOW + 5)).toBe(body);
    expect(await store.put("resp_big", "y".repeat(1_001), NOW + 5, HOUR, 1_000)).toBe(false);
    expect(await store.get("resp_3", NOW + 5)).toBe(body);
  });

  it("delete reports whether a record was there; tenants are separate objects", async () => {
    const mine = env.RESPONSE_STORE.getByName("responses:mine");
    const theirs = env.RESPONSE_STORE.getByName("responses:theirs");
    await mine.put("resp_x", "{}", NOW, HOUR, 1_000_000);
    expect(await mine.get("resp_x", NOW)).toBe("{}");
    expect(await theirs.get("resp_x", NOW)).toBeNull();
    expect(await theirs.delete("resp_x")).toBe(false);
    expect(await mine.delete("resp_x")).toBe(true);
    expect(await mine.delete("resp_x")).toBe(false);
  });

  it("the alarm at the latest expiry leaves the object empty", async () => {
    const store = env.RESPONSE_STORE.getByName("responses:alarm");
    await store.put("resp_y", "{}", NOW, HOUR, 1_000_000);
    expect(await runDurableObjectAlarm(store)).toBe(true);
    expect(await store.get("resp_y", NOW)).toBeNull();
  });
});
