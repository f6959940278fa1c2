/**
 * The chat API end to end with the real `openai` SDK against the local fleet (simulated SGLang workers
 * + relays + the edge under Miniflare). The simulated model answers with scripted text ([[sim-output:…]]), chosen
 * to be the model outputs of SGLang's own parser tests, and each result is compared with what SGLang's
 * `/v1/chat/completions` returns for that output (worked out from its source and tests, cited inline:
 * test/registered/unit/function_call/test_qwen25_detector.py, test_reasoning_parser.py,
 * serving_chat.py, function_call/utils.py). Those are upstream facts; that the simulator and the edge
 * agree is only consistency.
 */
import OpenAI from "openai";
import { zodResponseFormat } from "openai/helpers/zod";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import type { Fleet } from "../../scripts/local-fleet.ts";
import { sdkFleet } from "../helpers/sdk-client.ts";
import { simOutputMarker } from "../../services/sglang-sim/scripted-output.ts";


// test_qwen25_detector.py setUp tools, and its test_parallel_tool_calls output.
const TOOLS: OpenAI.Chat.Completions.ChatCompletionFunctionTool[] = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "Get weather information",
      parameters: { type: "object", properties: { city: { type: "string", description: "City name" }, unit: { type: "string", enum: ["celsius", "fahrenheit"] } }, required: ["city"] },
    },
  },
  {
    type: "function",
    function: { name: "search", description: "Search the web", parameters: { type: "object", properties: { query: { type: "string", description: "Search query" } }, required: ["query"] } },
  },
];
const PARALLEL =
  '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Beijing"}}\n</tool_call>\n' +
  '<tool_call>\n{"name": "search", "arguments": {"query": "restaurants"}}\n</tool_call>';
// SGLang's message for that output (serving_chat.py _process_tool_calls → parse_base_json:
// arguments = json.dumps(arguments, ensure_ascii=False); content = text before the first call, stripped → None).
const PARALLEL_CALLS = [
  { type: "function", function: { name: "get_weather", arguments: '{"city": "Beijing"}' } },
  { type: "function", function: { name: "search", arguments: '{"query": "restaurants"}' } },
];

/** A long, fixed system prompt so cache ratios are measured over many blocks. */
const SYSTEM = `You are a travel agent. ${Array.from({ length: 120 }, (_, i) => `Rule ${i}: be precise about cities and dates.`).join(" ")}`;

function user(text: string, answer: string): OpenAI.Chat.Completions.ChatCompletionMessageParam {
  return { role: "user", content: `${text} ${simOutputMarker(answer)}` };
}

async function lastGenerate(fleet: Fleet, rid: string): Promise<{ jsonSchema: unknown; returnLogprob: unknown; requireReasoning: unknown } | undefined> {
  for (const w of fleet.workers) {
    const r = (await (await fetch(`${w.url}/debug/requests`)).json()) as { requests: { rid: string | null; jsonSchema: unknown; returnLogprob: unknown; requireReasoning: unknown }[] };
    const hit = r.requests.find((x) => x.rid === rid);
    if (hit) return hit;
  }
  return undefined;
}

const ridOf = (completionId: string) => completionId.replace(/^chatcmpl-/, "");

