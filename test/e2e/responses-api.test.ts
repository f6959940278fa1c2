/**
 * `/v1/responses` end to end with the real `openai` SDK against the local fleet (simulated SGLang
 * workers, relays, the edge under Miniflare with its ResponseStore objects): create and stream with a
 * function tool and an image, a video (kvedge's input_video part), a three-turn `previous_response_id` conversation that stays on its
 * worker's KV, a five-turn one continued each time by a fresh edge isolate (the edge restarted) that
 * prepares only the new items from the stored prompt state, retrieve and delete, and another tenant's
 * id answered 404.
 */
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../scripts/local-fleet.ts";
import { sdkClient } from "../helpers/sdk-client.ts";
import { simOutputMarker } from "../../services/sglang-sim/scripted-output.ts";
import { makePng } from "../helpers/png.ts";
import { makeMediaDir, makeVideo } from "./helpers/media.ts";

const log = process.env.KVEDGE_E2E_LOGS ? (l: string) => console.log(l) : undefined;

const TOOLS: OpenAI.Responses.FunctionTool[] = [
  {
    type: "function",
    name: "get_weather",
    description: "Get weather information",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
    strict: false,
  },
];
const CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';
/** Long, fixed instructions so cache ratios are measured over many blocks. */
const INSTRUCTIONS = `You are a travel agent. ${Array.from({ length: 120 }, (_, i) => `Rule ${i}: be precise about cities and dates.`).join(" ")}`;
const PNG = `data:image/png;base64,${Buffer.from(makePng(64, 48, { seed: 7 })).toString("base64")}`;

