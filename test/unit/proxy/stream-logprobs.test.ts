/**
 * Streaming from workers that send cumulative frames (SGLang's default: every frame repeats the
 * text, ids and all output logprob positions so far) costs the edge work in proportion to the new
 * tokens of each frame (src/proxy/text-tail.ts, src/proxy/logprob-tail.ts), not the whole answer
 * again: measured by the JSON text handed to JSON.parse, against the same 1 000-token answer
 * streamed in increments (`--incremental-streaming-output`), with and without top_logprobs 20.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import { createChatStreamCore } from "../../../src/proxy/chat-stream.ts";
import { chatOutputPlan } from "../../../src/proxy/chat-output.ts";
import { parseChatRequest } from "../../../src/api/validate.ts";
import { newArrayCursor, splitCumulativeFrame } from "../../../src/proxy/logprob-tail.ts";

const enc = new TextEncoder();
const TOKENS = 1_000;
const TOP = 20;

const tokenText = (i: number) => ` w${i % 97}`;
const entry = (i: number) => [-0.125 - (i % 7) / 8, 1000 + i, tokenText(i)];
const tops = (i: number) => Array.from({ length: TOP }, (_, j) => [-0.125 - j / 4, 2000 + j, j === 0 ? tokenText(i) : ` alt${j}`]);

interface StreamOpts {
  logprobs: boolean;
  /** Frames carry only the new text and positions (`--incremental-streaming-output`). */
  incremental?: boolean;
  /** n > 1: choices interleaved, `index` last in each frame (as SGLang's batch handler appends it). */
  n?: number;
}

/** SGLang-shaped /generate SSE (compact JSON, meta_info key order of the simulator). */
function upstream(o: StreamOpts, tokens = TOKENS): string {
  const n = o.n ?? 1;
  let s = "";
  for (let k = 1; k <= tokens; k++) {
    for (let c = 0; c < n; c++) {
      const from = o.incremental ? k - 1 : 0;
      const ids = Array.from({ length: k - from }, (_, i) => 1000 + from + i);
      const text = ids.map((_, i) => tokenText(from + i)).join("");
      const meta: Record<string, unknown> = { id: `r${c}`, finish_reason: k === tokens ? { type: "length", length: tokens } : null, prompt_tokens: 50, completion_tokens: k, cached_tokens: 0 };
      if (o.logprobs) {
        meta["output_token_logprobs"] = ids.map((_, i) => entry(from + i));
        meta["output_top_logprobs"] = ids.map((_, i) => tops(from + i));
        meta["output_token_logprobs_length"] = k;
      }
      meta["dp_rank"] = 0;
      s += `data: ${JSON.stringify({ text, output_ids: ids, meta_info: meta, ...(n > 1 ? { index: c } : {}) })}\n\n`;
    }
  }
  return s + "data: [DONE]\n\n";
}

function plan(logprobs: boolean, n = 1) {
  const req = parseChatRequest(JSON.stringify({ model: "q", messages: [{ role: "user", content: "hi" }], stream: true, n, ...(logprobs ? { logprobs: true, top_logprobs: TOP } : {}) }));
  return chatOutputPlan(req, { toolCallParser: null, reasoningParser: null });
}

/** Translates the stream in 1 KiB chunks; the client frames and the JSON chars parsed meanwhile. */
function translate(body: string, o: StreamOpts): { frames: string[]; parsedChars: number } {
  const core = createChatStreamCore({ id: "c", model: "q", now: () => 1, plan: plan(o.logprobs, o.n), n: o.n ?? 1, incremental: o.incremental ?? false });
  const bytes = enc.encode(body);
  const parse = JSON.parse.bind(JSON);
  let parsedChars = 0;
  const spy = vi.spyOn(JSON, "parse").mockImplementation(((text: string, reviver?: Parameters<typeof JSON.parse>[1]) => {
    parsedChars += text.length;
    return parse(text, reviver);
  }) as typeof JSON.parse);
  const frames: string[] = [];
  try {
    for (let i = 0; i < bytes.length; i += 1024) frames.push(...core.push(bytes.subarray(i, i + 1024)));
    frames.push(...core.end());
  } finally {
    spy.mockRestore();
  }
  return { frames, parsedChars };
}

