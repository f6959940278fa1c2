import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { UpstreamError, UpstreamRejectedError, UpstreamTimeoutError } from "../../../src/api/errors.ts";
import { createChatStreamCore, createChatStreamTranslator } from "../../../src/proxy/chat-stream.ts";
import type { ChatStreamOptions, StreamOutcome, UpstreamBytes } from "../../../src/proxy/chat-stream.ts";
import { openExchange } from "../../../src/proxy/upstream-guard.ts";
import type { UsageSummary } from "../../../src/proxy/usage.ts";
import { splitAt } from "../../helpers/split-at.ts";

const enc = new TextEncoder();
const dec = new TextDecoder();
const OPTS: ChatStreamOptions = { id: "rid1", model: "qwen", now: () => 1784131200 };

const meta = (over: Record<string, unknown> = {}) => ({
  id: "rid1",
  finish_reason: null,
  prompt_tokens: 1250,
  weight_version: "default",
  completion_tokens: 1,
  cached_tokens: 1248,
  cached_tokens_details: { device: 1248, host: 0 },
  image_tokens: 1225,
  ...over,
});
const frame = (o: unknown) => `data: ${JSON.stringify(o)}\n\n`;
const DONE = "data: [DONE]\n\n";

/** A cumulative-mode `/generate` stream as SGLang sends it (python/sglang/srt/entrypoints/http_server.py @9d147fd L818-849). */
const UPSTREAM =
  frame({ text: "A", output_ids: [32], meta_info: meta({ response_sent_to_client_ts: 1.5 }) }) +
  frame({ text: "A grey", output_ids: [32, 19780], meta_info: meta({ completion_tokens: 2 }) }) +
  frame({ text: "A grey", output_ids: [32, 19780, 151643], meta_info: meta({ completion_tokens: 3 }) }) +
  frame({
    text: "A grey cat 猫 😀.",
    output_ids: [32, 19780, 8251, 13, 151645],
    meta_info: meta({ completion_tokens: 11, finish_reason: { type: "stop", matched: 151645 }, e2e_latency: 0.4 }),
  }) +
  DONE;

const chunkJson = (choices: unknown[], usage?: unknown) =>
  JSON.stringify({ id: "rid1", object: "chat.completion.chunk", created: 1784131200, model: "qwen", choices, ...(usage ? { usage } : {}) });
const ch = (index: number, delta: unknown, finish: string | null = null, matched: unknown = null) => ({
  index,
  delta,
  logprobs: null,
  finish_reason: finish,
  matched_stop: matched,
});
const USAGE = {
  prompt_tokens: 1250,
  total_tokens: 1261,
  completion_tokens: 11,
  prompt_tokens_details: { cached_tokens: 1248, image_tokens: 1225 },
  reasoning_tokens: 0,
};
const EXPECTED =
  frame(JSON.parse(chunkJson([ch(0, { reasoning_content: null, role: "assistant", content: "" })]))) +
  frame(JSON.parse(chunkJson([ch(0, { reasoning_content: null, content: "A" })]))) +
  frame(JSON.parse(chunkJson([ch(0, { reasoning_content: null, content: " grey" })]))) +
  frame(JSON.parse(chunkJson([ch(0, { reasoning_content: null, content: " cat 猫 😀." })]))) +
  frame(JSON.parse(chunkJson([ch(0, { reasoning_content: null }, "stop", 151645)]))) +
  frame(JSON.parse(chunkJson([], USAGE))) +
  DONE;

function runCore(chunks: Uint8Array[], opts: ChatStreamOptions = { ...OPTS, includeUsage: true }) {
  const core = createChatStreamCore(opts);
  let out = "";
  for (const c of chunks) out += core.push(c).join("");
  out += core.end().join("");
  return { out, core };
}

/** Client-side view: the JSON payloads of the output stream ("[DONE]" kept as a string). */
function payloads(out: string): unknown[] {
  return out
    .split("\n\n")
    .filter((s) => s !== "")
    .map((s) => {
      expect(s.startsWith("data: ")).toBe(true);
      const d = s.slice(6);
      return d === "[DONE]" ? d : JSON.parse(d);
    });
}

