/**
 * Tenant and LoRA-adapter cache namespaces (src/edge/cache-salt.ts), from the request to the index:
 * the edge's cache_salt is a keyed hash (checked against Node's HMAC) that never contains the API
 * key; per_tenant separates keys, shared does not; adapters are always separated. The chain
 * simulator (SGLang-style salted radix cache) → KV-event bytes → relay decode → block set → index
 * then shows that no predicted overlap crosses tenants or adapters, and that each namespace still
 * predicts its own blocks.
 */
import { createHmac } from "node:crypto";
import { beforeAll, describe, expect, it } from "vitest";
import { parseEdgeConfig } from "../../../src/config/config.ts";
import { NotFoundError } from "../../../src/api/errors.ts";
import { cacheSaltFor } from "../../../src/edge/cache-salt.ts";
import { resolveModel } from "../../../src/edge/chat/resolve-model.ts";
import { localBlockHashes, namespacedLocalHashes, namespaceTag } from "../../../src/blocks/block-hash.ts";
import { decodeKvEventBatch } from "../../../src/engine-events/event-decode.ts";
import { RoutingCore } from "../../../src/routing-index/routing-core.ts";
import { WorkerBlockSet } from "../../../services/relay/worker-block-set.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { encodeEventBatch } from "../../../services/sglang-sim/kv-wire.ts";
import { PagedRadixCache, type KvEvent } from "../../../services/sglang-sim/radix-cache.ts";

const SECRET = "namespace-test-secret-0123456789";
const MODEL = "Qwen/Qwen3-VL-8B-Instruct";
const B = 4;

function config(sharing: "per_tenant" | "shared") {
  return parseEdgeConfig({
    KVEDGE_MODELS: JSON.stringify([{ id: MODEL, family: "qwen3_vl", templateId: "qwen3vl-instruct", blockSize: B, loraAdapters: ["sql-x", "chat-y"] }]),
    RELAY_SECRET: SECRET,
    KVEDGE_API_KEYS: "key-a-0123456789,key-b-0123456789",
    KVEDGE_KV_SHARING: sharing,
  });
}

const expectedSalt = (tenant: string | string[] | null, adapter: string | null) =>
  createHmac("sha256", SECRET).update(JSON.stringify(["kvedge-cache-salt-v1", tenant, adapter])).digest("base64url");

beforeAll(() => initHashing());

describe("cache_salt", () => {
  it("per_tenant: one keyed salt per API key (never the key), and per adapter", async () => {
    const c = config("per_tenant");
    const a = await cacheSaltFor(c, { tenant: { apiKey: "key-a-0123456789" }, adapter: null });
    const b = await cacheSaltFor(c, { tenant: { apiKey: "key-b-0123456789" }, adapter: null });
    expect(a).toBe(expectedSalt("key-a-0123456789", null));
    expect(a).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(a).not.toContain("key-a");
    expect(b).not.toBe(a);
    expect(await cacheSaltFor(c, { tenant: { apiKey: "key-a-0123456789" }, adapter: null })).toBe(a);
    expect(await cacheSaltFor(c, { tenant: { apiKey: "key-a-0123456789" }, adapter: "sql-x" })).toBe(expectedSalt("key-a-0123456789", "sql-x"));
    // The common namespace (no caller of the edge: a worker called directly): no salt.
    expect(await cacheSaltFor(c, { tenant: null, adapter: null })).toBeNull();
    // No pool secret: no worker can register, nothing to isolate.
    expect(await cacheSaltFor({ ...c, relaySecret: null }, { tenant: { apiKey: "key-a-0123456789" }, adapter: null })).toBeNull();
  });

  it("per_tenant: admin callers have one namespace of their own, keyless callers one per client network", async () => {
    const c = config("per_tenant");
    const admin = await cacheSaltFor(c, { tenant: { admin: true }, adapter: null });
    const v4 = await cacheSaltFor(c, { tenant: { network: "203.0.113.7/32" }, adapter: null });
    const v6 = await cacheSaltFor(c, { tenant: { network: "2001:db8:1:2::/64" }, adapter: null });
    expect(admin).toBe(expectedSalt(["admin"], null));
    expect(v4).toBe(expectedSalt(["network", "203.0.113.7/32"], null));
    expect(v6).toBe(expectedSalt(["network", "2001:db8:1:2::/64"], null));
    const key = await cacheSaltFor(c, { tenant: { apiKey: "key-a-0123456789" }, adapter: null });
    expect(new Set([admin, v4, v6, key, null]).size).toBe(5);
    // A key spelled like the admin tenant's part is still that key's own namespace.
    expect(await cacheSaltFor(c, { tenant: { apiKey: '["admin"]' }, adapter: null })).not.toBe(admin);
    expect(await cacheSaltFor(c, { tenant: { network: "203.0.113.7/32" }, adapter: "sql-x" })).toBe(expectedSalt(["network", "203.0.113.7/32"], "sql-x"));
    // shared: every caller in the common namespace (adapters still apart).
    const s = config("shared");
    for (const tenant of [{ admin: true as const }, { network: "203.0.113.7/32" }]) expect(await cacheSaltFor(s, { tenant, adapter: null })).toBeNull();
  });

  it("shared: tenants share the base namespace; adapters are still apart", async () => {
    const c = config("shared");
    expect(await cacheSaltFor(c, { tenant: { apiKey: "key-a-0123456789" }, adapter: null })).toBeNull();
    const x = await cacheSaltFor(c, { tenant: { apiKey: "key-a-0123456789" }, adapter: "sql-x" });
    expect(x).toBe(expectedSalt(null, "sql-x"));
    expect(await cacheSaltFor(c, { tenant: { apiKey: "key-b-0123456789" }, adapter: "sql-x" })).toBe(x);
    expect(await cacheSaltFor(c, { tenant: { apiKey: "key-a-0123456789" }, adapter: "chat-y" })).not.toBe(x);
  });

  it("model '<pool>:<adapter>' selects a configured adapter; anything else is model_not_found", () => {
    const c = config("per_tenant");
    expect(resolveModel(c, MODEL)).toMatchObject({ adapter: null, model: { id: MODEL } });
    expect(resolveModel(c, `${MODEL}:sql-x`)).toMatchObject({ adapter: "sql-x", model: { id: MODEL } });
    for (const bad of [`${MODEL}:nope`, `${MODEL}:`, "other:sql-x", ":sql-x"]) expect(() => resolveModel(c, bad), bad).toThrow(NotFoundError);
  });
});

