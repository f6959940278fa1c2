/**
 * Behaviours from the Qwen video routing unit tests of ai-dynamo/dynamo
 * lib/llm/src/preprocessor/mm_routing/qwen3.rs (PR #15014), expressed on
 * kvedge's pipeline, which reproduces SGLang's own preprocess from the decoder's frame count and fps.
 */
import fc from "fast-check";
import { beforeAll, describe, expect, it } from "vitest";
import {
  DEFAULT_GEOMETRY,
  PyValueError,
  QWEN_VISION_TOKEN_IDS,
  SGLANG_DEFAULTS,
  hfQwen3VideoSmartResize,
  layoutImageItem,
  layoutTokenCount,
  layoutVideoItem,
  qwen3GroupTimestamps,
  renderLayout,
  sglangPreprocessVideo,
  timestampText,
  type QwenFamily,
  type WorkerContract,
} from "../../../src/layout/index.ts";
import { getQwenTokenizer } from "../../../src/prompt/tokenizer/index.ts";
import { fixtureContract } from "../../fixtures/models/load.ts";

const encode = (t: string): number[] => getQwenTokenizer("qwen3_vl").encode(t, "");
let qwen3: WorkerContract;
let qwen25: WorkerContract;

beforeAll(() => {
  qwen3 = fixtureContract("qwen3_vl");
  qwen25 = fixtureContract("qwen2_5_vl");
});

const probe = (totalFrames: number, avgFps: number, height: number, width: number) => ({ totalFrames, avgFps, height, width });

describe("short and single-frame clips", () => {
  it("2 or 3 frames sample 2 frames and keep exact routing", () => {
    for (const n of [2, 3]) {
      const r = layoutVideoItem(qwen3, probe(n, 30, 240, 320));
      expect(r.ok).toBe(true);
      if (!r.ok) continue;
      expect(r.geometry.nframes).toBe(2);
      expect(r.geometry.frameIndices).toEqual([0, n - 1]);
      expect(r.geometry.numGroups).toBe(1);
    }
  });

  it("1 (or 0) frames are rejected by name", () => {
    for (const n of [0, 1]) {
      const r = layoutVideoItem(qwen3, probe(n, 30, 240, 320));
      expect(r).toMatchObject({ ok: false, reason: "single_frame_video" });
    }
    // and the worker itself raises ValueError there
    expect(() => sglangPreprocessVideo({ totalFrames: 1, videoFps: 30, height: 240, width: 320 })).toThrow(PyValueError);
  });

  it("fps 0 is unprobeable, not a crash", () => {
    expect(layoutVideoItem(qwen3, probe(30, 0, 240, 320))).toMatchObject({ ok: false, reason: "unprobeable_video" });
  });
});

describe("SGLang frame sampling and pre-resize", () => {
  it("32 frames @3.1 fps, 320x240 -> 20 frames, 280x392, Qwen3 grid (10,18,24)", () => {
    const r = layoutVideoItem(qwen3, probe(32, 3.1, 240, 320));
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.geometry.nframes).toBe(20);
    expect(r.geometry.sglangResizedHw).toEqual([280, 392]);
    expect(r.geometry.gridThw).toEqual([10, 18, 24]);
  });

  it("46 frames over 17 s -> 34 frames at numpy float-linspace indices", () => {
    const pre = sglangPreprocessVideo({ totalFrames: 46, videoFps: (45 * 30) / 510, height: 240, width: 320 });
    expect(pre.nframes).toBe(34);
    expect(pre.frameIndices).toEqual([
      0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, 16, 17, 19, 20, 21, 23, 24, 25, 27, 28, 29, 31, 32, 34, 35, 36, 38, 39, 40, 42, 43, 45,
    ]);
  });

  it("long video: the total pixel budget shrinks frames (400 frames @2 fps 1080p -> 504x896)", () => {
    const pre = sglangPreprocessVideo({ totalFrames: 400, videoFps: 2, height: 1080, width: 1920 });
    expect(pre.nframes).toBe(400);
    expect(pre.maxPixels).toBe(451584); // 90316800 / 400 * 2
    expect(pre.resizedHw).toEqual([504, 896]);
  });

  it("a 768-frame 4K clip is capped at 768 frames and 235200 pixels per frame", () => {
    const pre = sglangPreprocessVideo({ totalFrames: 36000, videoFps: 60, height: 2160, width: 3840 });
    expect(pre.nframes).toBe(768);
    expect(pre.maxPixels).toBe(235200);
    expect(pre.resizedHw[0] * pre.resizedHw[1]).toBeLessThanOrEqual(235200);
  });
});