describe("stream translation core", () => {
  it("rebuilds SGLang's /v1 chunk sequence with usage", () => {
    expect(runCore([enc.encode(UPSTREAM)]).out).toBe(EXPECTED);
  });

  it("produces identical output for a split at every byte position", () => {
    const bytes = enc.encode(UPSTREAM);
    for (let i = 1; i < bytes.length; i++) expect(runCore(splitAt(bytes, [i])).out).toBe(EXPECTED);
  });

  it("produces identical output for random multi-way splits and byte-at-a-time input", () => {
    const bytes = enc.encode(UPSTREAM);
    expect(runCore(Array.from(bytes, (b) => new Uint8Array([b]))).out).toBe(EXPECTED);
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 1, max: bytes.length - 1 }), { maxLength: 20 }), (cuts) => {
        expect(runCore(splitAt(bytes, cuts)).out).toBe(EXPECTED);
      }),
      { numRuns: 300 },
    );
  });

  it("omits the usage chunk without include_usage", () => {
    const out = payloads(runCore([enc.encode(UPSTREAM)], OPTS).out);
    expect(out.at(-1)).toBe("[DONE]");
    expect(out.some((p) => typeof p === "object" && p !== null && "usage" in p)).toBe(false);
    expect(out).toHaveLength(6);
  });

  it("handles incremental-mode frames", () => {
    const up =
      frame({ text: "A", meta_info: meta() }) +
      frame({ text: " grey", meta_info: meta({ completion_tokens: 2 }) }) +
      frame({ text: "", meta_info: meta({ completion_tokens: 3, finish_reason: { type: "length", length: 3 } }) }) +
      DONE;
    const out = payloads(runCore([enc.encode(up)], { ...OPTS, incremental: true }).out) as any[];
    expect(out.slice(1, 3).map((p) => p.choices[0].delta.content)).toEqual(["A", " grey"]);
    expect(out[3].choices[0]).toMatchObject({ finish_reason: "length", matched_stop: null });
  });

  it("interleaves n > 1 choices, finishing them in finish order, with SGLang's usage aggregation", () => {
    const f = (index: number, text: string, completion: number, finish: unknown = null, cached = 100) =>
      frame({ index, text, meta_info: meta({ id: `sub${index}`, prompt_tokens: 120, cached_tokens: cached, completion_tokens: completion, finish_reason: finish }) });
    const up =
      f(1, "x", 1, null, 110) +
      f(0, "a", 1) +
      f(1, "xy", 2, { type: "stop", matched: "END" }, 110) +
      f(0, "ab", 2) +
      f(0, "abc", 3, { type: "length", length: 3 }) +
      DONE;
    const { out, core } = runCore([enc.encode(up)], { ...OPTS, n: 2, includeUsage: true });
    const p = payloads(out) as any[];
    const summary = p.map((c) =>
      c === "[DONE]" ? c : c.choices.length === 0 ? "usage" : `${c.choices[0].index}:${c.choices[0].delta.role ?? ""}:${c.choices[0].delta.content ?? ""}:${c.choices[0].finish_reason ?? ""}`,
    );
    expect(summary).toEqual([
      "1:assistant::",
      "1::x:",
      "0:assistant::",
      "0::a:",
      "1::y:",
      "0::b:",
      "0::c:",
      "1:::stop",
      "0:::length",
      "usage",
      "[DONE]",
    ]);
    expect(p.every((c) => c === "[DONE]" || c.id === "rid1")).toBe(true);
    // prompt/cached from choice 0, completion summed over choices
    expect(p[9].usage).toMatchObject({ prompt_tokens: 120, completion_tokens: 5, total_tokens: 125, prompt_tokens_details: { cached_tokens: 100 } });
    expect(core.outcome().finishReasons).toEqual(["length", "stop"]);
  });

  it("turns an inline error frame into an OpenAI error event then [DONE], without a finish chunk", () => {
    const up =
      frame({ text: "A", meta_info: meta() }) +
      frame({ error: { message: "boom", type: "invalid_request_error", code: 400, retryable: false } }) +
      DONE;
    const { out, core } = runCore([enc.encode(up)]);
    const p = payloads(out) as any[];
    expect(p).toHaveLength(4);
    expect(p[2]).toEqual({ error: { message: "The worker rejected the request (HTTP 400).", type: "invalid_request_error", param: null, code: "upstream_rejected" } });
    expect(p[3]).toBe("[DONE]");
    expect(core.error).toBeInstanceOf(UpstreamRejectedError);
    expect(core.outcome().status).toBe("upstream_error");
  });

  it("turns an abort with a status code into an error event; a graceful abort into finish_reason abort", () => {
    const hard = frame({ text: "A", meta_info: meta({ finish_reason: { type: "abort", message: "oom", status_code: 503 } }) }) + DONE;
    const ph = payloads(runCore([enc.encode(hard)]).out) as any[];
    expect(ph).toHaveLength(2);
    expect(ph[0].error.type).toBe("server_error");
    const soft = frame({ text: "A", meta_info: meta({ finish_reason: { type: "abort", message: "gone", status_code: null } }) }) + DONE;
    const ps = payloads(runCore([enc.encode(soft)], OPTS).out) as any[];
    expect(ps.map((c) => (c === "[DONE]" ? c : c.choices[0].finish_reason))).toEqual([null, null, "abort", "[DONE]"]);
  });

  it("never hangs: truncation, malformed frames and bad indices end with an error event and [DONE]", () => {
    const cases = [
      frame({ text: "A", meta_info: meta() }), // cut before finishing
      frame({ text: "A", meta_info: meta() }) + "data: {not json\n\n",
      frame({ index: 3, text: "A", meta_info: meta() }),
      frame({ text: 5, meta_info: meta() }),
      "",
      DONE, // [DONE] without any output
    ];
    for (const up of cases) {
      const { out, core } = runCore([enc.encode(up)]);
      const p = payloads(out) as any[];
      expect(p.at(-1)).toBe("[DONE]");
      expect(p.at(-2).error.code).toBe("upstream_error");
      expect(core.error).toBeInstanceOf(UpstreamError);
    }
  });

  it("tolerates a missing [DONE] once every choice has finished", () => {
    const up = frame({ text: "A", meta_info: meta({ finish_reason: { type: "stop", matched: 2 } }) });
    const p = payloads(runCore([enc.encode(up)]).out) as any[];
    expect(p.at(-1)).toBe("[DONE]");
    expect(p.at(-3).choices[0].finish_reason).toBe("stop");
  });

  it("never resends text when a cumulative frame revises what was sent", () => {
    const up =
      frame({ text: "Hello", meta_info: meta() }) +
      frame({ text: "Help me", meta_info: meta({ finish_reason: { type: "stop", matched: 1 } }) }) +
      DONE;
    const { out, core } = runCore([enc.encode(up)], OPTS);
    const contents = (payloads(out) as any[]).flatMap((c) => (c === "[DONE]" ? [] : [c.choices[0].delta.content ?? ""]));
    expect(contents.join("")).toBe("Hello" + "me");
    expect(core.outcome().textRevised).toBe(true);
  });

  it("ignores anything after [DONE]", () => {
    const { out } = runCore([enc.encode(UPSTREAM + frame({ error: { message: "late" } }))]);
    expect(out).toBe(EXPECTED);
  });
});

