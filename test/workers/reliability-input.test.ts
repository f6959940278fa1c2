/**
 * Bad input, inside workerd against the real edge Worker and routing index:
 * - a generated corpus (fast-check) of malformed chat requests — wrong types, deep nesting, huge
 *   strings, invalid UTF-8 bytes, unknown and forbidden fields, refused media URLs (private
 *   addresses in every spelling, bad schemes), too many media items, non-object bodies — always
 *   gets a 4xx in the OpenAI error shape: never a 5xx, an exception or a hang;
 * - a generated corpus of bad relay messages (malformed JSON, binary junk, unknown message types
 *   and event tags, malformed hashes, stale epochs, self-referencing and repeated blocks, unknown
 *   parents) is counted and dropped, and the index holds exactly what it held before.
 */
import { SELF } from "cloudflare:test";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { mintRelayToken } from "../../src/relay-wire/relay-auth.ts";
import { localBlockHashes } from "../../src/blocks/block-hash.ts";
import { localHashToHex } from "../../src/relay-wire/relay-protocol.ts";
import { initHashing } from "../../src/util/hash.ts";
import "../../functions/wasm-shim.ts";
import { issueRelayKey, nextMessage, TEST_WORKER_URL } from "./ws-helpers.ts";

const MODEL = "Qwen/Qwen3-VL-8B-Instruct";
const ADMIN = "test-admin-token-0123456789";
/** Corpus size: KVEDGE_FUZZ_RUNS is not visible inside workerd, so the soak script cannot raise it. */
const RUNS = 400;

// ---- malformed chat requests ----------------------------------------------------------------

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
const base = (): { [k: string]: Json } => ({ model: MODEL, messages: [{ role: "user", content: "Describe the picture." }] });

/** Values of the wrong JSON type for a field that wants `kind`. */
const notA = (kind: "string" | "number" | "boolean" | "array" | "object"): fc.Arbitrary<Json> =>
  fc.oneof(
    ...(kind !== "string" ? [fc.string({ maxLength: 8 }) as fc.Arbitrary<Json>] : []),
    ...(kind !== "number" ? [fc.integer() as fc.Arbitrary<Json>] : []),
    ...(kind !== "boolean" ? [fc.boolean() as fc.Arbitrary<Json>] : []),
    ...(kind !== "array" ? [fc.constant([1, "x"] as Json)] : []),
    ...(kind !== "object" ? [fc.constant({ a: 1 } as Json)] : []),
  );

const wrongTypes: fc.Arbitrary<{ [k: string]: Json }> = fc.oneof(
  notA("string").filter((v) => v !== null).map((v) => ({ ...base(), model: v })),
  fc.oneof(notA("array"), fc.constant([] as Json), fc.constant(null)).map((v) => ({ ...base(), messages: v })),
  fc.oneof(fc.string({ maxLength: 8 }), fc.integer(), fc.constant(null), fc.constant([[]] as Json)).map((m) => ({ ...base(), messages: [m] })),
  fc.oneof(fc.integer(), fc.constant({ r: 1 } as Json), fc.constantFrom("robot", "", "root")).map((role) => ({ ...base(), messages: [{ role, content: "x" }] })),
  fc
    .oneof(
      fc.integer() as fc.Arbitrary<Json>,
      fc.boolean() as fc.Arbitrary<Json>,
      fc.constant({ type: "text" } as Json),
      fc.constant([{ type: "no_such_part", text: "x" }] as Json),
      fc.constant([{ type: "text" }] as Json),
      fc.constant([{ type: "text", text: 5 }] as Json),
      fc.constant([{ type: "image_url", image_url: 5 }] as Json),
      fc.constant([{ type: "image_url", image_url: { url: 7 } }] as Json),
    )
    .map((content) => ({ ...base(), messages: [{ role: "user", content }] })),
  fc
    .tuple(
      fc.constantFrom("max_tokens", "max_completion_tokens", "n", "temperature", "top_p", "seed", "presence_penalty", "frequency_penalty"),
      fc.oneof(fc.string({ maxLength: 6 }) as fc.Arbitrary<Json>, fc.constant({} as Json), fc.constant([1] as Json), fc.boolean() as fc.Arbitrary<Json>),
    )
    .map(([k, v]) => ({ ...base(), [k]: v })),
  fc.constantFrom<[string, Json]>(
    ["max_tokens", -1],
    ["max_tokens", 1.5],
    ["max_tokens", 10_000_000],
    ["n", 0],
    ["n", 9],
    ["stream", "yes"],
    ["stream", 1],
    ["stop", 5],
    ["stop", [1, 2]],
    ["stop", Array.from({ length: 17 }, (_, i) => `s${i}`)],
    ["tools", "x"],
    ["tools", [5]],
    ["logprobs", "yes"],
    ["top_logprobs", 21],
    ["rid", "mine"],
    ["session_id", "s"],
    ["input_ids", [1, 2, 3]],
    ["cache_salt", "x"],
  ).map(([k, v]) => ({ ...base(), [k]: v })),
);

