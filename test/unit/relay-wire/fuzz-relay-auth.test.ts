/**
 * Relay credentials (src/relay-wire/relay-auth.ts) under generated input: a key is HMAC(secret, binding)
 * (checked against Node's own HMAC); a token minted with a worker's credential verifies for exactly
 * its key, worker, audience and time window; any single-character change, another worker id (dots
 * included), audience or clock outside ±skew is refused; the edge's whole connect check refuses
 * unknown, revoked, other-pool and other-worker keys and URLs that no longer meet the policy;
 * worker URLs are https (http only with the development flag), never ftp:, file: or credentialed.
 */
import { createHmac } from "node:crypto";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  checkRelayToken,
  deriveRelayKey,
  formatRelayCredential,
  helloUrlMatchesKey,
  mintRelayToken,
  normalizeWorkerUrl,
  parseRelayCredential,
  RELAY_TOKEN_MAX_SKEW_S,
  relayTokenKeyId,
  verifyRelayConnect,
  type RelayKeyRecord,
} from "../../../src/relay-wire/relay-auth.ts";
import { RelayHelloSchema } from "../../../src/relay-wire/relay-protocol.ts";

const SECRET = "fuzz-relay-secret-0123456789";
const MODEL = "Qwen/Qwen3-VL-8B-Instruct";
const NOW = 1_800_000_000;
const RUNS = Number(process.env.KVEDGE_FUZZ_RUNS ?? 200);
const workerId = fc.stringMatching(/^[A-Za-z0-9._:-]{1,24}$/);
const KEY_ID = "AAAAAAAAAAAAAAAAAAAAAA";

function record(over: Partial<RelayKeyRecord> = {}): RelayKeyRecord {
  return { keyId: KEY_ID, model: MODEL, workerId: "w.1", url: "https://gpu-1.example:30000", dpSize: 1, storageGroup: null, createdAt: NOW, revokedAt: null, ...over };
}

async function credentialOf(rec: RelayKeyRecord, secret = SECRET): Promise<string> {
  return formatRelayCredential(rec.keyId, await deriveRelayKey(secret, rec));
}

