import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getQwenTokenizer } from "../../../src/prompt/tokenizer/index.ts";
import { renderChatPrompt } from "../../../src/prompt/index.ts";
import { startSimulatedWorker, type SimulatedWorker } from "../../../services/sglang-sim/worker.ts";
import { simOutputMarker } from "../../../services/sglang-sim/scripted-output.ts";

type Json = Record<string, any>;

async function post(w: SimulatedWorker, path: string, body: unknown): Promise<Response> {
  return fetch(`${w.url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
}

/** Reads an SSE body into its `data:` payloads (the [DONE] marker included as a string). */
async function sse(r: Response): Promise<(Json | string)[]> {
  expect(r.headers.get("content-type")).toMatch(/^text\/event-stream/);
  const text = await r.text();
  expect(text.endsWith("\n\n")).toBe(true);
  return text
    .split("\n\n")
    .filter((s) => s.length > 0)
    .map((frame) => {
      expect(frame.startsWith("data: ")).toBe(true);
      const data = frame.slice(6);
      return data === "[DONE]" ? data : (JSON.parse(data) as Json);
    });
}

const ids = (from: number, n: number): number[] => Array.from({ length: n }, (_, i) => from + i);

describe("simulated SGLang /generate", () => {
  let w: SimulatedWorker;

  beforeAll(async () => {
    w = await startSimulatedWorker({ timingPreset: "instant", pageSize: 16 });
  });

  afterAll(async () => {
    await w.close();
  });

  it("answers a non-stream text request in SGLang's shape", async () => {
    const r = await post(w, "/generate", { text: "Describe the weather today in one sentence.", sampling_params: { max_new_tokens: 12 } });
    expect(r.status).toBe(200);
    const body = (await r.json()) as Json;
    expect(Object.keys(body)).toEqual(["text", "output_ids", "meta_info"]);
    const tok = getQwenTokenizer("qwen3_vl");
    const m = body.meta_info as Json;
    expect(m.id).toMatch(/^[0-9a-f]{32}$/);
    expect(m.prompt_tokens).toBe(tok.encode("Describe the weather today in one sentence.", "").length);
    expect(m.completion_tokens).toBe(body.output_ids.length);
    expect(m.finish_reason).toEqual({ type: "length", length: 12 });
    expect(body.output_ids.length).toBe(12);
    expect(body.text).toBe(tok.decode(body.output_ids));
    expect(m.cached_tokens).toBe(0);
    expect(m.cached_tokens_details).toEqual({ device: 0, host: 0 });
    expect(typeof m.e2e_latency).toBe("number");
    expect(typeof m.response_sent_to_client_ts).toBe("number");
    expect(m.weight_version).toBe("default");
    expect(m.num_retractions).toBe(0);
    expect(m.reasoning_tokens).toBe(0);
  });

  it("reports cached_tokens (whole pages, at most prompt-1 tokens) on a repeated prompt", async () => {
    const prompt = ids(10_000, 100);
    const first = (await (await post(w, "/generate", { input_ids: prompt, sampling_params: { max_new_tokens: 4 } })).json()) as Json;
    expect(first.meta_info.cached_tokens).toBe(0);
    const second = (await (await post(w, "/generate", { input_ids: prompt, sampling_params: { max_new_tokens: 4 } })).json()) as Json;
    expect(second.meta_info.cached_tokens).toBe(96);
    // Exactly 2 full pages: the last token of a prompt is always computed.
    const exact = ids(20_000, 32);
    await post(w, "/generate", { input_ids: exact, sampling_params: { max_new_tokens: 1 } });
    const again = (await (await post(w, "/generate", { input_ids: exact, sampling_params: { max_new_tokens: 1 } })).json()) as Json;
    expect(again.meta_info.cached_tokens).toBe(16);
    // A shared 3-page prefix with a different tail.
    const other = (await (
      await post(w, "/generate", { input_ids: [...prompt.slice(0, 48), ...ids(30_000, 40)], sampling_params: { max_new_tokens: 1 } })
    ).json()) as Json;
    expect(other.meta_info.cached_tokens).toBe(48);
  });

  it("caches the answer too: prompt + output is a cache hit for the next turn", async () => {
    const prompt = ids(50_000, 40);
    const a = (await (await post(w, "/generate", { input_ids: prompt, sampling_params: { max_new_tokens: 40, ignore_eos: true } })).json()) as Json;
    const next = [...prompt, ...(a.output_ids as number[]), ...ids(60_000, 10)];
    const b = (await (await post(w, "/generate", { input_ids: next, sampling_params: { max_new_tokens: 1 } })).json()) as Json;
    // 40 + 39 output tokens with KV = 79 → 4 full pages.
    expect(b.meta_info.cached_tokens).toBe(64);
  });

  it("ends at the model's EOS unless ignore_eos, and honours max_new_tokens", async () => {
    const a = (await (await post(w, "/generate", { input_ids: ids(1, 20), sampling_params: { max_new_tokens: 1000 } })).json()) as Json;
    expect(a.meta_info.finish_reason).toEqual({ type: "stop", matched: 151645 });
    expect(a.output_ids.at(-1)).toBe(151645);
    expect(a.meta_info.completion_tokens).toBe(a.output_ids.length);
    expect(a.text).not.toContain("<|im_end|>");
    const n = a.output_ids.length as number;
    const b = (await (
      await post(w, "/generate", { input_ids: ids(1, 20), sampling_params: { max_new_tokens: n + 50, ignore_eos: true } })
    ).json()) as Json;
    expect(b.meta_info.finish_reason).toEqual({ type: "length", length: n + 50 });
    expect(b.output_ids.slice(0, n - 1)).toEqual(a.output_ids.slice(0, n - 1));
    expect(b.output_ids).not.toContain(151645);
  });

  it("same prompt → same answer; sampling_seed changes it", async () => {
    const body = { input_ids: ids(700, 30), sampling_params: { max_new_tokens: 20, ignore_eos: true } };
    const a = (await (await post(w, "/generate", body)).json()) as Json;
    const b = (await (await post(w, "/generate", body)).json()) as Json;
    expect(b.output_ids).toEqual(a.output_ids);
    const c = (await (
      await post(w, "/generate", { ...body, sampling_params: { ...body.sampling_params, sampling_seed: 42 } })
    ).json()) as Json;
    expect(c.output_ids).not.toEqual(a.output_ids);
  });

  it("stops on a stop string, trims it from text but keeps its tokens in output_ids", async () => {
    const body = { input_ids: ids(3_000, 25), sampling_params: { max_new_tokens: 60, ignore_eos: true } };
    const full = (await (await post(w, "/generate", body)).json()) as Json;
    const text = full.text as string;
    const words = text.split(" ").filter((x) => /^[a-z]{3,}$/.test(x));
    const stop = words[Math.floor(words.length / 2)]!;
    const cut = text.indexOf(stop);
    const r = (await (
      await post(w, "/generate", { ...body, sampling_params: { ...body.sampling_params, stop: [stop, "zzzz-never"] } })
    ).json()) as Json;
    expect(r.meta_info.finish_reason).toEqual({ type: "stop", matched: stop });
    expect(r.text).toBe(text.slice(0, cut));
    const tok = getQwenTokenizer("qwen3_vl");
    expect(tok.decode(r.output_ids)).toContain(stop);
    // no_stop_trim keeps it.
    const k = (await (
      await post(w, "/generate", { ...body, sampling_params: { ...body.sampling_params, stop, no_stop_trim: true } })
    ).json()) as Json;
    expect((k.text as string).endsWith(stop)).toBe(true);
  });

  it("streams cumulative frames, then [DONE]", async () => {
    const r = await post(w, "/generate", { input_ids: ids(4_000, 30), stream: true, sampling_params: { max_new_tokens: 6 } });
    expect(r.status).toBe(200);
    const frames = await sse(r);
    expect(frames.at(-1)).toBe("[DONE]");
    const data = frames.slice(0, -1) as Json[];
    expect(data.length).toBe(6);
    let prev = "";
    data.forEach((f, i) => {
      expect(f.text.startsWith(prev)).toBe(true);
      prev = f.text;
      expect(f.output_ids.length).toBe(i + 1);
      expect(f.meta_info.completion_tokens).toBe(i + 1);
      const last = i === data.length - 1;
      expect(f.meta_info.finish_reason === null).toBe(!last);
      expect("e2e_latency" in f.meta_info).toBe(last);
      expect("response_sent_to_client_ts" in f.meta_info).toBe(i === 0);
      expect(f.meta_info.id).toBe(data[0]!.meta_info.id);
    });
    expect(data.at(-1)!.meta_info.finish_reason).toEqual({ type: "length", length: 6 });
  });

  it("with --incremental-streaming-output, frames carry only what is new: text, ids and output logprobs", async () => {
    const body = { input_ids: ids(4_000, 31), stream: true, return_logprob: true, top_logprobs_num: 2, sampling_params: { max_new_tokens: 8, ignore_eos: true } };
    const inc = await startSimulatedWorker({ timingPreset: "instant", pageSize: 16, incrementalStreamingOutput: true });
    try {
      expect(((await (await fetch(`${inc.url}/server_info`)).json()) as Json).incremental_streaming_output).toBe(true);
      const cumulative = (await sse(await post(w, "/generate", body))).slice(0, -1) as Json[];
      const deltas = (await sse(await post(inc, "/generate", body))).slice(0, -1) as Json[];
      expect(deltas).toHaveLength(cumulative.length);
      const last = cumulative.at(-1)!;
      expect(deltas.map((f) => f.text).join("")).toBe(last.text);
      expect(deltas.flatMap((f) => f.output_ids)).toEqual(last.output_ids);
      expect(deltas.flatMap((f) => f.meta_info.output_token_logprobs)).toEqual(last.meta_info.output_token_logprobs);
      expect(deltas.flatMap((f) => f.meta_info.output_top_logprobs)).toEqual(last.meta_info.output_top_logprobs);
      deltas.forEach((f, i) => {
        expect(f.output_ids).toHaveLength(1);
        expect(f.meta_info.output_token_logprobs_length).toBe(i + 1); // stays the total
      });
    } finally {
      await inc.close();
    }
  });

  it("--stream-interval k: a frame at output lengths 1, k + 1, 2k + 1, … and the finishing one; a request's stream_interval wins", async () => {
    const every = await startSimulatedWorker({ timingPreset: "instant", pageSize: 16, streamInterval: 4 });
    try {
      expect(((await (await fetch(`${every.url}/server_info`)).json()) as Json).stream_interval).toBe(4);
      const counts = async (samplingExtra: Json) => {
        const body = { input_ids: ids(2_000, 33), stream: true, sampling_params: { max_new_tokens: 10, ignore_eos: true, ...samplingExtra } };
        return ((await sse(await post(every, "/generate", body))).slice(0, -1) as Json[]).map((f) => f.meta_info.completion_tokens as number);
      };
      expect(await counts({})).toEqual([1, 5, 9, 10]);
      expect(await counts({ stream_interval: 3 })).toEqual([1, 4, 7, 10]);
      expect(await counts({ stream_interval: 1 })).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    } finally {
      await every.close();
    }
  });

  it("never leaks a stop string (or its beginning) into a stream, and text only grows", async () => {
    const body = { input_ids: ids(3_000, 25), sampling_params: { max_new_tokens: 60, ignore_eos: true } };
    const full = (await (await post(w, "/generate", body)).json()) as Json;
    // A two-word stop string: the frame ending in its first word must be held back.
    const pairs = [...(full.text as string).matchAll(/ [a-z]+ [a-z]+/g)].map((m) => m[0]);
    const stop = pairs[Math.floor(pairs.length / 2)]!;
    expect(stop).toBeDefined();
    const r = await post(w, "/generate", { ...body, stream: true, sampling_params: { ...body.sampling_params, stop } });
    const data = (await sse(r)).slice(0, -1) as Json[];
    const final = data.at(-1)!;
    expect(final.meta_info.finish_reason).toEqual({ type: "stop", matched: stop });
    expect(final.text).toBe((full.text as string).slice(0, (full.text as string).indexOf(stop)));
    let prev = "";
    for (const f of data) {
      expect(f.text.startsWith(prev)).toBe(true);
      expect(f.text).not.toContain(stop);
      prev = f.text;
    }
    // A frame ending in a stop prefix (" c" of " cat") is withheld: no non-final frame ends with one.
    for (const f of data.slice(0, -1)) {
      for (let k = 1; k < stop.length; k++) expect((f.text as string).endsWith(stop.slice(0, k))).toBe(false);
    }
  });

  it("uses the caller's rid", async () => {
    const r = (await (await post(w, "/generate", { input_ids: [1, 2, 3], rid: "my-rid-1", sampling_params: { max_new_tokens: 1 } })).json()) as Json;
    expect(r.meta_info.id).toBe("my-rid-1");
  });

  it("max_new_tokens 0 answers without output", async () => {
    const r = (await (await post(w, "/generate", { input_ids: ids(9, 20), sampling_params: { max_new_tokens: 0 } })).json()) as Json;
    expect(r.output_ids).toEqual([]);
    expect(r.meta_info.finish_reason).toEqual({ type: "length", length: 0 });
  });
});

describe("simulated SGLang /generate: scripted answers, logprobs, n > 1, reasoning tokens", () => {
  let w: SimulatedWorker;
  beforeAll(async () => {
    w = await startSimulatedWorker({ timingPreset: "instant", pageSize: 16 });
  });
  afterAll(async () => {
    await w.close();
  });
  const answer = 'Sure.\n<tool_call>\n{"name": "f", "arguments": {"city": "Zürich 杭州"}}\n</tool_call>';

  it("a [[sim-output:…]] marker scripts the answer exactly (then EOS); the last marker wins", async () => {
    const text = `old ${simOutputMarker("no")} new ${simOutputMarker(answer)}`;
    const body = (await (await post(w, "/generate", { text, sampling_params: { skip_special_tokens: false } })).json()) as Json;
    // The matched EOS is trimmed from text even with special tokens kept (detokenizer trim_matched_stop)…
    expect(body.text).toBe(answer);
    // …unless no_stop_trim.
    const kept = (await (await post(w, "/generate", { text, sampling_params: { skip_special_tokens: false, no_stop_trim: true } })).json()) as Json;
    expect(kept.text).toBe(answer + "<|im_end|>");
    const tok = getQwenTokenizer("qwen3_vl");
    expect(body.output_ids).toEqual([...tok.encode(answer, ""), tok.specialIds.imEnd]);
    const frames = await sse(await post(w, "/generate", { text, stream: true }));
    const texts = frames.filter((f): f is Json => typeof f !== "string").map((f) => f.text as string);
    expect(texts.at(-1)).toBe(answer);
    for (const t of texts) expect(t.includes("\uFFFD")).toBe(false); // split characters are held back
  });

  it("return_logprob gives [logprob, id, text] triples and top alternatives per output token", async () => {
    const body = (await (
      await post(w, "/generate", { text: simOutputMarker("a b"), return_logprob: true, top_logprobs_num: 3, return_text_in_logprobs: true })
    ).json()) as Json;
    const m = body.meta_info as Json;
    expect(m.output_token_logprobs).toHaveLength(body.output_ids.length);
    m.output_token_logprobs.forEach((t: [number, number, string], i: number) => {
      expect(t[1]).toBe(body.output_ids[i]);
      expect(t[0]).toBeLessThanOrEqual(0);
      expect(m.output_top_logprobs[i]).toHaveLength(3);
      expect(m.output_top_logprobs[i][0]).toEqual(t);
    });
    expect(m.output_token_logprobs[0][2]).toBe("a");
  });

  it("n > 1: a JSON array of n results with fresh rids; streams carry index", async () => {
    const r = (await (await post(w, "/generate", { text: "n copies please ".repeat(20), rid: "abc", sampling_params: { n: 2, max_new_tokens: 3 } })).json()) as Json[];
    expect(r).toHaveLength(2);
    expect(r[0]!.meta_info.id).not.toBe("abc");
    expect(r[1]!.meta_info.cached_tokens).toBeGreaterThan(0); // the prefix-warming copy ran first
    const frames = (await sse(await post(w, "/generate", { text: "n copies stream", stream: true, sampling_params: { n: 2, max_new_tokens: 3 } }))).filter(
      (f): f is Json => typeof f !== "string",
    );
    expect(new Set(frames.map((f) => f.index))).toEqual(new Set([0, 1]));
  });

  it("require_reasoning counts tokens through </think>", async () => {
    const tok = getQwenTokenizer("qwen3_vl");
    const thought = "Let me think.\n</think>\n\n";
    const body = (await (await post(w, "/generate", { text: simOutputMarker(thought + "Done."), require_reasoning: true })).json()) as Json;
    expect(body.meta_info.reasoning_tokens).toBe(tok.encode(thought.trimEnd(), "").length);
  });
});

describe("simulated SGLang /generate errors", () => {
  let w: SimulatedWorker;

  beforeAll(async () => {
    w = await startSimulatedWorker({ timingPreset: "instant", contextLength: 1000 });
  });

  afterAll(async () => {
    await w.close();
  });

  const valueError = async (body: unknown, message: RegExp): Promise<void> => {
    const r = await post(w, "/generate", body);
    expect(r.status).toBe(400);
    const j = (await r.json()) as Json;
    expect(Object.keys(j)).toEqual(["error"]);
    expect(Object.keys(j.error)).toEqual(["message"]);
    expect(j.error.message).toMatch(message);
  };

  it("unknown sampling keys fail (400, ValueError shape)", async () => {
    await valueError({ text: "hi", sampling_params: { max_tokens: 5 } }, /unexpected keyword argument 'max_tokens'/);
    await valueError({ text: "hi", sampling_params: { seed: 5 } }, /'seed'/);
  });

  it("wrong sampling types and ranges fail", async () => {
    await valueError({ text: "hi", sampling_params: { temperature: "hot" } }, /temperature/);
    await valueError({ text: "hi", sampling_params: { top_p: 0 } }, /top_p must be in \(0, 1\]/);
    await valueError({ text: "hi", sampling_params: { temperature: -1 } }, /temperature must be non-negative/);
    await valueError({ text: "hi", sampling_params: { top_k: 0 } }, /top_k/);
    await valueError({ text: "hi", sampling_params: { repetition_penalty: 3 } }, /repetition_penalty/);
    await valueError({ text: "hi", sampling_params: { max_new_tokens: 5, min_new_tokens: 9 } }, /min_new_tokens/);
    await valueError({ text: "hi", sampling_params: { regex: "a", json_schema: "{}" } }, /Only one of regex/);
  });

  it("accepts every documented sampling key", async () => {
    const r = await post(w, "/generate", {
      text: "hi",
      sampling_params: {
        max_new_tokens: 3,
        min_new_tokens: 1,
        temperature: 0,
        top_p: 0.9,
        top_k: -1,
        min_p: 0.1,
        frequency_penalty: 0.5,
        presence_penalty: -0.5,
        repetition_penalty: 1.1,
        stop: "never-matches",
        stop_token_ids: [7],
        stop_regex: null,
        n: 1,
        ignore_eos: false,
        no_stop_trim: false,
        skip_special_tokens: true,
        spaces_between_special_tokens: true,
        json_schema: null,
        logit_bias: { "5": 1.0 },
        sampling_seed: 3,
        stream_interval: 1,
        custom_params: null,
      },
    });
    expect(r.status).toBe(200);
  });

  it("input errors are ValueErrors", async () => {
    await valueError({ sampling_params: {} }, /Either text, input_ids or input_embeds/);
    await valueError({ text: "a", input_ids: [1] }, /Only one of text, input_ids/);
    await valueError({ input_ids: ids(0, 1000) }, /longer than the model's context length/);
    await valueError({ input_ids: ids(0, 900), sampling_params: { max_new_tokens: 200 } }, /maximum context length of 1000/);
    await valueError({ text: ["a", "b"] }, /Batch requests are not supported/);
    await valueError({ text: "a", return_logprob: [true] }, /Batch requests are not supported/);
  });

  it("media that cannot be loaded or placed is refused like SGLang; mm_hashes alone are ignored", async () => {
    await valueError({ text: "<|vision_start|><|image_pad|><|vision_end|>", image_data: ["data:image/png;base64,AAAA"] }, /Failed to load image/);
    // More items than placeholders: SGLang warns and does not load the extras (base_processor.py @3b05740b).
    const extra = await post(w, "/generate", { text: "x", video_data: "http://example.com/a.mp4", sampling_params: { max_new_tokens: 1 } });
    expect(extra.status).toBe(200);
    const hashesOnly = await post(w, "/generate", { text: "x", mm_hashes: ["abcd"], sampling_params: { max_new_tokens: 1 } });
    expect(hashesOnly.status).toBe(200);
    const ok = await post(w, "/generate", { text: "x", image_data: null, video_data: [], sampling_params: { max_new_tokens: 1 } });
    expect(ok.status).toBe(200);
  });

  it("body validation failures use the pydantic error shape; unknown top-level keys are ignored", async () => {
    for (const body of ['{"text": "a", "stream": "yes"}', "{not json", '{"text": 5}']) {
      const r = await post(w, "/generate", body);
      expect(r.status).toBe(400);
      const j = (await r.json()) as Json;
      expect(j).toMatchObject({ object: "error", type: "Bad Request", param: null, code: 400 });
      expect(typeof j.message).toBe("string");
    }
    const r = await post(w, "/generate", { text: "a", mm_hashs: ["x"], bogus: 1, sampling_params: { max_new_tokens: 1 } });
    expect(r.status).toBe(200);
  });

  it("errors inside a stream arrive as an inline frame after a 200, then [DONE]", async () => {
    const r = await post(w, "/generate", { text: "hi", stream: true, sampling_params: { max_tokens: 5 } });
    expect(r.status).toBe(200);
    const frames = await sse(r);
    expect(frames).toEqual([
      {
        error: {
          message: "SamplingParams.__init__() got an unexpected keyword argument 'max_tokens'",
          type: "invalid_request_error",
          code: 400,
          retryable: false,
        },
      },
      "[DONE]",
    ]);
  });

  it("the Python-faithful mode answers an unknown sampling key with a bare 500", async () => {
    const w5 = await startSimulatedWorker({ timingPreset: "instant", unknownSamplingKeyStatus: 500, kvEvents: false });
    try {
      const r = await post(w5, "/generate", { text: "hi", sampling_params: { max_tokens: 5 } });
      expect(r.status).toBe(500);
      expect(await r.text()).toBe("Internal Server Error");
      const s = await post(w5, "/generate", { text: "hi", stream: true, sampling_params: { max_tokens: 5 } });
      expect(s.status).toBe(200);
      await expect(s.text()).rejects.toThrow();
    } finally {
      await w5.close();
    }
  });
});

describe("simulated SGLang control endpoints", () => {
  let w: SimulatedWorker;

  beforeAll(async () => {
    w = await startSimulatedWorker({ timing: { decodeMsPerToken: 5 }, pageSize: 32, capacityTokens: 4096, modelName: "Qwen/Qwen2.5-VL-7B-Instruct", family: "qwen2_5_vl", template: "qwen2vl" });
  });

  afterAll(async () => {
    await w.close();
  });

  it("/server_info describes the KV publisher, page size and limits", async () => {
    const j = (await (await fetch(`${w.url}/server_info`)).json()) as Json;
    const kvPort = Number(new URL(w.kvEndpoint!.replace("tcp://", "http://")).port);
    expect(j.kv_events).toEqual({ publisher: "zmq", endpoint_host: "127.0.0.1", endpoint_port_base: kvPort, topic: "", block_size: 32, dp_size: 1 });
    expect(j.page_size).toBe(32);
    expect(j.model_path).toBe("Qwen/Qwen2.5-VL-7B-Instruct");
    expect(j.served_model_name).toBe("Qwen/Qwen2.5-VL-7B-Instruct");
    expect(j.max_total_num_tokens).toBe(4096);
    expect(j.max_req_input_len).toBe(4095);
    expect(j.context_length).toBe(null);
    expect(j.incremental_streaming_output).toBe(false);
    expect(j.enable_cache_report).toBe(true);
    expect(j.status).toBe("ready");
    expect(typeof j.version).toBe("string");
    expect(JSON.parse(j.kv_events_config as string)).toMatchObject({ publisher: "zmq", replay_endpoint: w.replayEndpoint });
    expect(Array.isArray(j.internal_states)).toBe(true);
  });

  it("/model_info, /health, /health_generate", async () => {
    const m = (await (await fetch(`${w.url}/model_info`)).json()) as Json;
    expect(m).toMatchObject({ model_path: "Qwen/Qwen2.5-VL-7B-Instruct", is_generation: true, model_type: "qwen2_5_vl", has_image_understanding: true });
    const h = await fetch(`${w.url}/health`);
    expect(h.status).toBe(200);
    expect(await h.text()).toBe("");
    expect((await fetch(`${w.url}/health_generate`)).status).toBe(200);
    expect((await fetch(`${w.url}/nope`)).status).toBe(404);
  });

  it("rejects a duplicate in-flight rid, and /abort_request ends a stream with an abort frame", async () => {
    const streaming = post(w, "/generate", { input_ids: ids(100, 50), rid: "abc-123-xyz", stream: true, sampling_params: { max_new_tokens: 2000, ignore_eos: true } });
    const res = await streaming;
    const reader = res.body!.getReader();
    await reader.read(); // the first frame: the request is running
    const dup = await post(w, "/generate", { input_ids: [1, 2, 3], rid: "abc-123-xyz" });
    expect(dup.status).toBe(400);
    expect(((await dup.json()) as Json).error.message).toBe("Duplicate request ID detected");
    const a = await post(w, "/abort_request", { rid: "abc-123" }); // prefix match
    expect(a.status).toBe(200);
    let rest = "";
    const dec = new TextDecoder();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      rest += dec.decode(value);
    }
    const frames = rest.split("\n\n").filter(Boolean);
    expect(frames.at(-1)).toBe("data: [DONE]");
    const last = JSON.parse(frames.at(-2)!.slice(6)) as Json;
    expect(last.meta_info.finish_reason).toMatchObject({ type: "abort", status_code: null });
    expect(last.output_ids.length).toBeLessThan(2000);
  });

  it("a prompt is matchable right after its prefill, while the first request still decodes", async () => {
    const prompt = ids(77_000, 200);
    const first = await post(w, "/generate", { input_ids: prompt, stream: true, sampling_params: { max_new_tokens: 30, ignore_eos: true } });
    const reader = first.body!.getReader();
    await reader.read(); // first token decoded → prefill done
    const second = (await (await post(w, "/generate", { input_ids: prompt, sampling_params: { max_new_tokens: 1 } })).json()) as Json;
    expect(second.meta_info.cached_tokens).toBe(192);
    while (!(await reader.read()).done) {
      // drain
    }
  });

  it("/flush_cache refuses while busy and clears when idle", async () => {
    const running = await post(w, "/generate", { input_ids: ids(300, 64), stream: true, sampling_params: { max_new_tokens: 40, ignore_eos: true } });
    const reader = running.body!.getReader();
    await reader.read(); // the request is decoding
    const busy = await post(w, "/flush_cache", {});
    expect(busy.status).toBe(400);
    expect(await busy.text()).toBe("Flush cache failed.\n");
    while (!(await reader.read()).done) {
      // drain
    }
    expect(w.cacheDump().length).toBeGreaterThan(0);
    const ok = await post(w, "/flush_cache", {});
    expect(ok.status).toBe(200);
    expect(w.cacheDump()).toEqual([]);
  });

  it("keeps the tree within capacity under pressure, evicting LRU entries", async () => {
    const jobs = [];
    for (let i = 0; i < 12; i++) {
      jobs.push(post(w, "/generate", { input_ids: ids(100_000 + i * 10_000, 900), sampling_params: { max_new_tokens: 10, ignore_eos: true } }));
    }
    const res = await Promise.all(jobs);
    for (const r of res) expect(r.status).toBe(200);
    expect(w.engine.cache.totalTokens).toBeLessThanOrEqual(4096);
    expect(w.engine.cache.protectedTokens).toBe(0);
    // Sequentially: the oldest prompts are evicted first, the newest is still cached.
    const seqPrompt = (i: number): number[] => ids(300_000 + i * 10_000, 900);
    for (let i = 0; i < 5; i++) {
      const r = await post(w, "/generate", { input_ids: seqPrompt(i), sampling_params: { max_new_tokens: 10, ignore_eos: true } });
      expect(r.status).toBe(200);
    }
    const newest = (await (await post(w, "/generate", { input_ids: seqPrompt(4), sampling_params: { max_new_tokens: 1 } })).json()) as Json;
    expect(newest.meta_info.cached_tokens).toBe(896);
    const oldest = (await (await post(w, "/generate", { input_ids: seqPrompt(0), sampling_params: { max_new_tokens: 1 } })).json()) as Json;
    expect(oldest.meta_info.cached_tokens).toBe(0);
  });

  it("/debug/cache lists the true block set as decimal int64 strings", async () => {
    await post(w, "/generate", { input_ids: ids(7, 70), sampling_params: { max_new_tokens: 1 } });
    const d = (await (await fetch(`${w.url}/debug/cache`)).json()) as Json;
    expect(d.blocks.length).toBe(w.cacheDump().length);
    for (const b of d.blocks as Json[]) {
      expect(b.hash).toMatch(/^-?\d+$/);
      expect(b.parent === null || /^-?\d+$/.test(b.parent)).toBe(true);
      expect(b.tokens.length).toBe(32);
    }
  });

  it("kill() drops connections at once", async () => {
    const k = await startSimulatedWorker({ timingPreset: "instant" });
    k.kill();
    await expect(fetch(`${k.url}/health`)).rejects.toThrow();
  });
});

describe("simulated SGLang /v1/chat/completions", () => {
  let w: SimulatedWorker;
  const messages = [
    { role: "system", content: "You are a helpful assistant." },
    { role: "user", content: "Tell me a story about a cat that lives by a river. ".repeat(8) },
  ];

  beforeAll(async () => {
    w = await startSimulatedWorker({ timingPreset: "instant" });
  });

  afterAll(async () => {
    await w.close();
  });

  it("answers non-stream with usage incl. cached tokens on a repeat", async () => {
    const body = { model: "qwen3-vl", messages, max_tokens: 10, temperature: 0 };
    const first = (await (await post(w, "/v1/chat/completions", body)).json()) as Json;
    expect(first.object).toBe("chat.completion");
    expect(first.id).toMatch(/^[0-9a-f]{32}$/);
    expect(first.model).toBe("qwen3-vl");
    expect(first.choices[0]).toMatchObject({ index: 0, message: { role: "assistant", reasoning_content: null, tool_calls: null }, logprobs: null, finish_reason: "length", matched_stop: null });
    const expectedPrompt = getQwenTokenizer("qwen3_vl").encode(renderChatPrompt("qwen3_vl", "qwen3vl-instruct", { messages }), "").length;
    expect(first.usage).toEqual({ prompt_tokens: expectedPrompt, total_tokens: expectedPrompt + 10, completion_tokens: 10, prompt_tokens_details: null, reasoning_tokens: 0 });
    const second = (await (await post(w, "/v1/chat/completions", body)).json()) as Json;
    expect(second.usage.prompt_tokens_details).toEqual({ cached_tokens: Math.floor((expectedPrompt - 1) / 16) * 16 });
    expect(second.choices[0].message.content).toBe(first.choices[0].message.content);
  });

  it("streams role, content deltas, a finish chunk, usage, then [DONE]", async () => {
    const r = await post(w, "/v1/chat/completions", { messages, max_tokens: 5, stream: true, stream_options: { include_usage: true } });
    expect(r.status).toBe(200);
    const frames = await sse(r);
    expect(frames.at(-1)).toBe("[DONE]");
    const chunks = frames.slice(0, -1) as Json[];
    expect(chunks[0]!.choices[0].delta).toEqual({ reasoning_content: null, role: "assistant", content: "" });
    const usage = chunks.at(-1)!;
    expect(usage.choices).toEqual([]);
    expect(usage.usage.completion_tokens).toBe(5);
    const finish = chunks.at(-2)!;
    expect(finish.choices[0]).toEqual({ index: 0, delta: { reasoning_content: null }, logprobs: null, finish_reason: "length", matched_stop: null });
    const content = chunks.slice(1, -2).map((c) => c.choices[0].delta.content as string).join("");
    const nonStream = (await (await post(w, "/v1/chat/completions", { messages, max_tokens: 5 })).json()) as Json;
    expect(content).toBe(nonStream.choices[0].message.content);
    for (const c of chunks) {
      expect(c.object).toBe("chat.completion.chunk");
      expect(c.id).toBe(chunks[0]!.id);
    }
  });

  it("refuses bad requests with SGLang's OpenAI error shape", async () => {
    const bad = await post(w, "/v1/chat/completions", { messages: [] });
    expect(bad.status).toBe(400);
    expect((await bad.json()) as Json).toMatchObject({ object: "error", code: 400 });
    const media = await post(w, "/v1/chat/completions", {
      messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "https://x/y.png" } }, { type: "text", text: "hi" }] }],
    });
    expect(media.status).toBe(400);
    expect(((await media.json()) as Json).message).toMatch(/Failed to load image: .*not allowed/);
    const range = await post(w, "/v1/chat/completions", { messages, top_p: 5 });
    expect(range.status).toBe(400);
    expect((await range.json()) as Json).toMatchObject({ object: "error", type: "BadRequest", code: 400 });
  });

  it("hides cached tokens from usage without the cache report", async () => {
    const w2 = await startSimulatedWorker({ timingPreset: "instant", enableCacheReport: false, kvEvents: false });
    try {
      const body = { messages, max_tokens: 2 };
      await post(w2, "/v1/chat/completions", body);
      const j = (await (await post(w2, "/v1/chat/completions", body)).json()) as Json;
      expect(j.usage.prompt_tokens_details).toBe(null);
      // /generate's meta_info reports it regardless.
      const g = (await (await post(w2, "/generate", { input_ids: ids(1, 40), sampling_params: { max_new_tokens: 1 } })).json()) as Json;
      const g2 = (await (await post(w2, "/generate", { input_ids: ids(1, 40), sampling_params: { max_new_tokens: 1 } })).json()) as Json;
      expect(g.meta_info.cached_tokens).toBe(0);
      expect(g2.meta_info.cached_tokens).toBe(32);
    } finally {
      await w2.close();
    }
  });
});