const REFUSED_URLS = [
  "http://127.0.0.1/a.png", "http://localhost/a.png", "http://10.1.2.3/x.png", "http://169.254.169.254/latest/meta-data",
  "http://[::1]/a.png", "http://[::ffff:127.0.0.1]/a", "http://0177.0.0.1/a", "http://2130706433/a", "http://0x7f.1/a",
  "http://127.1/a", "http://100.64.0.1/a", "http://224.0.0.1/a", "http://192.168.1.1/a", "http://172.16.0.1/a",
  "http://0.0.0.0/a", "http://[fe80::1]/a", "http://[fd00::1]/a", "http://[::]/a", "file:///etc/passwd",
  "ftp://example.com/a.png", "javascript:alert(1)", "gopher://example.com/", "http://", "not a url", "",
  "http://user:pass@example.com/a.png", "http://metadata.google.internal/a", "http://localhost./a", "http://foo.localhost/a",
];
const badUrls = fc
  .tuple(fc.constantFrom(...REFUSED_URLS), fc.constantFrom("image_url", "video_url"), fc.nat(3))
  .map(([url, kind, before]) => ({
    ...base(),
    messages: [
      {
        role: "user",
        content: [
          ...Array.from({ length: before }, () => ({ type: "text", text: "look" })),
          kind === "image_url" ? { type: "image_url", image_url: { url } } : { type: "video_url", video_url: { url } },
        ],
      },
    ],
  }));

const tooManyMedia = fc.integer({ min: 65, max: 300 }).map((n) => ({
  ...base(),
  messages: [{ role: "user", content: Array.from({ length: n }, (_, i) => ({ type: "image_url", image_url: { url: `https://example.com/${i}.png` } })) }],
}));

/** Unknown fields never rescue a malformed request (nor break a refusal); `__proto__` is refused. */
const unknownFields = fc.dictionary(
  fc.string({ minLength: 1, maxLength: 10 }).map((k) => `x_${k}`),
  fc.jsonValue({ maxDepth: 3 }) as fc.Arbitrary<Json>,
  { maxKeys: 4 },
);

const deepNesting = fc.tuple(fc.integer({ min: 65, max: 20_000 }), fc.constantFrom("[", "{\"a\":")).map(([depth, open]) => {
  const close = open === "[" ? "]" : "}";
  return `{"model":"${MODEL}","messages":[{"role":"user","content":"x"}],"x_nest":${open.repeat(depth)}1${close.repeat(depth)}}`;
});

const enc = new TextEncoder();
const INVALID_UTF8 = [[0xff], [0xc3, 0x28], [0xe2, 0x82], [0xed, 0xa0, 0x80], [0xf8, 0x88, 0x80, 0x80, 0x80], [0xc0, 0xaf], [0x80]];
const invalidUtf8 = fc.tuple(fc.constantFrom(...INVALID_UTF8), fc.nat(20)).map(([bad, at]) => {
  const head = enc.encode(`{"model":"${MODEL}","messages":[{"role":"user","content":"abc`);
  const text = enc.encode("x".repeat(at));
  const tail = enc.encode(`def"}]}`);
  const out = new Uint8Array(head.length + text.length + bad.length + tail.length);
  out.set(head, 0);
  out.set(text, head.length);
  out.set(bad, head.length + text.length);
  out.set(tail, head.length + text.length + bad.length);
  return out;
});

const notAnObject = fc.constantFrom("", " ", "null", "[]", "[{}]", "1", '"s"', "true", "{", '{"model":', "{}", '{"messages":[]}', "\u0000");

/** Limits: one message over 1M characters (400); a body over 20 MiB (413). Costly: a few only. */
const huge = fc.constantFrom(1_000_001, 21 * 1024 * 1024).map((n) => JSON.stringify({ ...base(), messages: [{ role: "user", content: "y".repeat(n) }] }));

