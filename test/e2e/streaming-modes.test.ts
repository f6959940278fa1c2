/**
 * A worker run with `--incremental-streaming-output` sends stream frames that carry only the new
 * text (SGLang's default sends all of it so far, which costs the edge work quadratic in the answer's
 * length). The relay reads the mode from /server_info and says it in its hello; the edge translates
 * that worker's frames as deltas. Real local fleet: a simulated worker in incremental mode, relay,
 * the edge under Miniflare. The same prompt streamed and not must give the same answer (the simulator's output
 * is seeded by the prompt).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../scripts/local-fleet.ts";

let fleet: Fleet;

beforeAll(async () => {
  fleet = await startFleet({ workers: 1, workerArgs: [["--incremental-streaming-output"]], log: process.env.KVEDGE_E2E_LOGS ? (l) => console.log(l) : undefined });
});
afterAll(async () => {
  await fleet?.stop();
});

async function chat(stream: boolean, content: string): Promise<string> {
  const body = JSON.stringify({ model: fleet.model, messages: [{ role: "user", content }], max_tokens: 400, ignore_eos: true, stream });
  const r = await fetch(`${fleet.edgeUrl}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body });
  expect(r.status).toBe(200);
  if (!stream) return ((await r.json()) as { choices: { message: { content: string } }[] }).choices[0]!.message.content;
  let text = "";
  for (const frame of (await r.text()).split("\n\n")) {
    if (!frame.startsWith("data: ") || frame === "data: [DONE]") continue;
    const chunk = JSON.parse(frame.slice(6)) as { choices: { delta: { content?: string | null } }[] };
    text += chunk.choices[0]?.delta.content ?? "";
  }
  return text;
}

describe("incremental streaming output", () => {
  it("the index knows the worker's mode from its relay's hello", async () => {
    const { workers } = (await fleet.admin(`/admin/workers?model=${encodeURIComponent(fleet.model)}`)) as { workers: { workerId: string; incrementalStreaming: boolean }[] };
    expect(workers).toMatchObject([{ workerId: "w1", incrementalStreaming: true }]);
  });

  it("a 400-token answer streamed through the edge is the same text as the answer in one piece", async () => {
    const prompt = "Write a long story about a relay that forwards KV events to a routing index.";
    const whole = await chat(false, prompt);
    expect(whole.length).toBeGreaterThan(400);
    expect(await chat(true, prompt)).toBe(whole);
  });
});