describe("HF Qwen3-VL video grid (both resize modes)", () => {
  const grid = (frames: number, w: number, h: number, mode: "ceil" | "half_even"): number[] => {
    const [rh, rw] = hfQwen3VideoSmartResize(frames, h, w, {
      temporalFactor: 2, factor: 32, minPixels: 4096, maxPixels: 25165824, smallSide: "scale", temporalRounding: mode,
    });
    return [Math.ceil(frames / 2), rh / 16, rw / 16];
  };
  const table: [number, number, number, number[]][] = [
    [4, 426, 240, [2, 16, 26]],
    [30, 1280, 720, [15, 42, 76]],
    [5, 641, 359, [3, 22, 40]],
    [2, 32, 32, [1, 4, 4]],
    [31, 1920, 1080, [16, 42, 74]],
    [32, 1920, 1080, [16, 40, 72]],
    [3, 224, 224, [2, 14, 14]],
  ];
  it("matches the transformers table in both modes", () => {
    for (const [f, w, h, want] of table) {
      expect(grid(f, w, h, "ceil"), `${f}x${w}x${h}`).toEqual(want);
      expect(grid(f, w, h, "half_even"), `${f}x${w}x${h}`).toEqual(want);
    }
  });
  it("odd frame counts differ between legacy ceil and ties-to-even (5x3760x1120)", () => {
    expect(grid(5, 3760, 1120, "ceil")).toEqual([3, 76, 256]);
    expect(grid(5, 3760, 1120, "half_even")).toEqual([3, 70, 236]);
  });
  it("a single frame raises (golden: t:1 must be larger than temporal_factor:2)", () => {
    expect(() => grid(1, 224, 224, "ceil")).toThrow(PyValueError);
  });
  it("a side below 32 is unpredictable unless the contract pins the transformers branch", () => {
    // 90 frames of 20x3000 -> SGLang 28x3892; transformers raises or scales depending on version.
    expect(layoutVideoItem(qwen3, probe(90, 30, 20, 3000))).toMatchObject({ ok: false, reason: "unpredictable_geometry" });
    const scale = fixtureContract("qwen3_vl", { version: "0.5.19", flags: { qwen3VideoSmallSide: "scale" } });
    const r = layoutVideoItem(scale, probe(90, 30, 20, 3000));
    expect(r.ok && r.geometry.gridThw).toEqual([3, 2, 278]);
    const raise = fixtureContract("qwen3_vl", { version: "0.5.19", flags: { qwen3VideoSmallSide: "raise" } });
    expect(layoutVideoItem(raise, probe(90, 30, 20, 3000))).toMatchObject({ ok: false, reason: "worker_would_reject" });
  });
});

describe("Qwen3-VL timestamps and timestamped layout", () => {
  it("ties go to even like the worker (indices 0,15 @30 fps -> 0.25 -> <0.2 seconds>)", () => {
    const ts = qwen3GroupTimestamps([0, 15], 30, 2);
    expect(ts).toEqual([0.25]);
    expect(timestampText(ts[0]!)).toBe("<0.2 seconds>");
  });

  it("temporal padding repeats the last sampled frame (5 frames 0..4 @1 fps -> 0.5, 2.5, 4.0)", () => {
    expect(qwen3GroupTimestamps([0, 1, 2, 3, 4], 1, 2)).toEqual([0.5, 2.5, 4]);
  });

  it("timestamp text tokenizes standalone to the checkpoint ids", () => {
    expect(encode("<0.5 seconds>")).toEqual([27, 15, 13, 20, 6486, 29]);
  });

  it("keeps or drops the template's outer vision pair per the advertised placeholder target", () => {
    const bare = layoutVideoItem(qwen3, probe(300, 30, 1080, 1920));
    const old = fixtureContract("qwen3_vl", { version: "0.5.19", transformersVersion: "4.57.1", flags: {} });
    expect(old.placeholderTarget).toBe("vision_wrapped_video_token");
    const wrapped = layoutVideoItem(old, probe(300, 30, 1080, 1920));
    if (!bare.ok || !wrapped.ok) throw new Error("layout failed");
    const pad = { padValue: 1_000_042 };
    const a = renderLayout(bare.pieces, QWEN_VISION_TOKEN_IDS, encode, pad);
    const b = renderLayout(wrapped.pieces, QWEN_VISION_TOKEN_IDS, encode, pad);
    expect(a.length).toBe(b.length + 2);
    expect(a[0]).toBe(QWEN_VISION_TOKEN_IDS.visionStart);
    expect(a[a.length - 1]).toBe(QWEN_VISION_TOKEN_IDS.visionEnd);
    expect(Array.from(a.subarray(1, a.length - 1))).toEqual(Array.from(b));
    // first group: "<0.2 seconds>" vs pads×576 ve
    const ts = encode("<0.2 seconds>");
    expect(Array.from(b.subarray(0, ts.length))).toEqual(ts);
    expect(b[ts.length]).toBe(QWEN_VISION_TOKEN_IDS.visionStart);
    expect(b[ts.length + 1]).toBe(1_000_042);
    expect(b[ts.length + 576]).toBe(1_000_042);
    expect(b[ts.length + 577]).toBe(QWEN_VISION_TOKEN_IDS.visionEnd);
    // only pad tokens carry the pad value, and there are exactly grid-many of them
    expect(a.filter((t) => t === 1_000_042).length).toBe(5760);
  });
});

