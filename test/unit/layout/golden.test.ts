/**
 * Runs EVERY case of EVERY *.json in the golden directory (env GOLDEN_DIR, default
 * test/fixtures/golden; a relative GOLDEN_DIR is taken from the repo root), dispatching on `function`.
 * Unknown functions fail.
 * One test per (file, function) with a compact summary of failing case ids.
 */
import { readdirSync, readFileSync } from "node:fs";
import { dirname, isAbsolute, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { isDeepStrictEqual } from "node:util";
import { beforeAll, describe, expect, it } from "vitest";
import {
  DEFAULT_GEOMETRY,
  SGLANG_DEFAULTS,
  formatFixed1,
  frameIndices,
  hfImageSmartResize,
  hfQwen3VideoSmartResize,
  imageLayout,
  imagePipeline,
  isPyError,
  parsePythonHexInt,
  padValueFromHash,
  qwen3GroupTimestamps,
  roundByFactor,
  sglangSmartResize,
  smartNframes,
  timestampText,
  videoFramePixelBudget,
  videoLayout,
  videoPipeline,
  type LayoutPiece,
  type QwenFamily,
  type SmallSidePolicy,
  type VideoPipelineParams,
} from "../../../src/layout/index.ts";
import { engineBlockHashes } from "../../../services/sglang-sim/engine-block-hash.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { bytesToHex } from "../../../src/util/hex.ts";

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
const envDir = process.env["GOLDEN_DIR"];
const goldenDir = envDir ? (isAbsolute(envDir) ? envDir : resolve(repoRoot, envDir)) : resolve(repoRoot, "test/fixtures/golden");

interface GoldenCase {
  id: string;
  function: string;
  inputs: Record<string, any>;
  expected?: any;
  expected_error?: { type: string; message: string };
}

type Runner = (inputs: Record<string, any>) => unknown;

let encodeQwen3: ((text: string) => number[]) | null = null;
let tokenizerLoadError: unknown = null;

/** Golden layout form: ["special", "<|vision_start|>"], ["text", s], ["image_pad"|"video_pad", n]. */
function goldenLayout(pieces: readonly LayoutPiece[]): unknown[] {
  return pieces.map((p) => {
    switch (p.kind) {
      case "vision_start":
        return ["special", "<|vision_start|>"];
      case "vision_end":
        return ["special", "<|vision_end|>"];
      case "text":
        return ["text", p.text];
      case "pad":
        return [`${p.modality}_pad`, p.count];
    }
  });
}

function family(model: string): QwenFamily {
  if (model !== "qwen2_vl" && model !== "qwen2_5_vl" && model !== "qwen3_vl") throw new Error(`unknown model ${model}`);
  return model;
}

function videoParams(model: string, videoConfig: any, variant: VideoPipelineParams["variant"], smallSide: SmallSidePolicy): VideoPipelineParams {
  const f = family(model);
  return {
    family: f,
    geometry: DEFAULT_GEOMETRY[f],
    sglang: SGLANG_DEFAULTS,
    videoConfig: videoConfig ?? {},
    variant,
    temporalRounding: "half_even",
    smallSide,
  };
}

function runVideo(inputs: Record<string, any>, variant: VideoPipelineParams["variant"]): ReturnType<typeof videoPipeline> {
  const input = { totalFrames: inputs["total_frames"], videoFps: inputs["video_fps"], height: inputs["height"], width: inputs["width"] };
  // Golden top level follows `raise` when it succeeds, else `scale` (both branches checked separately).
  try {
    return videoPipeline(videoParams(inputs["model"], inputs["video_config"], variant, "raise"), input);
  } catch (e) {
    if (family(inputs["model"]) === "qwen3_vl" && isPyError(e) && /must be larger than factor/.test(e.message)) {
      return videoPipeline(videoParams(inputs["model"], inputs["video_config"], variant, "scale"), input);
    }
    throw e;
  }
}

const runners: Record<string, Runner> = {
  "sglang.round_by_factor": (i) => roundByFactor(i["number"], i["factor"]),
  "sglang.smart_nframes": (i) => smartNframes(i["ele"], i["total_frames"], i["video_fps"]),
  "sglang.frame_indices": (i) => frameIndices(i["total_frames"], i["nframes"]),
  "sglang.smart_resize": (i) => sglangSmartResize(i["height"], i["width"], i["factor"], i["min_pixels"], i["max_pixels"]),
  "sglang.video_frame_max_pixels": (i) => {
    const b = videoFramePixelBudget(i["nframes"], i["video_config"]);
    return { min_pixels: b.minPixels, max_pixels: b.maxPixels };
  },
  "hf.qwen2vl_image_smart_resize": (i) => hfImageSmartResize(i["height"], i["width"], i["factor"], i["min_pixels"], i["max_pixels"]),
  "hf.qwen3vl_video_smart_resize": (i) =>
    hfQwen3VideoSmartResize(i["num_frames"], i["height"], i["width"], {
      temporalFactor: i["temporal_factor"],
      factor: i["factor"],
      minPixels: i["min_pixels"],
      maxPixels: i["max_pixels"],
      smallSide: i["variant"],
      temporalRounding: "half_even",
    }),
  "qwen3vl.timestamps": (i) => {
    const ts = qwen3GroupTimestamps(i["frame_indices"], i["video_fps"], i["temporal_patch_size"]);
    return { timestamps: ts, strings: ts.map(timestampText) };
  },
  "py.format_1f": (i) => formatFixed1(i["x"]),
  "pipeline.video": (i) => {
    const g = runVideo(i, "main");
    const f = family(i["model"]);
    const out: Record<string, unknown> = {
      nframes: g.nframes,
      frame_indices: g.frameIndices,
      sglang_min_pixels: g.sglangMinPixels,
      sglang_max_pixels: g.sglangMaxPixels,
      sglang_resized_hw: g.sglangResizedHw,
      hf_resized_hw: g.hfResizedHw,
      grid_thw: g.gridThw,
      tokens_per_group: g.tokensPerGroup,
      num_groups: g.numGroups,
      video_pad_tokens: g.padCount,
    };
    if (f === "qwen3_vl") {
      out["timestamps"] = g.timestamps;
      out["timestamp_strings"] = g.timestampStrings;
      out["layout"] = {
        tf_ge_5_10: goldenLayout(videoLayout(g, "timestamped_groups", "bare_video_token")),
        tf_lt_5_10: goldenLayout(videoLayout(g, "timestamped_groups", "vision_wrapped_video_token")),
      };
      const [h, w] = g.sglangResizedHw!;
      const branch = (smallSide: SmallSidePolicy): unknown => {
        try {
          const hw = hfQwen3VideoSmartResize(g.nframes, h, w, {
            temporalFactor: 2, factor: 32, minPixels: 4096, maxPixels: 25165824, smallSide, temporalRounding: "half_even",
          });
          return { hf_resized_hw: hw };
        } catch (e) {
          if (!isPyError(e)) throw e;
          return { error: { type: e.pyType } };
        }
      };
      const raise = branch("raise");
      const scale = branch("scale");
      if (!isDeepStrictEqual(raise, scale)) out["hf_small_side_branch"] = { raise, scale };
    } else {
      out["layout"] = { tf_any: goldenLayout(videoLayout(g, "repeated_pad", "bare_video_token")) };
    }
    return out;
  },
  "pipeline.video_qwen3_direct_variant": (i) => {
    const g = runVideo(i, "qwen3_direct_resize");
    return {
      nframes: g.nframes,
      frame_indices: g.frameIndices,
      hf_resized_hw: g.hfResizedHw,
      grid_thw: g.gridThw,
      tokens_per_group: g.tokensPerGroup,
      num_groups: g.numGroups,
      video_pad_tokens: g.padCount,
      timestamp_strings: g.timestampStrings,
    };
  },
  "pipeline.image": (i) => {
    const g = imagePipeline({ geometry: DEFAULT_GEOMETRY[family(i["model"])], legacyImagePreresize: i["legacy_sglang_preresize"] }, i["height"], i["width"]);
    const out: Record<string, unknown> = {
      hf_resized_hw: g.hfResizedHw,
      grid_thw: g.gridThw,
      image_pad_tokens: g.padCount,
      layout: goldenLayout(imageLayout(g)),
    };
    if (g.sglangResizedHw) out["sglang_resized_hw"] = g.sglangResizedHw;
    return out;
  },
  "sglang.pad_value_from_mm_hash": (i) => {
    const h = parsePythonHexInt(i["mm_hash"]);
    return { hash_str: h.toString(), pad_value: padValueFromHash(h) };
  },
  "sglang.block_hashes": (i) => {
    if (i["prior_hash"] !== null) throw new Error("prior_hash other than null is not covered");
    const r = engineBlockHashes(i["token_ids"], i["page_size"], null);
    return { hex_digests: r.digests.map(bytesToHex), block_hashes_i64_str: r.hashes.map(String) };
  },
  "tokenizer.encode": (i) => {
    if (!encodeQwen3) throw new Error(`tokenizer unavailable: ${String(tokenizerLoadError)}`);
    return encodeQwen3(i["text"]);
  },
};

/** Golden values of the form {value, python_type, repr} compare on `value`; error details on `type`. */
function normalizeExpected(fn: string, expected: any): any {
  if (fn === "sglang.video_frame_max_pixels") {
    return { min_pixels: expected.min_pixels.value, max_pixels: expected.max_pixels.value };
  }
  if (fn === "pipeline.video" && expected && typeof expected === "object") {
    const e = { ...expected, sglang_max_pixels: expected.sglang_max_pixels?.value };
    if (e.hf_small_side_branch) {
      const b = e.hf_small_side_branch;
      const norm = (x: any): any => (x.error ? { error: { type: x.error.type } } : x);
      e.hf_small_side_branch = { raise: norm(b.raise), scale: norm(b.scale) };
    }
    return e;
  }
  return expected;
}

function runCase(c: GoldenCase): string | null {
  const run = runners[c.function];
  if (!run) return `${c.id}: unknown function ${c.function}`;
  let actual: unknown;
  try {
    actual = run(c.inputs);
  } catch (e) {
    if (c.expected_error) {
      if (isPyError(e) && e.pyType === c.expected_error.type) return null;
      return `${c.id}: expected ${c.expected_error.type}, got ${isPyError(e) ? e.pyType : String(e)}`;
    }
    return `${c.id}: threw ${isPyError(e) ? e.pyType + ": " + e.message : String(e)}`;
  }
  if (c.expected_error) return `${c.id}: expected ${c.expected_error.type}, got ${JSON.stringify(actual)?.slice(0, 200)}`;
  const want = normalizeExpected(c.function, c.expected);
  // Round-trip through JSON so tuples, typed arrays and undefined members compare like the golden JSON.
  const got = JSON.parse(JSON.stringify(actual));
  if (!isDeepStrictEqual(got, want)) {
    const diffKeys =
      want && typeof want === "object" && !Array.isArray(want)
        ? Object.keys({ ...want, ...got }).filter((k) => !isDeepStrictEqual(got?.[k], want[k]))
        : [];
    return `${c.id}: mismatch${diffKeys.length ? " in " + diffKeys.join(",") : ""}: got ${JSON.stringify(got).slice(0, 300)} want ${JSON.stringify(want).slice(0, 300)}`;
  }
  return null;
}

const files = readdirSync(goldenDir).filter((f) => f.endsWith(".json")).sort();

beforeAll(async () => {
  await initHashing();
  try {
    const mod = await import("../../../src/prompt/tokenizer/index.ts");
    const tok = mod.getQwenTokenizer("qwen3_vl");
    encodeQwen3 = (t) => tok.encode(t, "");
  } catch (e) {
    tokenizerLoadError = e;
  }
});

describe(`golden vectors in ${goldenDir}`, () => {
  it("has golden files", () => {
    expect(files.length).toBeGreaterThan(0);
  });
  for (const file of files) {
    const doc = JSON.parse(readFileSync(join(goldenDir, file), "utf8"));
    const cases: GoldenCase[] = Array.isArray(doc) ? doc : doc.cases;
    const byFn = new Map<string, GoldenCase[]>();
    for (const c of cases) {
      const list = byFn.get(c.function) ?? [];
      list.push(c);
      byFn.set(c.function, list);
    }
    for (const [fn, list] of byFn) {
      it(`${file} ${fn} (${list.length} cases)`, () => {
        const failures: string[] = [];
        for (const c of list) {
          const f = runCase(c);
          if (f) failures.push(f);
        }
        const summary = `${failures.length}/${list.length} failed:\n` + failures.slice(0, 40).join("\n");
        expect(failures, summary).toEqual([]);
      });
    }
    it(`${file}: every case is dispatched`, () => {
      const declared = doc.counts as Record<string, number> | undefined;
      if (declared) {
        const total = Object.values(declared).reduce((a, b) => a + b, 0);
        expect(cases.length).toBe(total);
      }
      expect(cases.every((c) => Object.hasOwn(runners, c.function)), "unknown function names").toBe(true);
    });
  }
});
