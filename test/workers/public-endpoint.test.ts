/**
 * Ready for a public endpoint, inside workerd (the real edge Worker and Durable Objects):
 * - closed by default: without API keys and without KVEDGE_ACCESS=public, `/v1` serves nobody;
 * - configuration is parsed by zod at start-up: an invalid value answers every request with a
 *   generic 500 (the log names the var and field once), never a silent default;
 * - rate limits on by default: per client /64 (IPv6) or /32 (IPv4), failed authentication and
 *   operator routes included; the limiter's stored state expires by alarm;
 * - the dashboard session: the token is POSTed once (a token in a URL is refused), the cookie
 *   expires and is checked server-side;
 * - bounded work: a 19 MB tool schema is refused before it is parsed.
 */
import { SELF, createExecutionContext, env, runDurableObjectAlarm, runInDurableObject, waitOnExecutionContext } from "cloudflare:test";
import { describe, expect, it, vi } from "vitest";
import worker from "../../functions/index.ts";
import { CONFIG_ERROR_MESSAGE } from "../../src/api/errors.ts";
import { sessionValue } from "../../src/edge/admin-routes.ts";
import "../../functions/wasm-shim.ts";

const MODEL = "Qwen/Qwen2.5-VL-7B-Instruct"; // a pool without workers: admitted requests end in 503
const ADMIN = "test-admin-token-0123456789";

type Vars = Record<string, string | undefined>;

async function call(vars: Vars, path: string, init: RequestInit & { ip?: string } = {}): Promise<Response> {
  return callEnv({ ...env, ...vars }, path, init);
}

/** One request to the Worker with this env object (the Worker parses and logs a config once per env object). */
async function callEnv(workerEnv: object, path: string, init: RequestInit & { ip?: string } = {}): Promise<Response> {
  const headers = new Headers(init.headers);
  if (init.ip) headers.set("cf-connecting-ip", init.ip);
  const req = new Request(`https://edge${path}`, { ...init, headers });
  const ctx = createExecutionContext();
  const res = await worker.fetch(req as Request<unknown, IncomingRequestCfProperties>, workerEnv as never, ctx);
  await waitOnExecutionContext(ctx);
  return res;
}

function chat(vars: Vars, opts: { ip?: string; auth?: string; body?: unknown } = {}): Promise<Response> {
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (opts.auth) headers.authorization = opts.auth;
  const body = opts.body ?? { model: MODEL, messages: [{ role: "user", content: "hi" }] };
  return call(vars, "/v1/chat/completions", { method: "POST", headers, body: JSON.stringify(body), ...(opts.ip ? { ip: opts.ip } : {}) });
}

/** Waits until a rate-limit bucket is full again: the moment its stored state names has passed (a few hundred ms here). */
async function untilFull(stub: ReturnType<typeof env.RATE_LIMITER.getByName>): Promise<void> {
  const fullAt = await runInDurableObject(stub, (_o, state) => state.storage.kv.get<{ fullAt: number }>("bucket")?.fullAt ?? 0);
  while (Date.now() <= fullAt) await new Promise((r) => setTimeout(r, fullAt - Date.now() + 1));
}

async function openAIError(r: Response, status: number): Promise<{ message: string; type: string; param: string | null; code: string | null }> {
  expect(r.status).toBe(status);
  const j = (await r.json()) as { error: { message: string; type: string; param: string | null; code: string | null } };
  expect(Object.keys(j.error).sort()).toEqual(["code", "message", "param", "type"]);
  return j.error;
}

describe("closed by default", () => {
  it("without API keys and without KVEDGE_ACCESS=public, /v1 serves nobody", async () => {
    const closed = { KVEDGE_ACCESS: undefined, KVEDGE_API_KEYS: undefined };
    const e = await openAIError(await chat(closed), 401);
    expect(e.message).toMatch(/KVEDGE_API_KEYS/);
    await openAIError(await call(closed, "/v1/models"), 401);
    // The admin token still works (operators can try the API).
    expect((await chat(closed, { auth: `Bearer ${ADMIN}` })).status).toBe(503);
    // An explicit public mode opens it.
    expect((await chat({ KVEDGE_ACCESS: "public" })).status).toBe(503);
    // Keys configured: only a listed key.
    const keyed = { KVEDGE_ACCESS: undefined, KVEDGE_API_KEYS: "k-one-0123456789" };
    await openAIError(await chat(keyed), 401);
    expect((await chat(keyed, { auth: "Bearer k-one-0123456789" })).status).toBe(503);
  });
});

