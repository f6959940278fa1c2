/**
 * The simulated SGLang worker against upstream: it is sent the whole-request golden cases
 * (test/fixtures/whole-request, ids built by transformers' tokenizer and Qwen-VL processors with
 * SGLang's padding) as kvedge sends them to /generate (the rendered prompt, the media by URL, the
 * mm_hashes) and must count exactly the golden ids and publish KV blocks holding exactly the golden
 * ids, pad values included. These expectations come from the golden set, not from src/layout (which
 * the simulator runs itself), so this is an exactness check of the simulator's media expansion.
 * Videos are probed by the simulator's decoder: native ffprobe when installed, else the wasm build.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { publishedBlocks } from "../../helpers/published-blocks.ts";
import { engineBlockHashes } from "../../../services/sglang-sim/engine-block-hash.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { startSimulatedWorker, type SimulatedWorker } from "../../../services/sglang-sim/worker.ts";
import { golden, mediaFile, VIDEO_URL_PREFIX, type GoldenCase } from "../../fixtures/whole-request/harness.ts";

const PAGE = 16;

let server: Server;
let base = "";

beforeAll(async () => {
  await initHashing();
  server = createServer((req, res) => {
    try {
      const b = mediaFile(decodeURIComponent((req.url ?? "/").slice(1)));
      res.writeHead(200, { "content-type": "application/octet-stream", "content-length": b.length }).end(b);
    } catch {
      res.writeHead(404).end();
    }
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});

/** The /generate body kvedge sends for a golden case: prompt text, media URLs per kind in prompt order, mm_hashes. */
function generateBody(c: GoldenCase): Record<string, unknown> {
  const images: string[] = [];
  const videos: string[] = [];
  for (const m of c.request.messages as { content: unknown }[]) {
    if (!Array.isArray(m.content)) continue;
    for (const p of m.content as { type: string; image_url?: { url: string }; video_url?: { url: string } }[]) {
      if (p.type === "image_url") images.push(`${base}/${golden.media.images[p.image_url!.url.slice(7)]!.file}`);
      if (p.type === "video_url") videos.push(`${base}/${golden.media.videos[p.video_url!.url.slice(VIDEO_URL_PREFIX.length).replace(/\.avi$/, "")]!.file}`);
    }
  }
  return {
    text: c.rendered,
    ...(images.length ? { image_data: images } : {}),
    ...(videos.length ? { video_data: videos } : {}),
    ...(c.mm_hashes?.length ? { mm_hashes: c.mm_hashes } : {}),
    sampling_params: { max_new_tokens: 1 },
  };
}

const SIMS = [
  { family: "qwen3_vl", template: "qwen3vl-instruct", model: "Qwen/Qwen3-VL-8B-Instruct" },
  { family: "qwen3_vl", template: "qwen3vl-thinking", model: "Qwen/Qwen3-VL-8B-Thinking" },
  { family: "qwen2_5_vl", template: "qwen2vl", model: "Qwen/Qwen2.5-VL-7B-Instruct" },
  { family: "qwen2_vl", template: "qwen2vl", model: "Qwen/Qwen2-VL-7B-Instruct" },
] as const;

for (const sim of SIMS) {
  describe(`simulated ${sim.family} worker (${sim.template}) against the golden ids`, () => {
    let w: SimulatedWorker;
    beforeAll(async () => {
      w = await startSimulatedWorker({ timingPreset: "instant", pageSize: PAGE, family: sim.family, template: sim.template });
    });
    afterAll(() => w.close());

    const cases = golden.cases.filter((c) => c.model === sim.model && c.expect === "exact");
    const withVideo = (c: GoldenCase) => (c.items ?? []).some((i) => i.modality === "video");

    it(`counts and publishes exactly the golden ids (${cases.length} cases, ${cases.filter(withVideo).length} with video)`, async () => {
      const bad: string[] = [];
      let ran = 0;
      for (const c of cases) {
        ran++;
        const r = await fetch(`${w.url}/generate`, { method: "POST", body: JSON.stringify(generateBody(c)) });
        const j = (await r.json()) as { meta_info?: { prompt_tokens: number }; error?: { message: string } };
        if (r.status !== 200) {
          bad.push(`${c.id}: HTTP ${r.status} ${j.error?.message}`);
          continue;
        }
        const ids = c.input_ids!;
        if (j.meta_info!.prompt_tokens !== ids.length) bad.push(`${c.id}: ${j.meta_info!.prompt_tokens} prompt tokens, golden ${ids.length}`);
        const pages = Math.floor(ids.length / PAGE);
        const { hashes } = engineBlockHashes(ids.slice(0, pages * PAGE), PAGE);
        const blocks = await publishedBlocks(w.replayEndpoint!);
        hashes.forEach((h, k) => {
          const got = blocks.get(h);
          if (!got || got.some((t, i) => t !== ids[k * PAGE + i])) bad.push(`${c.id}: page ${k} not published with the golden ids`);
        });
      }
      expect(ran).toBeGreaterThan(0);
      expect(bad).toEqual([]);
    }, 120_000);
  });
}
