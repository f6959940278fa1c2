import { beforeAll, describe, expect, it } from "vitest";
import {
  SGLANG_CONTRACT_KEY,
  VLLM_CONTRACT_KEY,
  WorkerContractSchema,
  canonicalJson,
  cohortContract,
  cohortDigest,
  cohortEligibility,
  contractDigest,
  deriveContract,
  parseWorkerContract,
  type WorkerContract,
} from "../../../src/layout/index.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { DEFAULT_RUNTIME, fixtureContract, fixtureModelDir } from "../../fixtures/models/load.ts";

beforeAll(async () => {
  await initHashing();
});

/** Deep copy with keys in reverse order at every level. */
function reverseKeys(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(reverseKeys);
  if (v && typeof v === "object") return Object.fromEntries(Object.entries(v).reverse().map(([k, x]) => [k, reverseKeys(x)]));
  return v;
}

function leafPaths(v: unknown, path: string[] = []): string[][] {
  if (v && typeof v === "object" && !Array.isArray(v)) return Object.entries(v).flatMap(([k, x]) => leafPaths(x, [...path, k]));
  return [path];
}

function withLeaf(c: WorkerContract, path: string[], f: (x: unknown) => unknown): WorkerContract {
  const copy = structuredClone(c) as Record<string, any>;
  let o = copy;
  for (const k of path.slice(0, -1)) o = o[k];
  const last = path[path.length - 1]!;
  o[last] = f(o[last]);
  return copy as WorkerContract;
}

const mutate = (x: unknown): unknown =>
  typeof x === "number" ? x + 1 : typeof x === "boolean" ? !x : typeof x === "string" ? x + "x" : x;