describe("openai SDK against an instruct fleet", () => {
  let fleet: Fleet;
  let client: OpenAI;
  sdkFleet({ workers: 2 }, (f, c) => {
    fleet = f;
    client = c;
  });

  it("tools, non-stream: two parallel tool_calls with ids, finish_reason tool_calls", async () => {
    const r = await client.chat.completions.create({ model: fleet.model, messages: [user("Weather in Beijing, and restaurants?", PARALLEL)], tools: TOOLS });
    const c = r.choices[0]!;
    expect(c.finish_reason).toBe("tool_calls");
    expect(c.message.content).toBeNull();
    expect(c.message.tool_calls).toMatchObject(PARALLEL_CALLS);
    for (const t of c.message.tool_calls!) expect(t.id).toMatch(/^call_[0-9a-f]{24}$/);
    expect((c as unknown as { matched_stop: unknown }).matched_stop).toBeNull(); // cleared with the tool_calls rewrite
  });

  it("tools, stream: the SDK accumulates both calls, each sent whole (id, type, name, arguments), indices 0 and 1", async () => {
    const stream = client.chat.completions.stream({ model: fleet.model, messages: [user("Weather in Beijing, and restaurants? (stream)", PARALLEL)], tools: TOOLS, stream_options: { include_usage: true } });
    const deltas: OpenAI.Chat.Completions.ChatCompletionChunk.Choice.Delta.ToolCall[] = [];
    stream.on("chunk", (chunk) => {
      for (const ch of chunk.choices) deltas.push(...(ch.delta.tool_calls ?? []));
    });
    const done: string[] = [];
    stream.on("tool_calls.function.arguments.done", (e) => done.push(`${e.index}:${e.name}:${e.arguments}`));
    const final = await stream.finalChatCompletion();
    const c = final.choices[0]!;
    expect(c.finish_reason).toBe("tool_calls");
    expect(c.message.tool_calls).toMatchObject(PARALLEL_CALLS);
    expect(done).toEqual(['0:get_weather:{"city": "Beijing"}', '1:search:{"query": "restaurants"}']);
    // OpenAI's streaming shape, one delta per call: a call is sent once complete (docs/api.md).
    for (const index of [0, 1]) {
      const mine = deltas.filter((d) => d.index === index);
      expect(mine).toEqual([{ index, id: expect.stringMatching(/^call_/), type: "function", function: { name: PARALLEL_CALLS[index]!.function.name, arguments: PARALLEL_CALLS[index]!.function.arguments } }]);
    }
    expect(final.usage?.completion_tokens).toBeGreaterThan(0);
  });

  it("tools, stream: a call cut off by max_tokens or broken after its name is never sent as a call", async () => {
    const cases = [
      { answer: '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>', maxTokens: 12, finish: "length" },
      { answer: '<tool_call>\n{"name": "get_weather", "arguments": {"city": }\n</tool_call>', maxTokens: 200, finish: "stop" },
    ];
    for (const { answer, maxTokens, finish } of cases) {
      const chunks = await client.chat.completions.create({ model: fleet.model, messages: [user("Weather in Paris? (cut)", answer)], tools: TOOLS, max_tokens: maxTokens, stream: true });
      let content = "";
      let toolDeltas = 0;
      let finishReason: string | null = null;
      for await (const chunk of chunks) {
        for (const ch of chunk.choices) {
          content += ch.delta.content ?? "";
          toolDeltas += ch.delta.tool_calls?.length ?? 0;
          finishReason = ch.finish_reason ?? finishReason;
        }
      }
      expect(toolDeltas, answer).toBe(0);
      expect(finishReason, answer).toBe(finish);
      expect(answer.startsWith(content) && content.startsWith("<tool_call>"), content).toBe(true);
    }
  });

  it("forced tool (named tool_choice): constrained in the native <tool_call> format, read as any other call", async () => {
    const answer = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>';
    const r = await client.chat.completions.create({
      model: fleet.model,
      messages: [user("Weather in Paris?", answer)],
      tools: TOOLS,
      tool_choice: { type: "function", function: { name: "get_weather" } },
    });
    expect(r.choices[0]!.finish_reason).toBe("tool_calls");
    expect(r.choices[0]!.message.tool_calls).toMatchObject([{ type: "function", function: { name: "get_weather", arguments: '{"city": "Paris", "unit": "celsius"}' } }]);
    // function_call_parser.py get_structure_constraint: a structural tag (unit-tested), no JSON-array schema.
    const sent = await lastGenerate(fleet, ridOf(r.id));
    expect(sent!.jsonSchema).toBeNull();
  });

  it("json_schema: parse() with a zod schema returns validated JSON; the schema reached the worker", async () => {
    const Weather = z.object({ city: z.string(), temperature_c: z.number(), conditions: z.array(z.string()) });
    const answer = '{"city": "Oslo", "temperature_c": -3.5, "conditions": ["snow", "wind"]}';
    const r = await client.chat.completions.parse({
      model: fleet.model,
      messages: [user("Weather in Oslo as JSON.", answer)],
      response_format: zodResponseFormat(Weather, "weather"),
    });
    expect(r.choices[0]!.message.parsed).toEqual({ city: "Oslo", temperature_c: -3.5, conditions: ["snow", "wind"] });
    const sent = await lastGenerate(fleet, ridOf(r.id));
    const schema = JSON.parse(sent!.jsonSchema as string) as { properties: Record<string, unknown>; required: string[] };
    expect(Object.keys(schema.properties)).toEqual(["city", "temperature_c", "conditions"]);
    expect(schema.required).toEqual(["city", "temperature_c", "conditions"]);
  });

  it("logprobs: true returns token, bytes, logprob and top alternatives, non-stream and stream", async () => {
    const answer = "Paris is lovely in spring.";
    const r = await client.chat.completions.create({ model: fleet.model, messages: [user("Say something about Paris.", answer)], logprobs: true, top_logprobs: 2 });
    const lp = r.choices[0]!.logprobs!.content!;
    expect(lp).toHaveLength(r.usage!.completion_tokens); // every output token, the EOS included (SGLang's output_token_logprobs)
    expect(lp.slice(0, -1).map((t) => t.token).join("")).toBe(answer);
    for (const t of lp) {
      expect(t.bytes).toEqual([...new TextEncoder().encode(t.token)]);
      expect(t.top_logprobs).toHaveLength(2);
      expect(t.top_logprobs[0]).toEqual({ token: t.token, bytes: t.bytes, logprob: t.logprob });
    }
    const sent = await lastGenerate(fleet, ridOf(r.id));
    expect(sent!.returnLogprob).toBe(true);

    // A bounded answer: this fleet's workers stream cumulative frames, where an unbounded logprob
    // stream is refused (src/proxy/stream-cost.ts).
    const stream = await client.chat.completions.create({ model: fleet.model, messages: [user("Say something about Paris (stream).", answer)], logprobs: true, stream: true, max_tokens: 256 });
    const streamed: string[] = [];
    for await (const chunk of stream) for (const ch of chunk.choices) for (const t of ch.logprobs?.content ?? []) streamed.push(t.token);
    expect(streamed.slice(0, -1).join("")).toBe(answer);
  });

  it("continuous_usage_stats puts running usage on every content chunk", async () => {
    const stream = await client.chat.completions.create({
      model: fleet.model,
      messages: [user("Count.", "one two three four")],
      stream: true,
      stream_options: { include_usage: true, continuous_usage_stats: true } as OpenAI.Chat.Completions.ChatCompletionStreamOptions,
    });
    const counts: number[] = [];
    for await (const chunk of stream) if (chunk.choices[0]?.delta.content) counts.push(chunk.usage!.completion_tokens);
    expect(counts.length).toBeGreaterThan(1);
    expect(counts).toEqual([...counts].sort((a, b) => a - b));
  });

  it("n = 2: two choices, non-stream and stream", async () => {
    const r = await client.chat.completions.create({ model: fleet.model, messages: [{ role: "user", content: "Two answers please." }], n: 2, max_tokens: 5 });
    expect(r.choices.map((c) => c.index)).toEqual([0, 1]);
    const stream = client.chat.completions.stream({ model: fleet.model, messages: [{ role: "user", content: "Two streamed answers please." }], n: 2, max_tokens: 5 });
    const final = await stream.finalChatCompletion();
    expect(final.choices.map((c) => c.index).sort()).toEqual([0, 1]);
    for (const c of final.choices) expect(c.message.content?.length).toBeGreaterThan(0);
  });

  it("routing is unchanged: a repeated agent conversation with tools keeps its cache (cached/prompt ≥ 0.9)", async () => {
    const call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lisbon"}}\n</tool_call>';
    const runConversation = async () => {
      const messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[] = [{ role: "system", content: SYSTEM }, user("Plan my Lisbon weekend.", call)];
      const seen: { worker: string; ratio: number }[] = [];
      const turn = async () => {
        const { data, response } = await client.chat.completions.create({ model: fleet.model, messages, tools: TOOLS }).withResponse();
        const u = data.usage!;
        seen.push({ worker: response.headers.get("x-kvedge-worker") ?? "?", ratio: (u.prompt_tokens_details?.cached_tokens ?? 0) / u.prompt_tokens });
        return data.choices[0]!.message;
      };
      const m1 = await turn();
      expect(m1.tool_calls).toHaveLength(1);
      messages.push({ role: "assistant", content: m1.content, tool_calls: m1.tool_calls });
      messages.push({ role: "tool", tool_call_id: m1.tool_calls![0]!.id, content: '{"forecast": "sunny", "high_c": 24}' });
      messages.push(user("Great, what should I pack?", "Light clothes and sunscreen."));
      const m2 = await turn();
      expect(m2.content).toBe("Light clothes and sunscreen.");
      return seen;
    };
    const first = await runConversation();
    const again = await runConversation();
    console.info(`agent conversation cached/prompt: first run ${first.map((x) => x.ratio.toFixed(3)).join(", ")}; repeat ${again.map((x) => x.ratio.toFixed(3)).join(", ")}`);
    // Tool-call ids are fresh per answer, but the Qwen templates render only name and arguments, so the
    // repeat's prompts are the same token sequences and land where they are cached.
    expect(again[0]!.worker).toBe(first[0]!.worker);
    expect(again[0]!.ratio).toBeGreaterThanOrEqual(0.9);
    expect(again[1]!.worker).toBe(first[1]!.worker);
    expect(again[1]!.ratio).toBeGreaterThanOrEqual(0.9);
  });
});

