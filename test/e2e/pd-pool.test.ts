/**
 * A prefill/decode pool end to end (scripts/local-fleet.ts shape "pd"): w1, w2 run
 * `--disaggregation-mode prefill`, w3, w4 `decode`, each with its relay, behind the edge. The edge
 * picks the prefill by exact overlap and the decode by load, sends both SGLang's bootstrap fields
 * and streams from the decode; the simulated decode waits for its prefill peer's KV.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../scripts/local-fleet.ts";
import { chat, image, makeImage, makeMediaDir, makeVideo, text, userWith, video } from "./helpers/media.ts";

const logs = process.env.KVEDGE_E2E_LOGS ? (l: string) => console.log(l) : undefined;
let fleet: Fleet;
const PREFILL = ["w1", "w2"];
const DECODE = ["w3", "w4"];
/** Which prefill worker holds each long prompt (the repeat test fills it). */
const holders = new Map<number, string>();

beforeAll(async () => {
  const dir = makeMediaDir();
  makeImage(dir, "img0.png", { source: "testsrc" });
  makeVideo(dir, "clip.mp4", { seconds: 2, fps: 10 });
  fleet = await startFleet({ workers: 4, shape: "pd", mediaDir: dir, log: logs });
});
afterAll(async () => {
  await fleet?.stop();
});

/** ~2k tokens of seeded distinct text. */
function longPrompt(seed: number, words = 1600): string {
  const vocab = ["router", "cache", "prefix", "token", "block", "worker", "decode", "prefill", "edge", "index", "room", "bootstrap"];
  let x = (seed * 2654435761) >>> 0;
  const out: string[] = [`Report ${seed}:`];
  for (let i = 0; i < words; i++) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    out.push(vocab[x % vocab.length]!);
  }
  return out.join(" ");
}

interface StreamResult {
  status: number;
  worker: string | null;
  decode: string | null;
  content: string;
  promptTokens: number;
  cachedTokens: number;
  done: boolean;
}

async function streamChat(body: Record<string, unknown>): Promise<StreamResult> {
  const r = await fetch(`${fleet.edgeUrl}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: fleet.model, max_tokens: 8, stream: true, stream_options: { include_usage: true }, ...body }),
  });
  const raw = await r.text();
  let content = "";
  let promptTokens = 0;
  let cachedTokens = 0;
  for (const line of raw.split("\n")) {
    if (!line.startsWith("data: {")) continue;
    const f = JSON.parse(line.slice(6)) as { choices?: { delta?: { content?: string } }[]; usage?: { prompt_tokens: number; prompt_tokens_details?: { cached_tokens?: number } } };
    content += f.choices?.[0]?.delta?.content ?? "";
    if (f.usage) {
      promptTokens = f.usage.prompt_tokens;
      cachedTokens = f.usage.prompt_tokens_details?.cached_tokens ?? 0;
    }
  }
  return { status: r.status, worker: r.headers.get("x-kvedge-worker"), decode: r.headers.get("x-kvedge-decode-worker"), content, promptTokens, cachedTokens, done: raw.includes("data: [DONE]") };
}

async function plainChat(body: Record<string, unknown>) {
  const r = await fetch(`${fleet.edgeUrl}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: fleet.model, max_tokens: 8, ...body }) });
  const json = (await r.json()) as { choices?: { message?: { content?: string } }[]; usage?: { prompt_tokens: number; prompt_tokens_details?: { cached_tokens?: number } }; error?: { message: string } };
  return {
    status: r.status,
    worker: r.headers.get("x-kvedge-worker"),
    decode: r.headers.get("x-kvedge-decode-worker"),
    attempts: Number(r.headers.get("x-kvedge-attempts") ?? "0"),
    content: json.choices?.[0]?.message?.content ?? "",
    promptTokens: json.usage?.prompt_tokens ?? 0,
    cachedTokens: json.usage?.prompt_tokens_details?.cached_tokens ?? 0,
    json,
  };
}