describe("deriveContract from model directories", () => {
  it("publishes for qwen2_vl, qwen2_5_vl and qwen3_vl fixtures", () => {
    expect(fixtureContract("qwen2_vl").layoutVariant).toBe("repeated_pad");
    expect(fixtureContract("qwen2_5_vl").hf).toMatchObject({ patchSize: 14, videoMinPixels: 3136, videoMaxPixels: 12845056 });
    const q3 = fixtureContract("qwen3_vl");
    expect(q3).toMatchObject({
      family: "qwen3_vl",
      sglangVariant: "main",
      placeholderTarget: "bare_video_token", // transformers 5.12.1 (SGLang's pin) keeps the outer pair
      resizeMode: "legacy_ceil",
      smallSidePolicy: "unknown",
      acceptsMmHashes: true,
      layoutVariant: "timestamped_groups",
      hf: { patchSize: 16, imageMinPixels: 65536, imageMaxPixels: 16777216, videoMinPixels: 4096, videoMaxPixels: 25165824 },
    });
    expect(q3.sglangPreprocess).toMatchObject({ imageFactor: 28, videoMinPixels: 100352, videoMaxPixels: 602112, videoTotalPixels: 90316800, frameFactor: 2, fps: 2, minFrames: 4, maxFrames: 768 });
  });

  it("follows SGLang / transformers versions and flags", () => {
    const r = fixtureContract("qwen3_vl", {
      version: "0.5.12",
      transformersVersion: "5.17.0",
      flags: { qwen3DirectResize: true, env: { VIDEO_MAX_PIXELS: "15680000.5" } },
    });
    expect(r).toMatchObject({ acceptsMmHashes: false, resizeMode: "round_ties_even", sglangVariant: "qwen3_direct_resize" });
    expect(r.sglangPreprocess.videoTotalPixels).toBe(15680000);
    // Qwen2 families ignore the qwen3-only variant flag
    expect(fixtureContract("qwen2_5_vl", { version: "0.5.19", flags: { qwen3DirectResize: true } }).sglangVariant).toBe("main");
  });

  it("supports only explicit Qwen-VL model types and architectures", () => {
    const cases: [string, string[]][] = [
      ["llava", ["Qwen2VLForConditionalGeneration"]],
      ["my_qwen3_vl_finetune", ["Qwen3VLForConditionalGeneration"]],
      ["qwen3_vl", ["Qwen3VLForCausalLM"]],
      ["qwen3_vl", ["Qwen3VLForConditionalGeneration", "Other"]],
      ["qwen3_5", ["Qwen3_5ForConditionalGeneration"]],
    ];
    for (const [modelType, architectures] of cases) {
      const dir = fixtureModelDir("qwen3_vl");
      dir.config = { ...dir.config, model_type: modelType, architectures };
      expect(deriveContract(dir, DEFAULT_RUNTIME), `${modelType} ${architectures}`).toMatchObject({ ok: false, reason: "unsupported_model" });
    }
  });

  it("rejects processor geometry that disagrees with config.json", () => {
    const dir = fixtureModelDir("qwen3_vl");
    dir.videoPreprocessorConfig = { ...(dir.videoPreprocessorConfig as object), patch_size: 14 };
    expect(deriveContract(dir, DEFAULT_RUNTIME)).toMatchObject({ ok: false, reason: "geometry_mismatch" });
    const dir2 = fixtureModelDir("qwen2_5_vl");
    dir2.preprocessorConfig = { ...(dir2.preprocessorConfig as object), merge_size: 4 };
    expect(deriveContract(dir2, DEFAULT_RUNTIME)).toMatchObject({ ok: false, reason: "geometry_mismatch" });
    const dir3 = fixtureModelDir("qwen2_vl");
    dir3.preprocessorConfig = { ...(dir3.preprocessorConfig as object), size: { shortest_edge: 4096, longest_edge: 12845056 } };
    expect(deriveContract(dir3, DEFAULT_RUNTIME)).toMatchObject({ ok: false, reason: "geometry_mismatch" });
    const dir4 = fixtureModelDir("qwen3_vl");
    dir4.config = { ...dir4.config, video_token_id: 248057 };
    expect(deriveContract(dir4, DEFAULT_RUNTIME)).toMatchObject({ ok: false, reason: "unsupported_model" });
    const dir5 = fixtureModelDir("qwen3_vl");
    delete dir5.videoPreprocessorConfig;
    expect(deriveContract(dir5, DEFAULT_RUNTIME)).toMatchObject({ ok: false, reason: "geometry_mismatch" });
  });

  it("rejects a per-frame pixel cap and processor overrides it cannot model", () => {
    const dir = fixtureModelDir("qwen3_vl");
    dir.videoPreprocessorConfig = { ...(dir.videoPreprocessorConfig as object), cap_pixels_per_frame: true };
    expect(deriveContract(dir, DEFAULT_RUNTIME)).toMatchObject({ ok: false, reason: "unsupported_processor_config" });
    const bad = [
      { image: { max_pixels: 1000 } },
      { video: { fps: 1, nframes: 4 } },
      { video: { sample_mode: "x" } },
      { audio: {} },
      "not json",
    ];
    for (const mmProcessConfig of bad) {
      const r = deriveContract(fixtureModelDir("qwen3_vl"), { version: "0.5.19", flags: { mmProcessConfig } });
      expect(r, JSON.stringify(mmProcessConfig)).toMatchObject({ ok: false, reason: expect.stringMatching(/unsupported_processor_config|invalid_contract/) });
    }
    // a modelled video override is carried in the contract (and so in its digest)
    const ok = fixtureContract("qwen3_vl", { version: "0.5.19", flags: { mmProcessConfig: '{"video":{"fps":1.0}}' } });
    expect(ok.sglangVideoConfig).toEqual({ fps: 1 });
  });
});

describe("contract parsing: incomplete, cross-engine and dual contracts", () => {
  it("parses a published SGLang contract (object or JSON text)", () => {
    const c = fixtureContract("qwen3_vl");
    expect(parseWorkerContract({ [SGLANG_CONTRACT_KEY]: c })).toEqual({ ok: true, contract: c });
    expect(parseWorkerContract({ [SGLANG_CONTRACT_KEY]: JSON.stringify(c) })).toEqual({ ok: true, contract: c });
  });

  it("rejects incomplete contracts", () => {
    const c = fixtureContract("qwen3_vl") as Record<string, unknown>;
    for (const k of ["sglangPreprocess", "placeholderTarget", "resizeMode", "acceptsMmHashes"]) {
      const { [k]: _drop, ...rest } = c;
      expect(parseWorkerContract({ [SGLANG_CONTRACT_KEY]: rest }), k).toMatchObject({ ok: false, reason: "invalid_contract" });
    }
    expect(parseWorkerContract({ [SGLANG_CONTRACT_KEY]: { ...c, frameFactor: 0 } })).toMatchObject({ ok: false, reason: "invalid_contract" });
    const zero = withLeaf(c as WorkerContract, ["sglangPreprocess", "frameFactor"], () => 0);
    expect(WorkerContractSchema.safeParse(zero).success).toBe(false);
    expect(parseWorkerContract({})).toMatchObject({ ok: false, reason: "no_contract" });
    expect(parseWorkerContract(null)).toMatchObject({ ok: false, reason: "no_contract" });
  });

  it("rejects cross-engine and dual contracts", () => {
    const c = fixtureContract("qwen3_vl");
    expect(parseWorkerContract({ [VLLM_CONTRACT_KEY]: c })).toMatchObject({ ok: false, reason: "cross_engine_contract" });
    expect(parseWorkerContract({ [SGLANG_CONTRACT_KEY]: { ...c, engine: "vllm" } })).toMatchObject({ ok: false, reason: "cross_engine_contract" });
    expect(parseWorkerContract({ [SGLANG_CONTRACT_KEY]: c, [VLLM_CONTRACT_KEY]: c })).toMatchObject({ ok: false, reason: "dual_contracts" });
  });

  it("rejects internally inconsistent contracts", () => {
    const c = fixtureContract("qwen2_5_vl");
    expect(WorkerContractSchema.safeParse({ ...c, layoutVariant: "timestamped_groups" }).success).toBe(false);
    expect(WorkerContractSchema.safeParse({ ...c, sglangVariant: "qwen3_direct_resize" }).success).toBe(false);
    expect(WorkerContractSchema.safeParse({ ...c, architecture: "Qwen3VLForConditionalGeneration" }).success).toBe(false);
  });
});