describe("relay keys and connect tokens", () => {
  it("key, credential and token match an independent HMAC", async () => {
    const rec = record();
    const key = await deriveRelayKey(SECRET, rec);
    expect(key).toBe(createHmac("sha256", SECRET).update(JSON.stringify(["kvedge-relay-key-v1", KEY_ID, MODEL, "w.1", rec.url])).digest("hex"));
    const cred = await credentialOf(rec);
    expect(cred).toBe(`kvr1.${KEY_ID}.${key}`);
    expect(parseRelayCredential(`${cred}\n`)).toEqual({ keyId: KEY_ID, key });
    const t = await mintRelayToken(cred, "w.1", MODEL, { url: rec.url, nowSeconds: NOW, nonce: "abcdefghijklmnop" });
    const url64 = Buffer.from(rec.url).toString("base64url");
    const mac = createHmac("sha256", key).update(`v3.${KEY_ID}.w.1.${url64}.${NOW}.abcdefghijklmnop\n${MODEL}`).digest("hex");
    expect(t).toBe(`v3.${KEY_ID}.w.1.${url64}.${NOW}.abcdefghijklmnop.${mac}`);
    expect(relayTokenKeyId(`Bearer ${t}`)).toBe(KEY_ID);
    expect(await checkRelayToken({ keyId: KEY_ID, key }, `Bearer ${t}`, { workerId: "w.1", audience: MODEL, nowSeconds: NOW })).toEqual({
      ok: true,
      nonce: "abcdefghijklmnop",
      issuedAt: NOW,
      expiresAt: NOW + RELAY_TOKEN_MAX_SKEW_S,
      url: rec.url,
    });
    // Every part of the binding changes the key.
    for (const change of [{ keyId: "BAAAAAAAAAAAAAAAAAAAAA" }, { model: "other" }, { workerId: "w.2" }, { url: "https://gpu-2.example:30000" }])
      expect(await deriveRelayKey(SECRET, record(change))).not.toBe(key);
  });

  it("accepted only for its key, worker, audience and time window; every one-character change is refused", async () => {
    await fc.assert(
      fc.asyncProperty(workerId, workerId, fc.integer({ min: -3 * RELAY_TOKEN_MAX_SKEW_S, max: 3 * RELAY_TOKEN_MAX_SKEW_S }), fc.nat(), fc.string({ minLength: 1, maxLength: 1 }), async (w, other, skew, at, ch) => {
        const rec = record({ workerId: w });
        const key = { keyId: KEY_ID, key: await deriveRelayKey(SECRET, rec) };
        const t = await mintRelayToken(await credentialOf(rec), w, MODEL, { url: rec.url, nowSeconds: NOW });
        const check = (token: string, expect: Partial<{ workerId: string; audience: string; nowSeconds: number }> = {}, k = key) =>
          checkRelayToken(k, token, { workerId: w, audience: MODEL, nowSeconds: NOW, ...expect });
        expect((await check(t)).ok).toBe(true);
        expect((await check(t, { nowSeconds: NOW + skew })).ok).toBe(Math.abs(skew) <= RELAY_TOKEN_MAX_SKEW_S);
        if (other !== w) expect((await check(t, { workerId: other })).ok).toBe(false);
        expect((await check(t, { audience: "Qwen/Qwen2.5-VL-7B-Instruct" })).ok).toBe(false);
        expect((await check(t, {}, { keyId: KEY_ID, key: await deriveRelayKey("another-secret-0123456789", rec) })).ok).toBe(false);
        const i = at % t.length;
        if (t[i] !== ch) expect((await check(t.slice(0, i) + ch + t.slice(i + 1))).ok).toBe(false);
      }),
      { numRuns: RUNS },
    );
  });

  it("arbitrary strings are refused without throwing", async () => {
    const key = { keyId: KEY_ID, key: await deriveRelayKey(SECRET, record()) };
    await fc.assert(
      fc.asyncProperty(fc.oneof(fc.string({ maxLength: 200 }), fc.stringMatching(/^v3\.[A-Za-z0-9_-]{22}\.[a-z0-9.]{0,20}\.[A-Za-z0-9_-]{0,40}\.\d{0,12}\.[A-Za-z0-9_-]{0,30}\.[0-9a-f]{0,64}$/)), async (s) => {
        expect((await checkRelayToken(key, s, { workerId: "w.1", audience: MODEL, nowSeconds: NOW })).ok).toBe(false);
        expect((await verifyRelayConnect(SECRET, s, { workerId: "w.1", model: MODEL, audience: MODEL, nowSeconds: NOW, allowHttp: false }, async () => record())).ok).toBe(false);
      }),
      { numRuns: RUNS },
    );
  });
});