async function workerRows() {
  const r = await fetch(`${fleet.edgeUrl}/admin/workers?model=${encodeURIComponent(fleet.model)}`, { headers: { authorization: `Bearer ${fleet.adminToken}` } });
  return ((await r.json()) as { workers: { workerId: string; disaggregationMode?: string; bootstrapPort?: number | null; activeRequests: number }[] }).workers;
}

describe("prefill/decode pool", () => {
  it("knows each worker's role from its relay's hello", async () => {
    const workers = await workerRows();
    const role = new Map(workers.map((w) => [w.workerId, w]));
    for (const id of PREFILL) {
      expect(role.get(id)?.disaggregationMode).toBe("prefill");
      expect(role.get(id)?.bootstrapPort).toBeGreaterThan(0);
    }
    for (const id of DECODE) expect(role.get(id)?.disaggregationMode).toBe("decode");
  });

  it("serves text chats, unstreamed and streamed, as a prefill/decode pair", async () => {
    const a = await plainChat({ messages: [{ role: "user", content: "Say something short." }] });
    expect(a.status, JSON.stringify(a.json)).toBe(200);
    expect(PREFILL).toContain(a.worker);
    expect(DECODE).toContain(a.decode);
    expect(a.content.length).toBeGreaterThan(0);
    const s = await streamChat({ messages: [{ role: "user", content: "Say something else." }] });
    expect(s.status).toBe(200);
    expect(s.done).toBe(true);
    expect(PREFILL).toContain(s.worker);
    expect(DECODE).toContain(s.decode);
    expect(s.content.length).toBeGreaterThan(0);
  });

  it("serves image chats, unstreamed and streamed", async () => {
    const body = userWith([text("What is in this picture?"), image(`${fleet.mediaUrl}/img0.png`)]);
    const a = await chat(fleet.edgeUrl, { model: fleet.model, ...body });
    expect(a.status, JSON.stringify(a.body)).toBe(200);
    expect(PREFILL).toContain(a.worker);
    const s = await streamChat(body);
    expect(s.status).toBe(200);
    expect(s.done).toBe(true);
    expect(s.content.length).toBeGreaterThan(0);
    // The repeat lands on the prefill that holds the image's blocks.
    expect(s.worker).toBe(a.worker);
    // Every full block of the prompt (the last, partial one is never cached: block size 16).
    expect(s.cachedTokens).toBeGreaterThanOrEqual(Math.floor((s.promptTokens - 1) / 16) * 16);
  });

  it("serves a video chat and sends its repeat to the prefill that holds the video's blocks", async () => {
    const body = userWith([text("Describe the clip."), video(`${fleet.mediaUrl}/clip.mp4`)]);
    const a = await chat(fleet.edgeUrl, { model: fleet.model, ...body });
    expect(a.status, JSON.stringify(a.body)).toBe(200);
    expect(a.routing).toBe("exact");
    expect(PREFILL).toContain(a.worker);
    const s = await streamChat(body);
    expect(s.status).toBe(200);
    expect(s.done).toBe(true);
    expect(s.worker).toBe(a.worker);
    expect(s.cachedTokens).toBeGreaterThanOrEqual(Math.floor((s.promptTokens - 1) / 16) * 16);
  });

  it("sends the repeat of a long prompt to the prefill worker that holds it, cached ≥ 0.95 of the prompt", async () => {
    for (const seed of [1, 2, 3, 4]) {
      const messages = [{ role: "user", content: longPrompt(seed) }];
      const first = await plainChat({ messages });
      expect(first.status, JSON.stringify(first.json)).toBe(200);
      expect(first.promptTokens).toBeGreaterThan(1500);
      const again = await streamChat({ messages });
      expect(again.worker, `prompt ${seed}`).toBe(first.worker);
      holders.set(seed, first.worker!);
      expect(again.cachedTokens / again.promptTokens).toBeGreaterThanOrEqual(0.95);
    }
  });

  it("moves a request whose decode worker died before the first byte to another pair", async () => {
    // The decode worker the index picks first when loads tie (the first it registered) dies with
    // its relay, so the index still holds it up: only the edge's failed connect reveals it.
    const rows = await workerRows();
    const doomed = rows.find((w) => w.disaggregationMode === "decode")!.workerId;
    const survivor = DECODE.find((id) => id !== doomed)!;
    const i = Number(doomed.slice(1)) - 1;
    await fleet.killRelay(i);
    await fleet.killWorker(i);
    let moved = false;
    for (let k = 0; k < 6 && !moved; k++) {
      const r = await plainChat({ messages: [{ role: "user", content: longPrompt(20 + k, 300) }] });
      expect(r.status, JSON.stringify(r.json)).toBe(200);
      expect(r.decode).toBe(survivor);
      moved = r.attempts === 2;
    }
    expect(moved, "a request went to the dead decode worker first and was moved").toBe(true);
    const s = await streamChat({ messages: [{ role: "user", content: longPrompt(10, 300) }] });
    expect(s.status).toBe(200);
    expect(s.decode).toBe(survivor);
    expect(s.content.length).toBeGreaterThan(0);
  });

  it("moves a request whose prefill worker died before the first byte to another pair", async () => {
    const [seed, holder] = [...holders.entries()][0]!;
    const other = PREFILL.find((id) => id !== holder)!;
    const i = Number(holder.slice(1)) - 1;
    // The relay dies first: the index still credits the dead worker with the prompt's prefix.
    await fleet.killRelay(i);
    await fleet.killWorker(i);
    const r = await plainChat({ messages: [{ role: "user", content: longPrompt(seed) }] });
    expect(r.status, JSON.stringify(r.json)).toBe(200);
    expect(r.worker).toBe(other);
    expect(r.attempts).toBe(2);
    expect(r.content.length).toBeGreaterThan(0);
  });
  it("ends a stream cleanly when its decode worker dies after the first byte, and frees the pair's load", async () => {
    const r = await fetch(`${fleet.edgeUrl}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: fleet.model, max_tokens: 3000, ignore_eos: true, stream: true, messages: [{ role: "user", content: "Talk for a long time." }] }),
    });
    expect(r.status).toBe(200);
    const prefill = r.headers.get("x-kvedge-worker")!;
    const decode = r.headers.get("x-kvedge-decode-worker")!;
    const reader = r.body!.getReader();
    const dec = new TextDecoder();
    let seen = "";
    while (!seen.includes('"content"')) {
      const { done, value } = await reader.read();
      if (done) break;
      seen += dec.decode(value, { stream: true });
    }
    expect(seen).toContain('"content"');
    await fleet.killWorker(Number(decode.slice(1)) - 1);
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      seen += dec.decode(value, { stream: true });
    }
    // A clean end: an error event for the client, no [DONE] after a cut answer.
    expect(seen).toMatch(/"error"/);
    // The prefill's share is released by the settlement (its relay still reports it up).
    const deadline = Date.now() + 10_000;
    let busy = 1;
    while (Date.now() < deadline) {
      busy = (await workerRows()).find((w) => w.workerId === prefill)!.activeRequests;
      if (busy === 0) break;
      await new Promise((res) => setTimeout(res, 200));
    }
    expect(busy).toBe(0);
  });
});

describe("a misconfigured prefill/decode pool", () => {
  let lone: Fleet;
  beforeAll(async () => {
    // One decode worker and no prefill: no pair can be formed.
    lone = await startFleet({ workers: 1, workerArgs: [["--disaggregation-mode", "decode"]], log: logs });
  });
  afterAll(async () => {
    await lone?.stop();
  });

  it("refuses requests with a message naming the decode worker without a prefill peer", async () => {
    const r = await fetch(`${lone.edgeUrl}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: lone.model, max_tokens: 4, messages: [{ role: "user", content: "Anyone there?" }] }),
    });
    const json = (await r.json()) as { error?: { message: string; code: string } };
    expect(r.status).toBe(503);
    expect(json.error?.code).toBe("no_worker_available");
    expect(json.error?.message).toMatch(/decode worker w1 has no prefill peer up/);
  });
});