type Chunk = { choices?: { index: number; logprobs: { content: { token: string; logprob: number; top_logprobs: { token: string }[] }[] } | null }[]; error?: { message: string } };
const chunks = (frames: string[]) => frames.filter((f) => f !== "data: [DONE]\n\n").map((f) => JSON.parse(f.slice(6)) as Chunk);
const logprobsOf = (frames: string[], index = 0) => chunks(frames).flatMap((c) => (c.choices ?? []).filter((x) => x.index === index).flatMap((x) => x.logprobs?.content ?? []));

afterEach(() => vi.restoreAllMocks());

describe("logprobs from cumulative frames cost what the new tokens do", () => {
  it("a 1 000-token stream parses within 1.5× the JSON of the same answer in increments", () => {
    const plain = translate(upstream({ logprobs: false }), { logprobs: false });
    const plainIncremental = translate(upstream({ logprobs: false, incremental: true }), { logprobs: false, incremental: true });
    // Parsing each cumulative frame whole: ~4.6 MB here, 30× the increments.
    expect(plain.parsedChars).toBeLessThan(1.5 * plainIncremental.parsedChars);
    expect(plain.frames.join("")).toBe(plainIncremental.frames.join(""));
  });

  it("with top_logprobs 20 too", () => {
    const withLp = translate(upstream({ logprobs: true }), { logprobs: true });
    const incremental = translate(upstream({ logprobs: true, incremental: true }), { logprobs: true, incremental: true });
    // Parsing each cumulative frame whole: ~330 MB here.
    expect(withLp.parsedChars).toBeLessThan(1.5 * incremental.parsedChars);
    expect(withLp.frames.join("")).toBe(incremental.frames.join(""));
    const lp = logprobsOf(withLp.frames);
    expect(lp).toHaveLength(TOKENS);
    expect(lp.map((t) => t.token)).toEqual(Array.from({ length: TOKENS }, (_, i) => tokenText(i)));
    expect(lp[999]!.top_logprobs).toHaveLength(TOP);
  });

  it("gives the same logprobs as the worker's incremental frames, at any byte split", () => {
    const cumulative = logprobsOf(translate(upstream({ logprobs: true }, 60), { logprobs: true }).frames);
    const incremental = logprobsOf(translate(upstream({ logprobs: true, incremental: true }, 60), { logprobs: true, incremental: true }).frames);
    expect(cumulative).toHaveLength(60);
    expect(cumulative).toEqual(incremental);
  });

  it("n = 2: each choice keeps its own place in its arrays", () => {
    const out = translate(upstream({ logprobs: true, n: 2 }, 40), { logprobs: true, n: 2 });
    for (const index of [0, 1]) expect(logprobsOf(out.frames, index).map((t) => t.token)).toEqual(Array.from({ length: 40 }, (_, i) => tokenText(i)));
  });

  it("a frame that repeats a logprob key (plain or \\u-escaped) or holds it outside meta_info: read as JSON.parse reads the whole frame", () => {
    const tok = (i: number, lp = -0.5) => [lp, 1 + i, `t${i}`];
    const top = (i: number) => [[-0.5, 1 + i, `t${i}`]];
    const lps = (k: number) => `"output_token_logprobs":${JSON.stringify(Array.from({ length: k }, (_, i) => tok(i)))},"output_top_logprobs":${JSON.stringify(Array.from({ length: k }, (_, i) => top(i)))}`;
    const frame = (k: number, meta: string, extra = "") => `{"text":"${"ab".slice(0, k)}","output_ids":[${Array.from({ length: k }, (_, i) => 1 + i).join(",")}]${extra},"meta_info":{"id":"r","finish_reason":${k === 2 ? '{"type":"length","length":2}' : "null"},${meta}}}`;
    const other = JSON.stringify([tok(0, -9)]);
    const cases: { name: string; frames: string[] }[] = [
      { name: "token logprobs repeated plain", frames: [frame(1, `${lps(1)},"output_token_logprobs":${other}`), frame(2, lps(2))] },
      { name: "token logprobs repeated escaped", frames: [frame(1, `${lps(1)},"output_token_logprob\\u0073":${other}`), frame(2, lps(2))] },
      { name: "both repeated escaped with the placeholder's value", frames: [frame(1, `${lps(1)},"output_token_logprob\\u0073":[],"output_top_logpro\\u0062s":[]`), frame(2, lps(2))] },
      { name: "top logprobs repeated in the second frame", frames: [frame(1, lps(1)), frame(2, `${lps(2)},"output_top_logprobs":${JSON.stringify([top(0), [[-3, 9, "z"]]])}`)] },
      { name: "the arrays outside meta_info", frames: [frame(1, '"dp_rank":0', `,"x":{${lps(1)}}`), frame(2, lps(2))] },
    ];
    // The reference: each frame parsed whole, its arrays and text past the previous frame's sent as increments.
    const incremental = (frames: string[]) => {
      let sent = { text: 0, tokens: 0, tops: 0 };
      return frames.map((f) => {
        const o = JSON.parse(f) as { text: string; meta_info: Record<string, unknown> };
        const t = o.meta_info["output_token_logprobs"] as unknown[] | undefined;
        const p = o.meta_info["output_top_logprobs"] as unknown[] | undefined;
        const meta = { ...o.meta_info, ...(t ? { output_token_logprobs: t.slice(sent.tokens) } : {}), ...(p ? { output_top_logprobs: p.slice(sent.tops) } : {}) };
        const inc = { text: o.text.slice(sent.text), meta_info: meta };
        sent = { text: o.text.length, tokens: t?.length ?? sent.tokens, tops: p?.length ?? sent.tops };
        return JSON.stringify(inc);
      });
    };
    const body = (frames: string[]) => frames.map((f) => `data: ${f}\n\n`).join("") + "data: [DONE]\n\n";
    for (const c of cases) {
      const expected = translate(body(incremental(c.frames)), { logprobs: true, incremental: true }).frames;
      expect(chunks(expected).some((x) => x.error), c.name).toBe(false);
      const got = translate(body(c.frames), { logprobs: true }).frames;
      expect.soft(got.join(""), c.name).toBe(expected.join(""));
    }
  });

  it("a frame whose arrays do not extend the previous frame's is a malformed upstream, not a silent misread", () => {
    const f = (lps: unknown[], text: string) => `data: ${JSON.stringify({ text, meta_info: { id: "r", finish_reason: null, output_token_logprobs: lps, output_top_logprobs: lps.map(() => null) } })}\n\n`;
    const body = f([[-0.5, 1, "a"]], "a") + f([[-0.25, 1, "a"], [-0.5, 2, "b"]], "ab") + "data: [DONE]\n\n";
    const frames = translate(body, { logprobs: true }).frames;
    expect(chunks(frames).at(-1)!.error?.message).toMatch(/unreadable/);
    expect(logprobsOf(frames).map((t) => t.token)).not.toContain("b");
  });

  it("splitCumulativeFrame: SGLang's frames split (a \\u escape in the text too); a possible repeat of a key goes whole", () => {
    const arrays = '"output_token_logprobs":[[-0.5,1,"a\\u0001"]],"output_top_logprobs":[null]';
    const frame = (meta: string) => `{"text":"a\\u0001","output_ids":[1],"meta_info":{"id":"r","finish_reason":null,${meta}}}`;
    const split = splitCumulativeFrame(frame(`${arrays},"dp_rank":0`), newArrayCursor(), newArrayCursor());
    expect(split).toMatchObject({ tokens: [[-0.5, 1, "a\u0001"]], tops: [null], hasTokens: true, hasTops: true });
    for (const meta of [
      `${arrays},"output_token_logprobs":[]`, // repeated plain
      `${arrays},"output_top_logprob\\u0073":[]`, // repeated escaped
      `"output_token_logprob\\u0073":[],"x":{${arrays}}`, // escaped before a nested copy
      `"output_top_logprobs":[],"x":{${arrays}}`, // plain before a nested copy
    ])
      expect(splitCumulativeFrame(frame(meta), newArrayCursor(), newArrayCursor()), meta).toBeNull();
  });
});