describe("the edge's connect check", () => {
  const expectFor = (over: Partial<Parameters<typeof verifyRelayConnect>[2]> = {}) => ({
    workerId: "w.1",
    model: MODEL,
    audience: MODEL,
    nowSeconds: NOW,
    allowHttp: false,
    ...over,
  });

  it("a key for worker A cannot connect as worker B; unknown, revoked, other-pool keys and insecure URLs are refused", async () => {
    const a = record();
    const credA = await credentialOf(a);
    const registry = new Map([[a.keyId, a]]);
    let lookups = 0;
    const lookup = async (id: string) => {
      lookups++;
      return registry.get(id) ?? null;
    };
    const token = (w: string, cred = credA, url = a.url) => mintRelayToken(cred, w, MODEL, { url, nowSeconds: NOW });

    const ok = await verifyRelayConnect(SECRET, await token("w.1"), expectFor(), lookup);
    expect(ok).toMatchObject({ ok: true, record: a });
    // Worker B with A's key (signed for B, or A's token presented as B), or A's key claiming
    // another URL: refused before the registry is asked (no Durable Object touched on the edge).
    lookups = 0;
    expect(await verifyRelayConnect(SECRET, await token("w.2"), expectFor({ workerId: "w.2" }), lookup)).toEqual({ ok: false, reason: "bad_signature" });
    expect(await verifyRelayConnect(SECRET, await token("w.1"), expectFor({ workerId: "w.2" }), lookup)).toEqual({ ok: false, reason: "worker_mismatch" });
    expect(await verifyRelayConnect(SECRET, await token("w.1", credA, "https://gpu-9.example:30000"), expectFor(), lookup)).toEqual({ ok: false, reason: "bad_signature" });
    const forged = await credentialOf(a, "another-secret-0123456789");
    expect(await verifyRelayConnect(SECRET, await token("w.1", forged), expectFor(), lookup)).toEqual({ ok: false, reason: "bad_signature" });
    expect(lookups).toBe(0);
    // A key nobody issued (derived with the right secret but never registered).
    const stray = await credentialOf(record({ keyId: "CAAAAAAAAAAAAAAAAAAAAA" }));
    expect(await verifyRelayConnect(SECRET, await token("w.1", stray), expectFor(), lookup)).toEqual({ ok: false, reason: "unknown_key" });
    // Presented to another pool: the key is derived for that pool, so the signature fails.
    expect(await verifyRelayConnect(SECRET, await token("w.1"), expectFor({ model: "other" }), lookup)).toEqual({ ok: false, reason: "bad_signature" });
    // Revoked.
    registry.set(a.keyId, { ...a, revokedAt: NOW });
    expect(await verifyRelayConnect(SECRET, await token("w.1"), expectFor(), lookup)).toEqual({ ok: false, reason: "revoked" });
    // An http-bound key stops working when the development flag is off.
    const h = record({ url: "http://127.0.0.1:30000" });
    registry.set(h.keyId, h);
    const credH = await credentialOf(h);
    expect((await verifyRelayConnect(SECRET, await token("w.1", credH, h.url), expectFor({ allowHttp: true }), lookup)).ok).toBe(true);
    expect(await verifyRelayConnect(SECRET, await token("w.1", credH, h.url), expectFor(), lookup)).toEqual({ ok: false, reason: "insecure_url" });
    // No pool secret on the edge: nothing verifies.
    expect((await verifyRelayConnect(null, await token("w.1", credH, h.url), expectFor({ allowHttp: true }), lookup)).ok).toBe(false);
  });

  it("worker URLs: https only (http with the development flag); no ftp:, file:, credentials, query or fragment", () => {
    expect(normalizeWorkerUrl("https://gpu-1.example:30000/", { allowHttp: false })).toEqual({ ok: true, url: "https://gpu-1.example:30000" });
    expect(normalizeWorkerUrl("HTTPS://GPU-1.example/sglang//", { allowHttp: false })).toEqual({ ok: true, url: "https://gpu-1.example/sglang" });
    expect(normalizeWorkerUrl("http://127.0.0.1:30000", { allowHttp: false }).ok).toBe(false);
    expect(normalizeWorkerUrl("http://127.0.0.1:30000", { allowHttp: true })).toEqual({ ok: true, url: "http://127.0.0.1:30000" });
    for (const bad of ["ftp://gpu-1.example/", "file:///etc/passwd", "https://user:pw@gpu-1.example", "https://user@gpu-1.example", "https://gpu-1.example/?x=1", "https://gpu-1.example/#f", "javascript:alert(1)", "data:text/plain,x", "gpu-1.example", ""])
      expect(normalizeWorkerUrl(bad, { allowHttp: true }).ok, bad).toBe(false);
    // A hello's url must be the bound one (any spelling that normalises to it).
    expect(helloUrlMatchesKey("https://gpu-1.example:30000/", "https://gpu-1.example:30000")).toBe(true);
    expect(helloUrlMatchesKey("https://gpu-2.example:30000", "https://gpu-1.example:30000")).toBe(false);
    expect(helloUrlMatchesKey("https://x:y@gpu-1.example:30000", "https://gpu-1.example:30000")).toBe(false);
    expect(helloUrlMatchesKey("https://gpu-1.example:30000", undefined)).toBe(false);
    // The hello schema itself refuses what could never be bound.
    const hello = (url: string) => RelayHelloSchema.safeParse({ type: "hello", workerId: "w.1", url, blockSize: 16, epoch: 1, modelName: MODEL }).success;
    expect(hello("https://gpu-1.example:30000")).toBe(true);
    for (const bad of ["ftp://gpu-1.example/", "file:///etc/passwd", "https://user:pw@gpu-1.example", "gopher://x", "not a url"]) expect(hello(bad), bad).toBe(false);
  });
});