type Case = { kind: string; body: string | Uint8Array };
const corpus: fc.Arbitrary<Case> = fc.oneof(
  { weight: 6, arbitrary: fc.tuple(wrongTypes, unknownFields).map(([b, u]) => ({ kind: "wrong_type", body: JSON.stringify({ ...u, ...b }) })) },
  { weight: 3, arbitrary: fc.tuple(badUrls, unknownFields).map(([b, u]) => ({ kind: "bad_url", body: JSON.stringify({ ...u, ...b }) })) },
  { weight: 1, arbitrary: tooManyMedia.map((b) => ({ kind: "media_count", body: JSON.stringify(b) })) },
  { weight: 2, arbitrary: deepNesting.map((body) => ({ kind: "deep_nesting", body })) },
  { weight: 2, arbitrary: invalidUtf8.map((body) => ({ kind: "invalid_utf8", body })) },
  { weight: 2, arbitrary: notAnObject.map((body) => ({ kind: "not_an_object", body })) },
  { weight: 1, arbitrary: fc.constant({ kind: "proto_key", body: `{"__proto__":{"x":1},"model":"${MODEL}","messages":[{"role":"user","content":"x"}]}` }) },
  { weight: 1, arbitrary: fc.constant({ kind: "unknown_model", body: JSON.stringify({ ...base(), model: "no/such-model" }) }) },
);

async function send(body: string | Uint8Array): Promise<Response> {
  const hang = new Promise<never>((_, reject) => setTimeout(() => reject(new Error("no answer within 20 s")), 20_000));
  return Promise.race([SELF.fetch("https://edge/v1/chat/completions", { method: "POST", headers: { "content-type": "application/json" }, body }), hang]);
}

async function expect4xxOpenAI(c: Case): Promise<number> {
  const r = await send(c.body);
  const text = await r.text();
  const where = `${c.kind}: ${typeof c.body === "string" ? c.body.slice(0, 160) : `<${c.body.length} bytes>`} → ${r.status} ${text.slice(0, 200)}`;
  expect(r.status >= 400 && r.status < 500, where).toBe(true);
  const j = JSON.parse(text) as { error?: Record<string, unknown> };
  expect(Object.keys(j.error ?? {}).sort(), where).toEqual(["code", "message", "param", "type"]);
  expect(typeof j.error!.message, where).toBe("string");
  return r.status;
}

describe("malformed chat requests (generated corpus)", () => {
  it(`${RUNS} generated cases + ${2} huge bodies: always a 4xx in the OpenAI error shape`, async () => {
    const byKind: Record<string, number> = {};
    const statuses: Record<number, number> = {};
    await fc.assert(
      fc.asyncProperty(corpus, async (c) => {
        const s = await expect4xxOpenAI(c);
        byKind[c.kind] = (byKind[c.kind] ?? 0) + 1;
        statuses[s] = (statuses[s] ?? 0) + 1;
      }),
      { numRuns: RUNS },
    );
    for (const body of fc.sample(huge, { numRuns: 2, seed: 1 })) await expect4xxOpenAI({ kind: "huge", body });
    await expect4xxOpenAI({ kind: "huge", body: JSON.stringify({ ...base(), messages: [{ role: "user", content: "z".repeat(21 * 1024 * 1024) }] }) });
    // Still serving.
    expect((await SELF.fetch("https://edge/healthz")).status).toBe(200);
    console.log(`bad-input corpus: ${RUNS + 3} requests, by kind ${JSON.stringify(byKind)}, statuses ${JSON.stringify(statuses)}`);
  });
});

// ---- bad relay messages ---------------------------------------------------------------------

async function admin<T>(path: string): Promise<T> {
  const r = await SELF.fetch(`https://edge${path}`, { headers: { authorization: `Bearer ${ADMIN}` } });
  expect(r.status).toBe(200);
  return (await r.json()) as T;
}

interface Counters {
  eventsDropped: number;
  dropReasons: Record<string, number>;
}

async function snapshot(): Promise<{ registry: unknown; hashes: Record<string, string[]>; indexedBlocks: number; counters: Counters }> {
  const { workers } = await admin<{ workers: { workerId: string; url: string; epoch: number; status: string; blocks: number; contractDigest: string | null }[] }>("/admin/workers");
  const { stats } = await admin<{ stats: { indexedBlocks: number; counters: Counters } }>("/admin/stats");
  const hashes: Record<string, string[]> = {};
  for (const w of workers) hashes[w.workerId] = (await admin<{ localHashes: string[] }>(`/admin/workers/${w.workerId}/local-hashes`)).localHashes.sort();
  const registry = workers.map(({ workerId, url, epoch, status, blocks, contractDigest }) => ({ workerId, url, epoch, status, blocks, contractDigest }));
  return { registry, hashes, indexedBlocks: stats.indexedBlocks, counters: stats.counters };
}


