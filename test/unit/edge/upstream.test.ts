/**
 * The edge's chat handler (src/edge/chat.ts, the same code workerd runs) against real HTTP upstreams:
 * the simulated SGLang worker, and a worker that stalls (it relays the simulator's first frame, then
 * goes silent). The routing index is the real RoutingCore in memory, so "load released" is read
 * from the same load tracker the Durable Object uses.
 * - a stalled stream is cut at the idle timeout: the client gets an OpenAI error event + [DONE],
 *   the upstream connection is closed and the worker's load is released;
 * - a stalled non-streamed answer ends in 504 in the OpenAI error shape, load released;
 * - a client that goes away mid-stream cancels the upstream request and releases the load;
 * - `x-kvedge-*` routing headers reach admin callers (or every caller with the debug flag) only.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseEdgeConfig } from "../../../src/config/config.ts";
import { handleChatCompletions, type ChatDeps } from "../../../src/edge/chat.ts";
import { ReceiptOutbox } from "../../../src/edge/chat/receipt-outbox.ts";
import { oneWorkerIndex } from "../../helpers/one-worker-index.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { startSimulatedWorker, type SimulatedWorker } from "../../../services/sglang-sim/worker.ts";

const MODEL = "Qwen/Qwen3-VL-8B-Instruct";
const ADMIN = "admin-token-for-this-test-0123";
const IDLE_MS = 400;

let sim: SimulatedWorker;
let staller: Server;
let stallerUrl = "";
/** Upstream connections the staller saw closed (by the edge). */
let closedUpstreams = 0;
let stallMode: "after-first-frame" | "before-body" = "after-first-frame";

async function readAll(req: IncomingMessage): Promise<string> {
  let s = "";
  for await (const c of req) s += String(c);
  return s;
}

beforeAll(async () => {
  await initHashing();
  sim = await startSimulatedWorker({ timingPreset: "instant", pageSize: 16 });
  staller = createServer(async (req: IncomingMessage, res: ServerResponse) => {
    const body = await readAll(req);
    res.on("close", () => closedUpstreams++);
    if (stallMode === "before-body") {
      res.writeHead(200, { "content-type": "application/json" });
      res.flushHeaders();
      return; // never a byte of body
    }
    const up = await fetch(`${sim.url}/generate`, { method: "POST", headers: { "content-type": "application/json" }, body });
    res.writeHead(up.status, { "content-type": up.headers.get("content-type") ?? "text/event-stream" });
    // Relay exactly the first SSE frame (the simulator may send several per chunk).
    const reader = up.body!.getReader();
    let buf = "";
    while (!buf.includes("\n\n")) {
      const c = await reader.read();
      if (c.done) break;
      buf += new TextDecoder().decode(c.value);
    }
    await reader.cancel();
    res.write(buf.slice(0, buf.indexOf("\n\n") + 2));
    // …then silence, with the connection held open.
  });
  await new Promise<void>((r) => staller.listen(0, "127.0.0.1", r));
  stallerUrl = `http://127.0.0.1:${(staller.address() as AddressInfo).port}`;
});

afterAll(async () => {
  staller.closeAllConnections();
  await new Promise((r) => staller.close(r));
  await sim.close();
});

function setup(url: string, vars: Record<string, string> = {}) {
  const { core, index } = oneWorkerIndex(url, MODEL);
  const config = parseEdgeConfig({
    KVEDGE_ACCESS: "public",
    ADMIN_TOKEN: ADMIN,
    KVEDGE_ROUTING: JSON.stringify({ upstreamIdleTimeoutMs: IDLE_MS }),
    // These upstreams run without --api-key (worker credentials: worker-auth.test.ts).
    KVEDGE_WORKER_AUTH: "none",
    ...vars,
  });
  const waits: Promise<unknown>[] = [];
  const deps: ChatDeps = { config, index: () => index, fetch: (u, i) => fetch(u, i), receiptOutbox: new ReceiptOutbox(), waitUntil: (p) => void waits.push(p) };
  return { core, deps, settled: () => Promise.all(waits) };
}

function chat(body: Record<string, unknown>, headers: Record<string, string> = {}): Request {
  return new Request("http://edge/v1/chat/completions", {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "Tell me about stalls." }], max_tokens: 64, ...body }),
  });
}

const routingHeaders = (r: Response) => [...r.headers.keys()].filter((k) => k.startsWith("x-kvedge-"));

