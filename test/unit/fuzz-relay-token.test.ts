/**
 * Relay connect tokens (src/kv/relay-auth.ts) under generated input: a minted token verifies for
 * exactly its worker, pool and time window; any single-character change, any other worker id
 * (dots included), pool, secret or clock outside ±skew is refused; arbitrary strings never pass.
 * The HMAC is checked against Node's own implementation.
 */
import { createHmac } from "node:crypto";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { checkRelayToken, mintRelayToken, parseRelayToken, relayWorkerKey, RELAY_TOKEN_MAX_SKEW_S } from "../../src/kv/relay-auth.ts";

const SECRET = "fuzz-relay-secret-0123456789";
const MODEL = "Qwen/Qwen3-VL-8B-Instruct";
const NOW = 1_800_000_000;
const RUNS = Number(process.env.KVEDGE_FUZZ_RUNS ?? 200);
const workerId = fc.stringMatching(/^[A-Za-z0-9._:-]{1,24}$/);

describe("relay connect tokens", () => {
  it("format and signature match an independent HMAC", async () => {
    const key = await relayWorkerKey(SECRET, "w.1");
    expect(key).toBe(createHmac("sha256", SECRET).update("relay:w.1").digest("hex"));
    const t = await mintRelayToken(key, "w.1", MODEL, { nowSeconds: NOW, nonce: "abcdefghijklmnop" });
    const mac = createHmac("sha256", key).update(`v1.w.1.${NOW}.abcdefghijklmnop\n${MODEL}`).digest("hex");
    expect(t).toBe(`v1.w.1.${NOW}.abcdefghijklmnop.${mac}`);
    expect(parseRelayToken(t)).toEqual({ workerId: "w.1", issuedAt: NOW, nonce: "abcdefghijklmnop" });
    expect(await checkRelayToken(SECRET, `Bearer ${t}`, { workerId: "w.1", model: MODEL, nowSeconds: NOW })).toEqual({
      ok: true,
      nonce: "abcdefghijklmnop",
      issuedAt: NOW,
      expiresAt: NOW + RELAY_TOKEN_MAX_SKEW_S,
    });
  });

  it("accepted only for its worker, pool, secret and time window; every one-character change is refused", async () => {
    await fc.assert(
      fc.asyncProperty(workerId, workerId, fc.integer({ min: -3 * RELAY_TOKEN_MAX_SKEW_S, max: 3 * RELAY_TOKEN_MAX_SKEW_S }), fc.nat(), fc.string({ minLength: 1, maxLength: 1 }), async (w, other, skew, at, ch) => {
        const t = await mintRelayToken(await relayWorkerKey(SECRET, w), w, MODEL, { nowSeconds: NOW });
        const check = (token: string, expect: Partial<{ workerId: string; model: string; nowSeconds: number }> = {}, secret = SECRET) =>
          checkRelayToken(secret, token, { workerId: w, model: MODEL, nowSeconds: NOW, ...expect });
        expect((await check(t)).ok).toBe(true);
        expect((await check(t, { nowSeconds: NOW + skew })).ok).toBe(Math.abs(skew) <= RELAY_TOKEN_MAX_SKEW_S);
        if (other !== w) expect((await check(t, { workerId: other })).ok).toBe(false);
        expect((await check(t, { model: "Qwen/Qwen2.5-VL-7B-Instruct" })).ok).toBe(false);
        expect((await check(t, {}, "another-secret-0123456789")).ok).toBe(false);
        const i = at % t.length;
        if (t[i] !== ch) expect((await check(t.slice(0, i) + ch + t.slice(i + 1))).ok).toBe(false);
      }),
      { numRuns: RUNS },
    );
  });

  it("arbitrary strings are refused without throwing", async () => {
    await fc.assert(
      fc.asyncProperty(fc.oneof(fc.string({ maxLength: 200 }), fc.stringMatching(/^v1\.[a-z0-9.]{0,20}\.\d{0,12}\.[A-Za-z0-9_-]{0,30}\.[0-9a-f]{0,64}$/)), async (s) => {
        const r = await checkRelayToken(SECRET, s, { workerId: "w1", model: MODEL, nowSeconds: NOW });
        expect(r.ok).toBe(false);
      }),
      { numRuns: RUNS },
    );
  });
});