async function relay(workerId: string): Promise<WebSocket> {
  const token = await mintRelayToken(await issueRelayKey((u, i) => SELF.fetch(u, i), workerId), workerId, MODEL, { url: TEST_WORKER_URL });
  const res = await SELF.fetch(`https://edge/v1/relay?worker=${workerId}&model=${encodeURIComponent(MODEL)}`, {
    headers: { upgrade: "websocket", authorization: `Bearer ${token}` },
  });
  expect(res.status).toBe(101);
  const ws = res.webSocket!;
  ws.accept();
  return ws;
}

const EPOCH = 3;
const hashArb = fc.oneof(fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }).map(String), fc.constantFrom("0", "-1", "9223372036854775807"));
const localArb = fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }).map((b) => b.toString(16).padStart(16, "0"));

/** Messages a broken relay could send, each one to be counted and dropped, changing no block. */
function badRelayMessages(known: string[]): fc.Arbitrary<{ kind: string; frame: string | Uint8Array; counted: boolean }> {
  const knownArb = fc.constantFrom(...known);
  const ev = (events: unknown[], epoch = EPOCH) => JSON.stringify({ type: "events", epoch, seq: 1, events });
  return fc.oneof(
    fc.string({ maxLength: 40 }).filter((s) => { try { JSON.parse(s); return false; } catch { return true; } }).map((s) => ({ kind: "malformed_json", frame: s, counted: true })),
    fc.uint8Array({ minLength: 1, maxLength: 64 }).map((b) => ({ kind: "binary_junk", frame: b, counted: true })),
    fc.jsonValue({ maxDepth: 2 }).filter((v) => typeof v !== "object" || v === null || Array.isArray(v)).map((v) => ({ kind: "not_an_object", frame: JSON.stringify(v), counted: true })),
    fc.constantFrom("bogus", "Dump", "", "events ").map((type) => ({ kind: "unknown_type", frame: JSON.stringify({ type, epoch: EPOCH, seq: 1, events: [] }), counted: true })),
    fc.constantFrom("BlockStored", "mutated", "STORED", "").map((t) => ({ kind: "unknown_event_tag", frame: ev([{ t, parent: null, blocks: [{ h: "1", l: "0".repeat(16) }] }]), counted: true })),
    fc.tuple(fc.constantFrom("abc", "1.5", "", "123456789012345678901", "0x10", " 1"), localArb).map(([h, l]) => ({ kind: "bad_engine_hash", frame: ev([{ t: "stored", parent: null, blocks: [{ h, l }] }]), counted: true })),
    fc.tuple(hashArb, fc.constantFrom("XYZ", "0".repeat(15), "0".repeat(17), "ABCDEF0123456789", "")).map(([h, l]) => ({ kind: "bad_local_hash", frame: ev([{ t: "stored", parent: null, blocks: [{ h, l }] }]), counted: true })),
    fc.tuple(hashArb, localArb, fc.constantFrom(EPOCH - 1, EPOCH + 1)).map(([h, l, epoch]) => ({ kind: "stale_epoch", frame: ev([{ t: "stored", parent: null, blocks: [{ h, l }] }], epoch), counted: true })),
    fc.tuple(knownArb, localArb).map(([h, l]) => ({ kind: "self_parent", frame: ev([{ t: "stored", parent: h, blocks: [{ h, l }] }]), counted: true })),
    fc.tuple(knownArb, hashArb, localArb, localArb).map(([p, h, l1, l2]) => ({ kind: "self_parent_in_chain", frame: ev([{ t: "stored", parent: p, blocks: [{ h, l: l1 }, { h: p, l: l2 }] }]), counted: true })),
    fc.tuple(knownArb, hashArb, localArb).map(([p, h, l]) => ({ kind: "repeated_in_chain", frame: ev([{ t: "stored", parent: p, blocks: [{ h, l }, { h, l }] }]), counted: true })),
    fc.tuple(hashArb, hashArb, localArb).filter(([p]) => !known.includes(p)).map(([p, h, l]) => ({ kind: "unknown_parent", frame: ev([{ t: "stored", parent: p, blocks: [{ h, l }] }]), counted: true })),
    fc.constant({ kind: "empty_chain", frame: ev([{ t: "stored", parent: null, blocks: [] }]), counted: true }),
    fc.constant({ kind: "dump_bad_rows", frame: JSON.stringify({ type: "dump", epoch: EPOCH, seq: 1, blocks: [{ h: "x", p: null, l: "0" }] }), counted: true }),
    fc.tuple(hashArb).filter(([h]) => !known.includes(h)).map(([h]) => ({ kind: "remove_unknown", frame: ev([{ t: "removed", hashes: [h] }]), counted: false })),
    fc.constantFrom("up", "down").map((status) => ({ kind: "status_stale_epoch", frame: JSON.stringify({ type: "status", epoch: EPOCH - 1, status }), counted: false })),
  );
}

