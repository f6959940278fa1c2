/**
 * Encoder disaggregation in the simulator (services/sglang-sim/encoder.ts): an `--encoder-only`
 * server caches embeddings by the item's own content hash and counts hits; a `--language-only`
 * server posts each request's media to its `--encoder-urls` (no mm_hashes go there). Caller
 * mm_hashes key the language side's radix cache only with `--encoder-transfer-backend
 * zmq_to_tokenizer` (sgl-project/sglang managers/tokenizer_manager.py @001067ff); with
 * `zmq_to_scheduler` the pad values come from the embeddings.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startSimulatedWorker, type SimulatedWorker } from "../../../services/sglang-sim/worker.ts";
import { ffmpegToFile } from "../../helpers/wasm-media.ts";

let dir: string;
let image: string;
let encoder: SimulatedWorker;
let tokenizerSide: SimulatedWorker;
let schedulerSide: SimulatedWorker;

const prompt = "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Describe the picture in detail.<|im_end|>\n<|im_start|>assistant\n";

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "sim-epd-"));
  image = `data:image/png;base64,${(await ffmpegToFile(["-f", "lavfi", "-i", "testsrc=size=448x448:rate=1", "-frames:v", "1"], join(dir, "a.png"))).toString("base64")}`;
  encoder = await startSimulatedWorker({ encoderOnly: true, enablePrefixMmCache: true });
  [tokenizerSide, schedulerSide] = await Promise.all([
    startSimulatedWorker({ languageOnly: true, encoderUrls: [encoder.url], encoderTransferBackend: "zmq_to_tokenizer" }),
    startSimulatedWorker({ languageOnly: true, encoderUrls: [encoder.url] }),
  ]);
});
afterAll(async () => {
  await Promise.all([encoder?.close(), tokenizerSide?.close(), schedulerSide?.close()]);
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const encoderStats = async () => (await (await fetch(`${encoder.url}/sim/encoder`)).json()) as { hits: number; misses: number };

async function generate(w: SimulatedWorker, mmHash: string) {
  const r = await fetch(`${w.url}/generate`, { method: "POST", body: JSON.stringify({ text: prompt, image_data: [image], mm_hashes: [mmHash], sampling_params: { max_new_tokens: 2 } }) });
  expect(r.status).toBe(200);
  return ((await r.json()) as { meta_info: { prompt_tokens: number; cached_tokens: number } }).meta_info;
}

describe("an encoder-only server", () => {
  it("says its role in /server_info, publishes no KV events and serves no generation", async () => {
    const info = (await (await fetch(`${encoder.url}/server_info`)).json()) as Record<string, unknown>;
    expect(info).toMatchObject({ encoder_only: true, enable_prefix_mm_cache: true, kv_events: null });
    expect((await fetch(`${encoder.url}/generate`, { method: "POST", body: "{}" })).status).toBe(404);
    expect((await (await fetch(`${tokenizerSide.url}/server_info`)).json()) as Record<string, unknown>).toMatchObject({
      language_only: true,
      encoder_urls: [encoder.url],
      encoder_transfer_backend: "zmq_to_tokenizer",
    });
  });

  it("refuses an /encode body without items", async () => {
    const r = await fetch(`${encoder.url}/encode`, { method: "POST", body: JSON.stringify({ modality: "IMAGE", mm_items: [] }) });
    expect(r.status).toBe(400);
  });
});

describe("a language-only server and its encoder", () => {
  it("zmq_to_tokenizer: the repeat hits the encoder's cache and the prefix cache keyed by the caller's mm_hashes", async () => {
    const before = await encoderStats();
    const first = await generate(tokenizerSide, "aa01");
    const mid = await encoderStats();
    expect(mid.misses - before.misses).toBe(1);
    const again = await generate(tokenizerSide, "aa01");
    expect((await encoderStats()).hits - mid.hits).toBe(1);
    expect(again.cached_tokens / again.prompt_tokens).toBeGreaterThanOrEqual(0.95);
    expect(first.cached_tokens).toBeLessThan(first.prompt_tokens / 2);
    // Another caller hash for the same picture: the encoder still hits (it never sees the hash), the prefix cache misses the media.
    const other = await generate(tokenizerSide, "bb02");
    expect(other.cached_tokens / other.prompt_tokens).toBeLessThan(0.5);
  });

  it("zmq_to_scheduler: caller mm_hashes are not applied; pad values follow the embedding, so another caller hash still hits", async () => {
    await generate(schedulerSide, "cc03");
    const other = await generate(schedulerSide, "dd04");
    expect(other.cached_tokens / other.prompt_tokens).toBeGreaterThanOrEqual(0.95);
  });
});