describe("openai SDK against a thinking fleet (Qwen3-VL-Thinking template, qwen3-thinking parser)", () => {
  let fleet: Fleet;
  let client: OpenAI;
  sdkFleet({ workers: 1, template: "qwen3vl-thinking" }, (f, c) => {
    fleet = f;
    client = c;
  });

  // The template pre-fills "<think>\n", so the output starts inside the thinking block.
  const THOUGHT = "The user asks for 6 times 7.\n</think>\n\nThe answer is 42.";

  it("non-stream: reasoning_content split out, reasoning_tokens counted", async () => {
    const r = await client.chat.completions.create({ model: fleet.model, messages: [user("What is 6*7?", THOUGHT)] });
    const m = r.choices[0]!.message as typeof r.choices[0]["message"] & { reasoning_content?: string | null };
    // reasoning_parser.py @002e9bfc detect_and_parse (force_reasoning): the text before </think> and
    // the rest, whitespace kept on both sides.
    expect(m.reasoning_content).toBe("The user asks for 6 times 7.\n");
    expect(m.content).toBe("\n\nThe answer is 42.");
    const u = r.usage as typeof r.usage & { reasoning_tokens?: number };
    expect(u!.reasoning_tokens).toBeGreaterThan(0);
    expect(u!.completion_tokens_details?.reasoning_tokens).toBe(u!.reasoning_tokens);
    expect((await lastGenerate(fleet, ridOf(r.id)))!.requireReasoning).toBe(true);
  });

  it("stream: reasoning_content deltas, then content deltas", async () => {
    const stream = await client.chat.completions.create({ model: fleet.model, messages: [user("What is 6*7? (stream)", THOUGHT)], stream: true });
    let reasoning = "";
    let content = "";
    let contentStarted = false;
    for await (const chunk of stream) {
      const d = chunk.choices[0]?.delta as { reasoning_content?: string | null; content?: string | null } | undefined;
      if (d?.reasoning_content) {
        expect(contentStarted).toBe(false);
        reasoning += d.reasoning_content;
      }
      if (d?.content) {
        contentStarted = true;
        content += d.content;
      }
    }
    expect(reasoning.trim()).toBe("The user asks for 6 times 7.");
    expect(content.trim()).toBe("The answer is 42.");
  });

  it("a thinking model's tool call after its reasoning", async () => {
    const answer = `I should look up the weather.\n</think>\n\n${PARALLEL}`;
    const r = await client.chat.completions.create({ model: fleet.model, messages: [user("Weather and restaurants?", answer)], tools: TOOLS });
    const m = r.choices[0]!.message as typeof r.choices[0]["message"] & { reasoning_content?: string | null };
    expect(m.reasoning_content).toBe("I should look up the weather.\n");
    expect(m.tool_calls).toMatchObject(PARALLEL_CALLS);
    expect(r.choices[0]!.finish_reason).toBe("tool_calls");
  });
});
