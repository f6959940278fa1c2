/**
 * The video metadata of the whole-request golden set (frame count and fps as the generator's
 * OpenCV decoder read them, and the frame size) is what kvedge's decode service reports for the
 * same bytes (torchcodec exact-mode semantics: packet count, count / pts span), with the wasm
 * decoder and, where installed, native ffprobe. The golden test feeds these recorded values to the
 * edge as the decode service's answer; this checks that the service would really give them.
 */
import { afterAll, describe, expect, it } from "vitest";
import { fileURLToPath } from "node:url";
import { NativeProber, nativeAvailable, WasmProber, type Prober } from "../../../services/decode/probers.ts";
import { golden } from "../../fixtures/whole-request/harness.ts";

const MEDIA = fileURLToPath(new URL("../../fixtures/whole-request/media/", import.meta.url));
const probers: Prober[] = [new WasmProber({ threads: 2 })];
if (await nativeAvailable()) probers.push(new NativeProber());

afterAll(async () => {
  for (const p of probers) await p.close();
});

describe("golden video probes equal the decode service's", () => {
  for (const prober of probers) {
    it(`${prober.kind}: every video's frame count, fps and size`, async () => {
      const videos = Object.entries(golden.media.videos);
      expect(videos.length).toBeGreaterThanOrEqual(15);
      const got = await Promise.all(
        videos.map(async ([name, v]) => {
          const scan = await prober.probe(MEDIA + v.file);
          return [name, { totalFrames: scan.meta.numFrames, avgFps: scan.meta.averageFps, width: scan.stream.width, height: scan.stream.height }] as const;
        }),
      );
      expect(Object.fromEntries(got)).toEqual(Object.fromEntries(videos.map(([name, v]) => [name, v.probe])));
    }, 300_000);
  }
});