describe("configuration by zod", () => {
  const cases: [string, Vars, RegExp][] = [
    ["wrong type", { KVEDGE_ROUTING: '{"maxAttempts":"3"}' }, /KVEDGE_ROUTING\.maxAttempts/],
    ["misspelt field", { KVEDGE_ROUTING: '{"maxAttempt":3}' }, /KVEDGE_ROUTING.*maxAttempt/],
    ["out of range", { KVEDGE_ROUTING: '{"upstreamIdleTimeoutMs":5}' }, /KVEDGE_ROUTING\.upstreamIdleTimeoutMs/],
    ["duplication weight out of range", { KVEDGE_ROUTING: '{"duplicateWeight":11}' }, /KVEDGE_ROUTING\.duplicateWeight/],
    ["not JSON", { KVEDGE_ROUTING: "{maxAttempts:3" }, /KVEDGE_ROUTING is not valid JSON/],
    ["bad regions", { KVEDGE_REGIONS: '{"defaultRttMs":-1}' }, /KVEDGE_REGIONS\.defaultRttMs/],
    ["bad limits field", { KVEDGE_LIMITS: '{"maxBodyByte":1}' }, /KVEDGE_LIMITS/],
    ["bad rate limit", { KVEDGE_RATE_LIMIT: '{"burst":0}' }, /KVEDGE_RATE_LIMIT\.burst/],
    ["bad access mode", { KVEDGE_ACCESS: "open" }, /KVEDGE_ACCESS/],
    ["bad shards", { KVEDGE_SHARDS: "many" }, /KVEDGE_SHARDS/],
    ["bad media policy field", { KVEDGE_MEDIA: '{"maxByte":1}' }, /KVEDGE_MEDIA/],
    // Found by a configuration review (2026-12-05): each was accepted and ran less safe, or failed per request.
    ["rate limits switched off by a JSON null (only \"off\" does)", { KVEDGE_RATE_LIMIT: "null" }, /KVEDGE_RATE_LIMIT/],
    ["a tenant key that is also the admin token", { KVEDGE_API_KEYS: "tenant-a-0123456789,test-admin-token-0123456789" }, /ADMIN_TOKEN must not also be an API key/],
    ["a short API key", { KVEDGE_API_KEYS: "x" }, /KVEDGE_API_KEYS: every API key must be at least 16/],
    ["the admin token reused as the relay secret", { RELAY_SECRET: "test-admin-token-0123456789" }, /ADMIN_TOKEN must differ from RELAY_SECRET/],
    ["a decode service over plain http off the host (its bearer token in clear)", { KVEDGE_DECODE_URL: "http://decode.example.com:7070", DECODE_TOKEN: "decode-token-0123456789abcdef0123", KVEDGE_MEDIA_URL_KEY: "k".repeat(32) }, /KVEDGE_DECODE_URL must be an https URL/],
    ["a decode URL with credentials in it", { KVEDGE_DECODE_URL: "https://user:pw@decode.example.com", KVEDGE_MEDIA_URL_KEY: "k".repeat(32) }, /KVEDGE_DECODE_URL/],
    ["a media store URL without a decode service", { KVEDGE_MEDIA_STORE_URL: "https://store.example.com" }, /KVEDGE_MEDIA_STORE_URL needs KVEDGE_DECODE_URL/],
    ["a template of another family", { KVEDGE_MODELS: '[{"id":"m","family":"qwen3_vl","templateId":"qwen2vl"}]' }, /KVEDGE_MODELS\.0\.templateId/],
    ["a model id listed twice", { KVEDGE_MODELS: '[{"id":"m","family":"qwen3_vl","templateId":"qwen3vl-instruct"},{"id":"m","family":"qwen2_vl","templateId":"qwen2vl"}]' }, /KVEDGE_MODELS\.1\.id/],
    ["a media allowlist entry that is not a CIDR", { KVEDGE_MEDIA: '{"allowlist":["10.0.0.0/33"]}' }, /KVEDGE_MEDIA\.allowlist\.0.*not a CIDR/],
    // A field's path can hold a worker URL, and the rule tells that a worker key is a tenant's key.
    ["a worker key that is also an API key", { KVEDGE_API_KEYS: "tenant-a-0123456789", KVEDGE_WORKER_KEYS: '{"https://gpu-7.internal.example":"tenant-a-0123456789"}' }, /KVEDGE_WORKER_KEYS\.https:\/\/gpu-7\.internal\.example: a worker key must not also be an API key/],
  ];
  for (const [what, vars, field] of cases)
    it(`${what}: every request answers a generic 500, the log names the field once`, async () => {
      const logged = vi.spyOn(console, "error").mockImplementation(() => {});
      try {
        const bad = { ...env, ...vars };
        for (const path of ["/v1/chat/completions", "/v1/models", "/admin/workers"]) {
          const r = await callEnv(bad, path, path.includes("chat") ? { method: "POST", body: "{}" } : {});
          const e = await openAIError(r, 500);
          expect(e).toEqual({ message: CONFIG_ERROR_MESSAGE, type: "server_error", param: null, code: "configuration_error" });
        }
        const lines = logged.mock.calls.map((c) => String(c[0])).filter((l) => l.includes('"bad_config"'));
        expect(lines).toHaveLength(1);
        expect(JSON.parse(lines[0]!).error).toMatch(field);
      } finally {
        logged.mockRestore();
      }
    });
  it("a missing RATE_LIMITER binding met first on a failed authentication is logged once, as bad_config", async () => {
    const logged = vi.spyOn(console, "error").mockImplementation(() => {});
    try {
      const bad = { ...env, KVEDGE_ACCESS: undefined, KVEDGE_API_KEYS: "k-three-0123456789", RATE_LIMITER: undefined };
      const e = await openAIError(await callEnv(bad, "/v1/models", { headers: { authorization: "Bearer wrong-key-0123456789" } }), 500);
      expect(e.code).toBe("configuration_error");
      const lines = logged.mock.calls.map((c) => String(c[0])).filter((l) => l.includes('"bad_config"'));
      expect(lines).toHaveLength(1);
      expect(JSON.parse(lines[0]!).error).toMatch(/RATE_LIMITER binding is missing/);
    } finally {
      logged.mockRestore();
    }
  });
});