describe("upstream deadlines and cancellation (real handler, real HTTP)", () => {
  it("a stalled stream is cut at the idle timeout with a clean error event; the load is released", async () => {
    stallMode = "after-first-frame";
    const { core, deps, settled } = setup(stallerUrl);
    const closedBefore = closedUpstreams;
    const t0 = Date.now();
    const res = await handleChatCompletions(chat({ stream: true }), deps);
    expect(res.status).toBe(200);
    expect(core.sizes().activeRequests).toBe(1);
    const text = await res.text();
    const elapsed = Date.now() - t0;
    const frames = text.split("\n\n").filter(Boolean);
    expect(frames.at(-1)).toBe("data: [DONE]");
    const err = JSON.parse(frames.at(-2)!.slice(6)) as { error: { code: string; type: string; message: string } };
    expect(err.error).toMatchObject({ code: "upstream_timeout", type: "server_error" });
    expect(Object.keys(err.error).sort()).toEqual(["code", "message", "param", "type"]);
    expect(elapsed).toBeGreaterThanOrEqual(IDLE_MS);
    expect(elapsed).toBeLessThan(IDLE_MS + 5_000);
    await settled();
    expect(core.sizes().activeRequests).toBe(0);
    await expect.poll(() => closedUpstreams - closedBefore).toBe(1);
  });

  it("a stalled non-streamed answer ends in 504 (OpenAI shape) and releases the load", async () => {
    stallMode = "before-body";
    const { core, deps, settled } = setup(stallerUrl);
    const res = await handleChatCompletions(chat({}), deps);
    expect(res.status).toBe(504);
    const j = (await res.json()) as { error: { code: string } };
    expect(j.error.code).toBe("upstream_timeout");
    await settled();
    expect(core.sizes().activeRequests).toBe(0);
  });

  it("a client that goes away mid-stream cancels the upstream request and releases the load", async () => {
    stallMode = "after-first-frame";
    const { core, deps, settled } = setup(stallerUrl, { KVEDGE_ROUTING: JSON.stringify({ upstreamIdleTimeoutMs: 60_000 }) });
    const closedBefore = closedUpstreams;
    const res = await handleChatCompletions(chat({ stream: true }), deps);
    const reader = res.body!.getReader();
    const first = await reader.read();
    expect(first.done).toBe(false);
    await reader.cancel(); // the client disconnects
    await expect.poll(() => closedUpstreams - closedBefore, { timeout: 5_000 }).toBe(1);
    await settled();
    expect(core.sizes().activeRequests).toBe(0);
  });

  it("x-kvedge-* routing headers only for admin callers or with KVEDGE_DEBUG_HEADERS=on", async () => {
    const plain = setup(sim.url);
    const anon = await handleChatCompletions(chat({}), plain.deps);
    expect(anon.status).toBe(200);
    expect(routingHeaders(anon)).toEqual([]);
    expect(anon.headers.get("server-timing")).toBeNull();
    expect(anon.headers.get("x-request-id")).toMatch(/.+/);
    await anon.text();

    const admin = await handleChatCompletions(chat({}, { authorization: `Bearer ${ADMIN}` }), plain.deps);
    expect(admin.status).toBe(200);
    expect(routingHeaders(admin)).toEqual(expect.arrayContaining(["x-kvedge-worker", "x-kvedge-overlap-blocks", "x-kvedge-receipt"]));
    await admin.text();

    const debug = setup(sim.url, { KVEDGE_DEBUG_HEADERS: "on" });
    const dbg = await handleChatCompletions(chat({ stream: true }), debug.deps);
    expect(dbg.headers.get("x-kvedge-worker")).toBe("w1");
    await dbg.text();
  });

  it("a conversation's next turns reuse its earlier turns' rendered prompt and parse only the rest (the handler gives the body to the turn chain)", async () => {
    // No sampled whole parse (KVEDGE_TURN_CHECK_RATE): it would count in the parsed characters pinned here.
    const { deps } = setup(sim.url, { KVEDGE_TURN_CHECK_RATE: "0" });
    const admin = { authorization: `Bearer ${ADMIN}` };
    const messages: Record<string, unknown>[] = [{ role: "system", content: `Turn-chain test: be brief. ${"Context. ".repeat(300)}` }, { role: "user", content: "First question about stalls?" }];
    const reused: string[] = [];
    for (let turn = 0; turn < 3; turn++) {
      const request = chat({ messages }, admin);
      const bodyChars = (await request.clone().text()).length;
      const res = await handleChatCompletions(request, deps);
      expect(res.status).toBe(200);
      reused.push(res.headers.get("x-kvedge-prompt-reused-messages") ?? "absent");
      // The parse reads the body less the messages the chain held (the long system message from turn 1 on).
      const parsed = Number(res.headers.get("x-kvedge-parsed-chars"));
      if (turn === 0) expect(parsed).toBe(bodyChars);
      else expect(parsed).toBeLessThan(bodyChars - 2700);
      await res.text();
      messages.push({ role: "assistant", content: `Answer ${turn}.` }, { role: "user", content: `Follow-up ${turn}?` });
    }
    // Turn 0 renders whole and stores up to its question; turn 1 reuses that and stores through its
    // own question (final for any continuation), so turn 2 reuses everything the previous request sent.
    expect(reused).toEqual(["0", "1", "4"]);
  });

  it("max_tokens past the context: refused at the edge, unless the pool's workers auto-truncate (then theirs to clamp)", async () => {
    const strict = setup(sim.url);
    const refused = await handleChatCompletions(chat({ max_tokens: 262_144 }), strict.deps).catch((e: unknown) => e);
    expect(refused).toMatchObject({ code: "context_length_exceeded", param: "max_tokens" });
    const lenient = setup(sim.url, { KVEDGE_MODELS: JSON.stringify([{ id: MODEL, family: "qwen3_vl", templateId: "qwen3vl-instruct", allowAutoTruncate: true }]) });
    // Forwarded: this simulated worker does not auto-truncate, so the rejection is the worker's.
    const r = await handleChatCompletions(chat({ max_tokens: 262_144 }), lenient.deps);
    expect([r.status, ((await r.json()) as { error: { code: string } }).error.code]).toEqual([400, "upstream_rejected"]);
  });

  it("error bodies name no worker: a dead worker's failure reads the same for every client", async () => {
    const { deps } = setup("http://127.0.0.1:9");
    const res = await handleChatCompletions(chat({}), deps).catch((e: unknown) => e);
    // Every attempt failed: the handler throws the mapped error (functions/ renders it).
    expect(res).toMatchObject({ code: "worker_unavailable" });
    expect(String((res as Error).message)).not.toMatch(/w1|127\.0\.0\.1|ECONNREFUSED|fetch failed/);
  });
});