describe("canonical digest", () => {
  it("is independent of key order and stable", () => {
    const c = fixtureContract("qwen3_vl");
    const d = contractDigest(c);
    expect(d).toMatch(/^[0-9a-f]{64}$/);
    expect(contractDigest(reverseKeys(c) as WorkerContract)).toBe(d);
    expect(contractDigest(structuredClone(c))).toBe(d);
    expect(canonicalJson({ b: 2.0, a: [1, -0, 0.5], c: undefined })).toBe('{"a":[1,0,0.5],"b":2}');
  });

  it("changes when any single field changes", () => {
    const c = fixtureContract("qwen3_vl", { version: "0.5.19", flags: { mmProcessConfig: { video: { fps: 1 } } } });
    const base = contractDigest(c);
    const paths = leafPaths(c);
    expect(paths.length).toBeGreaterThan(30);
    const seen = new Set([base]);
    for (const p of paths) {
      const d = contractDigest(withLeaf(c, p, mutate));
      expect(d, p.join(".")).not.toBe(base);
      seen.add(d);
    }
    expect(seen.size).toBe(paths.length + 1);
    // and an added optional field too
    expect(contractDigest({ ...c, sglangVideoConfig: { fps: 1, max_frames: 64 } })).not.toBe(base);
  });

  it("differs between model families and SGLang variants", () => {
    const digests = [
      fixtureContract("qwen2_vl"),
      fixtureContract("qwen2_5_vl"),
      fixtureContract("qwen3_vl"),
      fixtureContract("qwen3_vl", { version: "0.5.19", flags: { qwen3DirectResize: true } }),
    ].map(contractDigest);
    expect(new Set(digests).size).toBe(4);
  });
});

describe("cohort rule", () => {
  it("enables exact routing only when every worker publishes the same contract", () => {
    const a = fixtureContract("qwen3_vl");
    const b = fixtureContract("qwen3_vl", { version: "0.5.19", flags: { mmProcessConfig: { video: { fps: 1 } } } });
    expect(cohortContract([a, structuredClone(a), reverseKeys(a) as WorkerContract])).toBe(a);
    expect(cohortContract([a, b])).toBeNull();
    expect(cohortContract([a, null])).toBeNull();
    expect(cohortContract([undefined, a])).toBeNull();
    expect(cohortContract([])).toBeNull();
    expect(cohortDigest(["x", "x"])).toBe("x");
    expect(cohortDigest(["x", "y"])).toBeNull();
    expect(cohortDigest([null])).toBeNull();
  });

  it("names the reason when a pool is not eligible", () => {
    const a = fixtureContract("qwen3_vl");
    const b = fixtureContract("qwen3_vl", { version: "0.5.12", flags: {} });
    const pub = (c: unknown) => ({ [SGLANG_CONTRACT_KEY]: c });
    expect(cohortEligibility([pub(a), pub(a)])).toMatchObject({ ok: true, contract: a, digest: contractDigest(a) });
    expect(cohortEligibility([pub(a), pub(b)])).toMatchObject({ ok: false, reason: "contract_disagreement" });
    expect(cohortEligibility([pub(a), {}])).toMatchObject({ ok: false, reason: "no_contract" });
    expect(cohortEligibility([pub(a), { [VLLM_CONTRACT_KEY]: a }])).toMatchObject({ ok: false, reason: "cross_engine_contract" });
    expect(cohortEligibility([])).toMatchObject({ ok: false, reason: "no_contract" });
  });
});