describe("property: layout token count equals the grid formula", () => {
  const fams: QwenFamily[] = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"];
  it("for random videos", () => {
    let skipped = 0;
    const contracts = Object.fromEntries(fams.map((f) => [f, fixtureContract(f, { version: "0.5.19", flags: { qwen3VideoSmallSide: "scale" } })]));
    fc.assert(
      fc.property(
        fc.constantFrom(...fams),
        fc.integer({ min: 2, max: 40_000 }),
        fc.constantFrom(24, 25, 29.97, 30, 60, 2, 12.5),
        fc.integer({ min: 16, max: 4320 }),
        fc.integer({ min: 16, max: 7680 }),
        (fam, frames, fps, h, w) => {
          fc.pre(Math.max(h, w) / Math.min(h, w) <= 150);
          const c = contracts[fam]!;
          const r = layoutVideoItem(c, probe(frames, fps, h, w));
          if (!r.ok) {
            skipped++;
            return;
          }
          const g = r.geometry;
          const m = c.hf.mergeSize;
          const [t, gh, gw] = g.gridThw;
          expect(Number.isInteger(gh) && Number.isInteger(gw)).toBe(true);
          expect(t).toBe(g.nframes / c.hf.temporalPatchSize);
          const pads = r.pieces.reduce((s, p) => s + (p.kind === "pad" ? p.count : 0), 0);
          expect(pads).toBe((t * gh * gw) / (m * m));
          const text = g.timestampStrings?.reduce((s, x) => s + encode(x).length, 0) ?? 0;
          const vision = fam === "qwen3_vl" ? 2 * t + 2 : 2;
          expect(layoutTokenCount(r.pieces, encode)).toBe(pads + text + vision);
        },
      ),
      { numRuns: 400 },
    );
    expect(skipped).toBeLessThan(40); // the property must actually be exercised
  });

  it("for random images", () => {
    fc.assert(
      fc.property(fc.constantFrom(...fams), fc.integer({ min: 1, max: 8000 }), fc.integer({ min: 1, max: 8000 }), (fam, h, w) => {
        fc.pre(Math.max(h, w) / Math.min(h, w) <= 200);
        const r = layoutImageItem(fixtureContract(fam), { height: h, width: w });
        expect(r.ok).toBe(true);
        if (!r.ok) return;
        const [t, gh, gw] = r.geometry.gridThw;
        const m = DEFAULT_GEOMETRY[fam].mergeSize;
        expect(t).toBe(1);
        expect(layoutTokenCount(r.pieces, encode)).toBe((gh * gw) / (m * m) + 2);
        const [rh, rw] = r.geometry.hfResizedHw;
        expect(rh * rw).toBeLessThanOrEqual(DEFAULT_GEOMETRY[fam].imageMaxPixels);
      }),
      { numRuns: 300 },
    );
  });
});

it("SGLang constants match the published defaults", () => {
  expect(SGLANG_DEFAULTS).toMatchObject({ videoTotalPixels: 90316800, videoMinPixels: 100352, videoMaxPixels: 602112, minPixels: 3136, maxPixels: 12845056 });
  expect(qwen25.layoutVariant).toBe("repeated_pad");
});