describe("rate limits (on by default)", () => {
  it("one bucket per client /64: rotating through the /64 buys nothing; another /64 has its own", async () => {
    const vars = { KVEDGE_RATE_LIMIT: JSON.stringify({ requestsPerMinute: 1, burst: 2 }) };
    expect((await chat(vars, { ip: "2001:db8:aa:1::1" })).status).toBe(503);
    expect((await chat(vars, { ip: "2001:db8:aa:1:ffff:ffff:ffff:fffe" })).status).toBe(503);
    const e = await openAIError(await chat(vars, { ip: "2001:0db8:00aa:0001::99" }), 429);
    expect(e.type).toBe("rate_limit_error");
    expect((await chat(vars, { ip: "2001:db8:aa:2::1" })).status).toBe(503);
    // IPv4: per /32, and an IPv4-mapped IPv6 address is the same client.
    expect((await chat(vars, { ip: "198.51.100.7" })).status).toBe(503);
    expect((await chat(vars, { ip: "::ffff:198.51.100.7" })).status).toBe(503);
    await openAIError(await chat(vars, { ip: "198.51.100.7" }), 429);
    expect((await chat(vars, { ip: "198.51.100.8" })).status).toBe(503);
  });

  it("failed authentication and operator routes are limited per client network", async () => {
    const vars = { KVEDGE_API_KEYS: "k-two-0123456789", KVEDGE_ACCESS: undefined, KVEDGE_RATE_LIMIT: JSON.stringify({ authFailures: { requestsPerMinute: 1, burst: 2 }, admin: { requestsPerMinute: 1, burst: 3 } }) };
    const ip = "2001:db8:bb:1::5";
    await openAIError(await chat(vars, { ip, auth: "Bearer wrong-1" }), 401);
    await openAIError(await chat(vars, { ip, auth: "Bearer wrong-2" }), 401);
    const limited = await chat(vars, { ip, auth: "Bearer wrong-3" });
    await openAIError(limited, 429);
    expect(Number(limited.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    // Operator routes: a bucket per network, spent before the token is even looked at.
    const adminIp = "203.0.113.9";
    for (let i = 0; i < 3; i++) expect((await call(vars, "/admin/workers", { ip: adminIp, headers: { authorization: `Bearer ${ADMIN}` } })).status).toBe(200);
    await openAIError(await call(vars, "/admin/workers", { ip: adminIp, headers: { authorization: `Bearer ${ADMIN}` } }), 429);
  });

  it("wrong dashboard sign-ins and forged session cookies spend the auth-failure bucket too", async () => {
    const vars = { KVEDGE_API_KEYS: "k-two-0123456789", KVEDGE_ACCESS: undefined, KVEDGE_RATE_LIMIT: JSON.stringify({ authFailures: { requestsPerMinute: 1, burst: 2 }, admin: { requestsPerMinute: 600, burst: 100 } }) };
    const ip = "2001:db8:cc:1::5";
    const signIn = () => call(vars, "/dashboard/login", { ip, method: "POST", body: new URLSearchParams({ token: "a-guess-0123456789" }) });
    expect((await signIn()).status).toBe(401);
    expect((await call(vars, "/dashboard", { ip, headers: { cookie: "kvedge_admin=9999999999.forged" } })).status).toBe(401);
    // The bucket (burst 2) is empty: further guesses, on any route, are slowed.
    await openAIError(await signIn(), 429);
    await openAIError(await chat(vars, { ip, auth: "Bearer wrong-1" }), 429);
    // A first visit without any credential is not an attempt.
    expect((await call(vars, "/dashboard", { ip: "2001:db8:cc:2::5" })).status).toBe(401);
    expect((await call(vars, "/dashboard", { ip: "2001:db8:cc:2::5" })).status).toBe(401);
    expect((await call(vars, "/dashboard", { ip: "2001:db8:cc:2::5" })).status).toBe(401);
  });

  it("a bucket's stored state expires (alarm) once it is full again", async () => {
    const vars = { KVEDGE_RATE_LIMIT: JSON.stringify({ requestsPerMinute: 600, burst: 5 }) };
    expect((await chat(vars, { ip: "192.0.2.44" })).status).toBe(503);
    const stub = env.RATE_LIMITER.getByName("chat:net:192.0.2.44/32");
    const before = await runInDurableObject(stub, async (_o, state) => ({ keys: [...state.storage.kv.list()].length, alarm: await state.storage.getAlarm() }));
    expect(before.keys).toBe(1);
    // Full again 1 token / (600/min) = 100 ms later, plus the slack.
    expect(before.alarm).not.toBeNull();
    expect(before.alarm! - Date.now()).toBeLessThan(5_000);
    await untilFull(stub);
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    const after = await runInDurableObject(stub, async (_o, state) => ({ keys: [...state.storage.kv.list()].length, alarm: await state.storage.getAlarm() }));
    expect(after).toEqual({ keys: 0, alarm: null });
  });

  it("later takes leave the alarm; one that fires before the bucket is full keeps the state and moves to the full moment", async () => {
    const vars = { KVEDGE_RATE_LIMIT: JSON.stringify({ requestsPerMinute: 600, burst: 5 }) };
    const ip = "192.0.2.45";
    const stub = env.RATE_LIMITER.getByName(`chat:net:${ip}/32`);
    const stored = () => runInDurableObject(stub, async (_o, state) => ({ keys: [...state.storage.kv.list()].length, alarm: await state.storage.getAlarm(), fullAt: state.storage.kv.get<{ fullAt: number }>("bucket")?.fullAt }));
    expect((await chat(vars, { ip })).status).toBe(503);
    const first = await stored();
    expect(first.alarm).toBe(first.fullAt! + 1_000);
    expect((await chat(vars, { ip })).status).toBe(503);
    expect((await chat(vars, { ip })).status).toBe(503);
    const later = await stored();
    // Three tokens taken: full again later than after the first, and the alarm not written again.
    expect(later.fullAt!).toBeGreaterThan(first.fullAt!);
    expect(later.alarm).toBe(first.alarm);
    // The alarm fires before the bucket is full (run now): the state stays, the alarm moves to the bucket's full moment.
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    const moved = await stored();
    expect(moved).toEqual({ keys: 1, alarm: later.fullAt! + 1_000, fullAt: later.fullAt });
    await untilFull(stub);
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await stored()).toEqual({ keys: 0, alarm: null, fullAt: undefined });
  });
});

describe("admin session without secrets in URLs", () => {
  it("the token is POSTed once for an expiring HttpOnly cookie; tokens in URLs and expired cookies are refused", async () => {
    const inUrl = await SELF.fetch(`https://edge/dashboard?token=${ADMIN}`, { redirect: "manual" });
    expect(inUrl.status).toBe(400);
    expect(inUrl.headers.get("set-cookie")).toBeNull();
    await inUrl.text();
    const wrong = await SELF.fetch("https://edge/dashboard/login", { method: "POST", body: new URLSearchParams({ token: "not-the-token-000000" }), redirect: "manual" });
    expect(wrong.status).toBe(401);
    await wrong.text();
    const ok = await SELF.fetch("https://edge/dashboard/login", { method: "POST", body: new URLSearchParams({ token: ADMIN }), redirect: "manual" });
    expect(ok.status).toBe(303);
    expect(ok.headers.get("location")).toBe("/dashboard");
    const setCookie = ok.headers.get("set-cookie")!;
    expect(setCookie).toMatch(/HttpOnly/);
    expect(setCookie).toMatch(/SameSite=Strict/);
    expect(setCookie).toMatch(/Max-Age=43200/);
    expect(setCookie).not.toContain(ADMIN);
    const cookie = setCookie.split(";")[0]!;
    expect((await SELF.fetch("https://edge/admin/overview", { headers: { cookie } })).status).toBe(200);
    // Expiry is enforced by the edge, not only by the browser: a validly signed but expired session is refused.
    const expired = `kvedge_admin=${await sessionValue(ADMIN, Math.floor(Date.now() / 1000) - 1)}`;
    await openAIError(await SELF.fetch("https://edge/admin/overview", { headers: { cookie: expired } }), 401);
    // A forged far-future expiry does not verify.
    const forged = `kvedge_admin=${"9999999999"}.${cookie.split(".")[1]}`;
    await openAIError(await SELF.fetch("https://edge/admin/overview", { headers: { cookie: forged } }), 401);
  });
});

describe("bounded work per request", () => {
  it("a 19 MB tool schema is refused with 400 before it is parsed", async () => {
    const props: Record<string, unknown> = {};
    for (let i = 0; i < 180_000; i++) props[`p${i}`] = { type: "string", description: "x".repeat(70) };
    const body = { model: MODEL, messages: [{ role: "user", content: "hi" }], tools: [{ type: "function", function: { name: "f", parameters: { type: "object", properties: props } } }] };
    const text = JSON.stringify(body);
    expect(text.length).toBeGreaterThan(19_000_000);
    const t0 = performance.now();
    const r = await call({}, "/v1/chat/completions", { method: "POST", headers: { "content-type": "application/json" }, body: text });
    const ms = performance.now() - t0;
    const e = await openAIError(r, 400);
    expect(e.code).toBe("limit_exceeded");
    expect(e.message).toMatch(/far over the limit/); // refused by the pre-parse count, not after JSON.parse
    // workerd's clock advances across I/O only: this is the end-to-end figure incl. reading the body.
    console.log(`19 MB tools schema: ${text.length} bytes refused (${e.code}) in ${ms.toFixed(1)} ms end to end (workerd, incl. reading the body)`);
  });

  it("a tool schema, tool-call arguments, chat_template_kwargs and response_format count toward the limits", async () => {
    const vars = { KVEDGE_LIMITS: JSON.stringify({ maxTotalChars: 2000 }) };
    const big = { type: "object", properties: { a: { type: "string", description: "y".repeat(3000) } } };
    const base = { model: MODEL, messages: [{ role: "user", content: "hi" }] };
    const cases: [unknown, string][] = [
      [{ ...base, tools: [{ type: "function", function: { name: "f", parameters: big } }] }, "tools[0].function"],
      [{ ...base, chat_template_kwargs: { extra: "z".repeat(3000) } }, "chat_template_kwargs"],
      [{ ...base, response_format: { type: "json_schema", json_schema: { name: "s", schema: big } } }, "response_format"],
      [
        { ...base, messages: [{ role: "user", content: "hi" }, { role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "f", arguments: { q: "w".repeat(3000) } } }] }] },
        "messages",
      ],
    ];
    for (const [body, param] of cases) {
      const e = await openAIError(await chat(vars, { body }), 400);
      expect(e.code).toBe("limit_exceeded");
      expect(e.param).toBe(param);
    }
  });
});