describe("W3C trace context through the handler (real simulator)", () => {
  const CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736";
  const CLIENT_SPAN = "00f067aa0ba902b7";
  /** The traceparent the simulator received with /generate for this completion's request id. */
  const receivedBy = async (completionId: string): Promise<string | null> => {
    const rid = completionId.replace(/^chatcmpl-/, "");
    const r = (await (await fetch(`${sim.url}/debug/requests`)).json()) as { requests: { rid: string | null; traceparent: string | null }[] };
    return r.requests.find((x) => x.rid === rid)?.traceparent ?? null;
  };

  it("a client's trace reaches the worker with the edge's span, and its receipt", async () => {
    const { core, deps, settled } = setup(sim.url);
    const res = await handleChatCompletions(chat({}, { traceparent: `00-${CLIENT_TRACE}-${CLIENT_SPAN}-01` }), deps);
    const { id } = (await res.json()) as { id: string };
    await settled();
    const sent = await receivedBy(id);
    expect(sent).toMatch(new RegExp(`^00-${CLIENT_TRACE}-[0-9a-f]{16}-01$`));
    expect(sent).not.toContain(CLIENT_SPAN);
    expect(core.stats().recentReceipts[0]!.traceId).toBe(CLIENT_TRACE);
  });

  it("an invalid traceparent is ignored: the worker gets a new trace, recorded with the receipt", async () => {
    const { core, deps, settled } = setup(sim.url);
    const res = await handleChatCompletions(chat({}, { traceparent: `00-${"0".repeat(32)}-${CLIENT_SPAN}-01` }), deps);
    const { id } = (await res.json()) as { id: string };
    await settled();
    const sent = await receivedBy(id);
    const traceId = /^00-([0-9a-f]{32})-[0-9a-f]{16}-01$/.exec(sent ?? "")?.[1];
    expect(traceId).toBeDefined();
    expect(traceId).not.toBe("0".repeat(32));
    expect(core.stats().recentReceipts[0]!.traceId).toBe(traceId);
  });
});