describe("bad relay messages (generated corpus)", () => {
  it("are counted and dropped; the index holds exactly what it held before", async () => {
    await initHashing();
    const ws = await relay("fuzz-w1");
    const welcome = nextMessage(ws, "welcome");
    ws.send(JSON.stringify({ type: "hello", workerId: "fuzz-w1", url: TEST_WORKER_URL, blockSize: 16, epoch: EPOCH, modelName: MODEL }));
    await welcome;
    const locals = localBlockHashes(Array.from({ length: 8 * 16 }, (_, i) => 7000 + i), 16);
    const rows = locals.map((l, i) => ({ h: String(-5000 - i), p: i === 0 ? null : String(-4999 - i), l: localHashToHex(l) }));
    const dump = JSON.stringify({ type: "dump", epoch: EPOCH, seq: 0, blocks: rows });
    const ack = nextMessage(ws, "ack");
    ws.send(dump);
    await ack;
    const before = await snapshot();
    expect(before.hashes["fuzz-w1"]).toHaveLength(8);

    // Unknown parents make the index ask for a resync and drop later events as not synced: last.
    const cases = fc
      .sample(badRelayMessages(rows.map((r) => r.h)), { numRuns: RUNS, seed: 7 })
      .sort((a, b) => Number(a.kind === "unknown_parent") - Number(b.kind === "unknown_parent"));
    const kinds: Record<string, number> = {};
    for (const c of cases) {
      ws.send(c.frame);
      kinds[c.kind] = (kinds[c.kind] ?? 0) + 1;
    }
    // Messages are handled in order: once the pong is back, every frame above has been processed.
    const pong = nextMessage(ws, "pong");
    ws.send(JSON.stringify({ type: "ping", t: 1 }));
    await pong;
    const after = await snapshot();
    expect(after.registry).toEqual(before.registry);
    expect(after.hashes).toEqual(before.hashes);
    expect(after.indexedBlocks).toBe(before.indexedBlocks);
    const counted = cases.filter((c) => c.counted).length;
    expect(after.counters.eventsDropped - before.counters.eventsDropped).toBeGreaterThanOrEqual(counted);
    for (const reason of ["bad_message", "stale_epoch", "self_parent", "duplicate_in_event", "parent_not_found"])
      expect(after.counters.dropReasons[reason] ?? 0, reason).toBeGreaterThan(before.counters.dropReasons[reason] ?? 0);

    // An unknown parent asked for a resync; the relay's fresh dump brings the same view back.
    const ack2 = nextMessage(ws, "ack");
    ws.send(dump);
    await ack2;
    expect((await snapshot()).hashes).toEqual(before.hashes);
    console.log(`bad relay corpus: ${cases.length} messages (${counted} counted as drops), kinds ${JSON.stringify(kinds)}`);
  });

  it("a hello with the wrong block size or a foreign worker id is refused without touching the pool", async () => {
    const before = await snapshot();
    for (const [socketWorker, hello] of [
      ["fuzz-w2", { workerId: "fuzz-w2", blockSize: 32 }],
      ["fuzz-w3", { workerId: "fuzz-w1", blockSize: 16 }],
    ] as const) {
      const ws = await relay(socketWorker);
      const err = nextMessage(ws, "error");
      ws.send(JSON.stringify({ type: "hello", url: TEST_WORKER_URL, epoch: 1, modelName: MODEL, ...hello }));
      await err;
    }
    const after = await snapshot();
    expect(after.registry).toEqual(before.registry);
    expect(after.hashes).toEqual(before.hashes);
  });
});