describe("openai SDK: the Responses API", () => {
  let fleet: Fleet;
  let client: OpenAI;
  /** The same edge as seen from another client network (another tenant of the keyless endpoint). */
  let other: OpenAI;
  beforeAll(async () => {
    const dir = makeMediaDir();
    makeVideo(dir, "clip.mp4", { frames: 2 });
    // No sampled whole renders and parses (KVEDGE_TURN_CHECK_RATE, 1 % by default): they would count in the
    // work headers this file pins; the checks themselves are tested in test/unit/edge/responses-chain.test.ts.
    fleet = await startFleet({ workers: 2, mediaDir: dir, log, vars: { KVEDGE_TURN_CHECK_RATE: "0" } });
    client = sdkClient(fleet, { "cf-connecting-ip": "203.0.113.7" });
    other = sdkClient(fleet, { "cf-connecting-ip": "198.51.100.9" });
  });
  afterAll(async () => {
    await fleet?.stop();
  });

  it("create with a tool and an image: a function_call item, usage with cached_tokens; the tool result continues it", async () => {
    const r = await client.responses.create({
      model: fleet.model,
      instructions: INSTRUCTIONS,
      input: [{ role: "user", content: [{ type: "input_text", text: `What is the weather where this was taken? ${simOutputMarker(CALL)}` }, { type: "input_image", image_url: PNG, detail: "auto" }] }],
      tools: TOOLS,
    });
    expect(r.id).toMatch(/^resp_[0-9a-f]{32}$/);
    expect(r.status).toBe("completed");
    expect(r.output).toMatchObject([{ type: "function_call", name: "get_weather", arguments: '{"city": "Paris"}', status: "completed" }]);
    const call = r.output[0] as OpenAI.Responses.ResponseFunctionToolCall;
    expect(call.call_id).toMatch(/^call_/);
    expect(r.usage!.input_tokens).toBeGreaterThan(100);
    expect(r.usage!.input_tokens_details.cached_tokens).toBeGreaterThanOrEqual(0);
    expect(r.usage!.total_tokens).toBe(r.usage!.input_tokens + r.usage!.output_tokens);

    const next = await client.responses.create({
      model: fleet.model,
      instructions: INSTRUCTIONS,
      previous_response_id: r.id,
      input: [{ type: "function_call_output", call_id: call.call_id, output: `{"temp_c": 21} ${simOutputMarker("It is 21 °C in Paris.")}` }],
      tools: TOOLS,
    });
    expect(next.output_text).toBe("It is 21 °C in Paris.");
    expect(next.previous_response_id).toBe(r.id);
  });

  it("stream with a tool: the SDK accumulates the event sequence; sequence numbers run 0, 1, 2…", async () => {
    const stream = client.responses.stream({
      model: fleet.model,
      input: [{ role: "user", content: [{ type: "input_text", text: `Weather? ${simOutputMarker(`Let me check. ${CALL}`)}` }, { type: "input_image", image_url: PNG, detail: "auto" }] }],
      tools: TOOLS,
    });
    const types: string[] = [];
    const seqs: number[] = [];
    for await (const e of stream) {
      types.push(e.type);
      seqs.push(e.sequence_number);
    }
    const final = await stream.finalResponse();
    expect(seqs).toEqual(seqs.map((_, i) => i));
    expect(types.slice(0, 2)).toEqual(["response.created", "response.in_progress"]);
    expect(types.at(-1)).toBe("response.completed");
    expect(types).toContain("response.content_part.added");
    expect(types).toContain("response.output_text.delta");
    expect(types).toContain("response.function_call_arguments.done");
    expect(final.output.map((o) => o.type)).toEqual(["message", "function_call"]);
    expect((final.output[0] as OpenAI.Responses.ResponseOutputMessage).content).toMatchObject([{ type: "output_text", text: "Let me check.", annotations: [], logprobs: [] }]);
    expect(final.output[1]).toMatchObject({ name: "get_weather", arguments: '{"city": "Paris"}' });
    expect(final.usage!.input_tokens).toBeGreaterThan(0);

    // The stored copy is the streamed response.
    const stored = await client.responses.retrieve(final.id);
    // (the SDK adds `parsed` to the streamed copy's text parts).
    expect(final.output).toMatchObject(stored.output);
  });

  it("a video (input_video, a kvedge extension) is routed on its exact layout; a repeat is served from that worker's cache", async () => {
    const input = [{ role: "user", content: [{ type: "input_text", text: `What happens in this clip? ${simOutputMarker("A test pattern.")}` }, { type: "input_video", video_url: `${fleet.mediaUrl}/clip.mp4` }] }] as unknown as OpenAI.Responses.ResponseInput;
    const first = await client.responses.create({ model: fleet.model, input }).withResponse();
    expect(first.data.output_text).toBe("A test pattern.");
    expect(first.response.headers.get("x-kvedge-routing")).toBe("exact");
    const again = await client.responses.create({ model: fleet.model, input }).withResponse();
    expect(again.response.headers.get("x-kvedge-worker")).toBe(first.response.headers.get("x-kvedge-worker"));
    expect(again.data.usage!.input_tokens_details.cached_tokens / again.data.usage!.input_tokens).toBeGreaterThanOrEqual(0.9);
  });

  it("previous_response_id over 3 turns: later turns go to the same worker, ≥ 95% of the prompt cached", async () => {
    let previous: string | undefined;
    const workers: string[] = [];
    for (const [i, answer] of ["Paris in spring.", "Lyon in autumn.", "Nice in winter."].entries()) {
      const { data, response } = await client.responses
        .create({ model: fleet.model, instructions: INSTRUCTIONS, input: `Turn ${i}: where should I go? ${simOutputMarker(answer)}`, ...(previous ? { previous_response_id: previous } : {}) })
        .withResponse();
      expect(data.output_text).toBe(answer);
      workers.push(response.headers.get("x-kvedge-worker")!);
      if (i > 0) expect(data.usage!.input_tokens_details.cached_tokens / data.usage!.input_tokens, `turn ${i}`).toBeGreaterThanOrEqual(0.95);
      previous = data.id;
    }
    expect(new Set(workers).size).toBe(1);
  });

  it("previous_response_id over 5 turns, each continued by a fresh edge isolate: same worker, ≥ 95% cached, the edge's prompt work flat", async () => {
    // Long instructions, so that each turn's new text stays under 5 % of the prompt while the history grows.
    const instructions = `${INSTRUCTIONS} ${Array.from({ length: 240 }, (_, i) => `Extra rule ${i}: keep the itinerary in order.`).join(" ")}`;
    const say = (i: number) => `Stop ${i}: ${Array.from({ length: 12 }, (_, j) => `town${(i * 37 + j * 11) % 97}`).join(" ")}.`;
    let previous: string | undefined;
    const turns: { worker: string; inputTokens: number; cached: number; rendered: number; encoded: number; reused: number; parsed: number }[] = [];
    for (let i = 0; i < 5; i++) {
      {
        // A new isolate: nothing of the earlier turns in its turn chain or prefix cache; the index restores its blocks from the relays.
        await fleet.restartEdge();
        await fleet.waitForSync();
      }
      const { data, response } = await client.responses
        .create({ model: fleet.model, instructions, input: `Turn ${i}: and after that? ${simOutputMarker(say(i))}`, ...(previous ? { previous_response_id: previous } : {}) })
        .withResponse();
      expect(data.output_text).toBe(say(i));
      const header = (name: string) => Number(response.headers.get(`x-kvedge-prompt-${name}`));
      turns.push({ worker: response.headers.get("x-kvedge-worker")!, inputTokens: data.usage!.input_tokens, cached: data.usage!.input_tokens_details.cached_tokens, rendered: header("rendered-chars"), encoded: header("encoded-tokens"), reused: header("reused-messages"), parsed: Number(response.headers.get("x-kvedge-parsed-chars")) });
      previous = data.id;
    }
    log?.(JSON.stringify(turns));
    expect(new Set(turns.map((t) => t.worker)).size).toBe(1);
    const later = turns.slice(1);
    for (const [i, t] of later.entries()) {
      expect(t.cached / t.inputTokens, `turn ${i + 1}`).toBeGreaterThanOrEqual(0.95);
      // The stored prefix was used: all messages before the previous turn's query came from the store, not from rendering.
      expect(t.reused, `turn ${i + 1}`).toBeGreaterThanOrEqual(i + 1);
      // Only the previous turn and the new input are tokenized, not the instructions and history.
      expect(t.encoded, `turn ${i + 1}`).toBeLessThan(0.2 * t.inputTokens);
      // Nor parsed: the stored messages come validated with the seed (the first turn parses its whole body, instructions included).
      expect(t.parsed, `turn ${i + 1}`).toBeLessThan(0.2 * turns[0]!.parsed);
    }
    // The prompt grows turn by turn; the edge's work per turn does not.
    expect(turns[4]!.inputTokens).toBeGreaterThan(turns[1]!.inputTokens + 100);
    const encoded = turns.slice(2).map((t) => t.encoded);
    const rendered = turns.slice(2).map((t) => t.rendered);
    expect(Math.max(...encoded) - Math.min(...encoded)).toBeLessThanOrEqual(0.15 * Math.max(...encoded));
    expect(Math.max(...rendered) - Math.min(...rendered)).toBeLessThanOrEqual(0.15 * Math.max(...rendered));
    // The first turn renders and encodes its whole prompt (no stored state to start from).
    expect(turns[0]!.encoded).toBe(turns[0]!.inputTokens);
  });

  it("retrieve and delete; another tenant's id, an unknown id and a deleted id are 404 in OpenAI's shape", async () => {
    const r = await client.responses.create({ model: fleet.model, input: `Keep this. ${simOutputMarker("Kept.")}` });
    expect((await client.responses.retrieve(r.id)).output_text).toBe("Kept.");
    for (const attempt of [() => other.responses.retrieve(r.id), () => other.responses.delete(r.id), () => other.responses.create({ model: fleet.model, input: "Continue.", previous_response_id: r.id })]) {
      const err = await attempt().then(() => null, (e: unknown) => e);
      expect(err).toBeInstanceOf(OpenAI.NotFoundError);
      expect((err as InstanceType<typeof OpenAI.NotFoundError>).error).toMatchObject({ type: "not_found_error", message: expect.stringContaining("not found") });
    }
    await client.responses.delete(r.id);
    await expect(client.responses.retrieve(r.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    await expect(client.responses.retrieve("resp_00000000000000000000000000000000")).rejects.toBeInstanceOf(OpenAI.NotFoundError);
  });

  it("store: false keeps nothing; unsupported fields are a 400 naming them", async () => {
    const r = await client.responses.create({ model: fleet.model, input: `Forget this. ${simOutputMarker("Gone.")}`, store: false });
    expect((r as unknown as { store: boolean }).store).toBe(false);
    await expect(client.responses.retrieve(r.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    const err = await client.responses.create({ model: fleet.model, input: "x", tools: [{ type: "web_search" }] }).then(() => null, (e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((err as InstanceType<typeof OpenAI.BadRequestError>).param).toBe("tools[0].type");
  });
});
