import { describe, expect, it } from "vitest";
import { parseChatRequest } from "../../../src/api/validate.ts";
import { DEFAULT_LIMITS } from "../../../src/api/limits.ts";
import { bodyOfChunks, generateBodyParts } from "../../../src/proxy/generate-body.ts";
import { buildGenerateBody } from "../../../src/proxy/generate-request.ts";

const chat = (stream: boolean) =>
  parseChatRequest(JSON.stringify({ model: "qwen", messages: [{ role: "user", content: "hi" }], stream }), DEFAULT_LIMITS);

/** The body as the worker receives it: the wire bytes parsed back. */
async function wire(stream: boolean, streamInterval: number | null | undefined): Promise<{ sampling_params: Record<string, unknown>; stream: boolean }> {
  const body = buildGenerateBody(chat(stream), { text: "<|im_start|>user\nhi", rid: "r1", ...(streamInterval !== undefined ? { streamInterval } : {}) });
  return JSON.parse(await bodyOfChunks(generateBodyParts(body)).text()) as { sampling_params: Record<string, unknown>; stream: boolean };
}

describe("/generate stream_interval (routing.streamInterval)", () => {
  it("a streamed request carries the configured tokens per frame", async () => {
    const body = await wire(true, 4);
    expect(body.stream).toBe(true);
    expect(body.sampling_params.stream_interval).toBe(4);
  });

  it("is never sent unless configured: the worker's own --stream-interval applies", async () => {
    for (const unset of [undefined, null]) {
      const body = await wire(true, unset);
      expect(body.stream).toBe(true);
      expect(body.sampling_params).not.toHaveProperty("stream_interval");
    }
  });

  it("an unstreamed request never carries it", async () => {
    const body = await wire(false, 8);
    expect(body.stream).toBe(false);
    expect(body.sampling_params).not.toHaveProperty("stream_interval");
  });
});