async function readAll(rs: ReadableStream<Uint8Array>): Promise<string> {
  let s = "";
  const reader = rs.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return s + dec.decode();
    s += dec.decode(value, { stream: true });
  }
}

/** An upstream of fixed chunks (then its end, or a failed read); counts its reads and keeps the cancel reason. */
function sourceOf(chunks: Uint8Array[], failAfter = false) {
  let i = 0;
  let pulls = 0;
  let cancelled: unknown = undefined;
  const source: UpstreamBytes = {
    onCut: null,
    async read() {
      pulls++;
      if (cancelled !== undefined) return null;
      if (i < chunks.length) return chunks[i++]!;
      if (failAfter) throw new Error("socket reset");
      return null;
    },
    cancel(reason) {
      cancelled = reason ?? "cancelled";
    },
  };
  return { source, pulls: () => pulls, cancelled: () => cancelled };
}

describe("stream translator (streams)", () => {
  it("translates, reports usage and outcome", async () => {
    const usages: UsageSummary[] = [];
    const outcomes: StreamOutcome[] = [];
    const bytes = enc.encode(UPSTREAM);
    const src = sourceOf(splitAt(bytes, [7, 100, 101, 300, 301, 302]));
    const t = createChatStreamTranslator(src.source, { ...OPTS, includeUsage: true, onUsage: (u) => usages.push(u), onFinish: (o) => outcomes.push(o) });
    expect(await t.ready).toBeNull(); // settles before anyone reads
    const text = await readAll(t.readable);
    expect(text).toBe(EXPECTED);
    expect(usages).toEqual([
      { prompt_tokens: 1250, completion_tokens: 11, total_tokens: 1261, cached_tokens: 1248, reasoning_tokens: 0, image_tokens: 1225, video_tokens: 0, audio_tokens: 0 },
    ]);
    expect(outcomes).toHaveLength(1);
    expect(outcomes[0]).toMatchObject({ status: "completed", error: null, finishReasons: ["stop"] });
    expect(await t.done).toBe(outcomes[0]);
  });

  it("holdEndUntilFinished: [DONE] reaches the client only after onFinish's promise settles", async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let settledAt = -1;
    const t = createChatStreamTranslator(sourceOf([enc.encode(UPSTREAM)]).source, { ...OPTS, includeUsage: true, holdEndUntilFinished: true, onFinish: () => gate.then(() => (settledAt = Date.now())) });
    const reader = t.readable.getReader();
    let text = "";
    const reading = (async () => {
      for (;;) {
        const r = await reader.read();
        if (r.done) return;
        text += dec.decode(r.value);
      }
    })();
    await new Promise((r) => setTimeout(r, 30));
    expect(text).not.toContain("[DONE]"); // held while the finish promise is pending
    release();
    await reading;
    expect(settledAt).toBeGreaterThan(0);
    expect(text).toBe(EXPECTED);
    // Without the option the same stream ends without waiting.
    const free = createChatStreamTranslator(sourceOf([enc.encode(UPSTREAM)]).source, { ...OPTS, includeUsage: true, onFinish: () => new Promise<void>(() => undefined) });
    expect(await readAll(free.readable)).toBe(EXPECTED);
  });

  it("resolves ready with the error when the upstream fails before any output", async () => {
    const src = sourceOf([enc.encode(frame({ error: { message: "context too long", code: 400 } }) + DONE)]);
    const t = createChatStreamTranslator(src.source, OPTS);
    const err = await t.ready;
    expect(err).toBeInstanceOf(UpstreamRejectedError);
    expect(err!.message).toBe("The prompt is longer than the model's context length.");
    await t.readable.cancel();
    expect((await t.done).status).toBe("upstream_error");
  });

  it("emits an error event and [DONE] when the upstream connection fails mid-stream", async () => {
    const outcomes: StreamOutcome[] = [];
    const src = sourceOf([enc.encode(frame({ text: "A", meta_info: meta() }))], true);
    const t = createChatStreamTranslator(src.source, { ...OPTS, onFinish: (o) => outcomes.push(o) });
    const p = payloads(await readAll(t.readable)) as any[];
    expect(p.at(-1)).toBe("[DONE]");
    expect(p.at(-2).error.code).toBe("upstream_error");
    expect(outcomes[0]!.status).toBe("upstream_error");
    expect(outcomes[0]!.usage!.cached_tokens).toBe(1248);
  });

  it("cancels the upstream when the client goes away", async () => {
    const outcomes: StreamOutcome[] = [];
    const frames = Array.from({ length: 50 }, (_, i) => enc.encode(frame({ text: "x".repeat(i + 1), meta_info: meta() })));
    const src = sourceOf(frames);
    const t = createChatStreamTranslator(src.source, { ...OPTS, onFinish: (o) => outcomes.push(o) });
    const reader = t.readable.getReader();
    await reader.read();
    await reader.read();
    await reader.cancel("bye");
    expect(src.cancelled()).toBe("bye");
    expect(outcomes).toHaveLength(1);
    expect(outcomes[0]!.status).toBe("client_cancelled");
    expect(src.pulls()).toBeLessThan(10);
  });

  it("a deadline passing while the client is not reading ends and settles the stream at once; the client then reads the error", async () => {
    const outcomes: StreamOutcome[] = [];
    let upstreamCancelled: unknown = undefined;
    // The first frame, then silence with the connection held: only the total deadline can end it.
    const body = new ReadableStream<Uint8Array>({
      start(c) {
        c.enqueue(enc.encode(frame({ text: "A", meta_info: meta() })));
      },
      cancel(reason) {
        upstreamCancelled = reason;
      },
    });
    const exchange = openExchange({ headersMs: 60_000, idleMs: 60_000, deadlineAt: Date.now() + 100, clientSignal: null });
    const guarded = exchange.body(body);
    const t = createChatStreamTranslator(guarded, { ...OPTS, onFinish: (o) => outcomes.push(o) });
    expect(await t.ready).toBeNull();
    const outcome = await t.done; // nobody has read a byte
    expect(outcome.status).toBe("upstream_error");
    expect(outcome.error).toBeInstanceOf(UpstreamTimeoutError);
    expect(outcomes).toEqual([outcome]);
    expect(exchange.signal.aborted).toBe(true);
    expect(upstreamCancelled).toBeInstanceOf(UpstreamTimeoutError);
    const p = payloads(await readAll(t.readable)) as any[];
    expect(p[0].choices[0].delta.role).toBe("assistant");
    expect(p.at(-2).error.message).toBe("The worker did not finish in time.");
    expect(p.at(-1)).toBe("[DONE]");
  });

  it("applies backpressure: an unread client stream stops the upstream read", async () => {
    const frames = Array.from({ length: 100 }, (_, i) => enc.encode(frame({ text: "y".repeat(i + 1), meta_info: meta() })));
    const src = sourceOf(frames);
    const t = createChatStreamTranslator(src.source, OPTS);
    await t.ready;
    for (let i = 0; i < 50; i++) await new Promise((r) => setTimeout(r, 0));
    expect(src.pulls()).toBeLessThan(6);
    await t.readable.cancel();
  });

  it("does not let a throwing callback break the stream", async () => {
    const t = createChatStreamTranslator(sourceOf([enc.encode(UPSTREAM)]).source, {
      ...OPTS,
      includeUsage: true,
      onUsage: () => {
        throw new Error("callback bug");
      },
    });
    expect(await readAll(t.readable)).toBe(EXPECTED);
  });
});

describe("stream translator over real HTTP", () => {
  let url = "";
  const server = createServer((req, res) => {
    res.writeHead(200, { "content-type": "text/event-stream" });
    // write the upstream in awkward pieces, splitting multi-byte characters
    const bytes = Buffer.from(UPSTREAM, "utf8");
    let i = 0;
    const step = () => {
      if (i >= bytes.length) return res.end();
      const n = 1 + (i % 13);
      res.write(bytes.subarray(i, i + n));
      i += n;
      setImmediate(step);
    };
    step();
  });
  beforeAll(async () => {
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/generate`;
  });
  afterAll(async () => {
    await new Promise<void>((r) => server.close(() => r()));
  });

  it("translates a real SSE response body", async () => {
    const res = await fetch(url, { method: "POST", body: "{}" });
    const body = openExchange({ headersMs: 5_000, idleMs: 5_000, deadlineAt: Date.now() + 30_000, clientSignal: null }).body(res.body!);
    const t = createChatStreamTranslator(body, { ...OPTS, includeUsage: true });
    expect(await readAll(t.readable)).toBe(EXPECTED);
  });
});