describe("no predicted overlap crosses tenants or LoRA adapters", () => {
  /** A simulated worker serves `tokens` in `salt`'s namespace; its relay's view goes into `core`. */
  function serve(core: RoutingCore, workerId: string, tokens: number[], salt: string | null): void {
    const events: KvEvent[] = [];
    new PagedRadixCache(B, (e) => events.push(e)).insert(tokens, salt);
    const decoded = decodeKvEventBatch(encodeEventBatch(0, events, 0));
    expect(decoded.dropped).toEqual([]);
    const set = new WorkerBlockSet(B);
    set.apply(decoded.events);
    core.hello({ type: "hello", workerId, url: `https://${workerId}`, blockSize: B, epoch: 1, modelName: MODEL, contract: null, kvEvents: true }, workerId);
    expect(core.applyDump(workerId, set.dump(1, 0))).toMatchObject({ ok: true });
  }

  it("each namespace predicts only its own blocks", async () => {
    const c = config("per_tenant");
    const tokens = Array.from({ length: 40 }, (_, i) => 500 + i);
    const salt = (apiKey: string, adapter: string | null) => cacheSaltFor(c, { tenant: { apiKey }, adapter });
    const core = new RoutingCore({ blockSize: B, random: () => 0.5 });
    const sA = await salt("key-a-0123456789", null);
    const sAx = await salt("key-a-0123456789", "sql-x");
    serve(core, "w-a", tokens, sA);
    serve(core, "w-ax", tokens, sAx);
    serve(core, "w-plain", tokens, null);
    const overlapFor = (s: string | null) => {
      const p = core.peek({ localHashes: namespacedLocalHashes(localBlockHashes(tokens, B), namespaceTag(s)), isl: tokens.length });
      return Object.fromEntries(p.candidates.map((w) => [w.workerId, w.overlapBlocks]));
    };
    expect(overlapFor(sA)).toEqual({ "w-a": 10, "w-ax": 0, "w-plain": 0 });
    expect(overlapFor(sAx)).toEqual({ "w-a": 0, "w-ax": 10, "w-plain": 0 });
    expect(overlapFor(null)).toEqual({ "w-a": 0, "w-ax": 0, "w-plain": 10 });
    expect(overlapFor(await salt("key-b-0123456789", null))).toEqual({ "w-a": 0, "w-ax": 0, "w-plain": 0 });
    expect(overlapFor(await salt("key-a-0123456789", "chat-y"))).toEqual({ "w-a": 0, "w-ax": 0, "w-plain": 0 });
  });
});
