/**
 * Derives a worker's contract from its model directory (config.json, preprocessor_config.json,
 * video_preprocessor_config.json, parsed) and its SGLang version/flags. Fail closed: unsupported
 * model types/architectures, geometry that disagrees with config.json, or processor overrides we
 * cannot reproduce publish no contract.
 */
import { z } from "zod";
import { CONTRACT_SCHEMA_ID, SUPPORTED_MODEL_TYPES, WorkerContractSchema, type SupportedModelType, type WorkerContract } from "./contract.ts";
import { ineligible, type Ineligible } from "./eligibility-reasons.ts";
import { DEFAULT_GEOMETRY, QWEN_VISION_TOKEN_IDS, type HfGeometry } from "./model-geometry.ts";
import { MM_PAD_SHIFT_VALUE, SGLANG_DEFAULTS, SglangVideoConfigSchema, type SglangPreprocess, type SglangVideoConfig } from "./sglang-constants.ts";

export interface ModelDirFiles {
  config: unknown;
  preprocessorConfig?: unknown;
  videoPreprocessorConfig?: unknown;
}

export const SglangRuntimeSchema = z.object({
  /** SGLang package version, e.g. "0.5.19". */
  version: z.string().min(1),
  /** transformers version in the worker's environment; default: SGLang's pin 5.12.1. */
  transformersVersion: z.string().min(1).optional(),
  flags: z
    .object({
      /** `--mm-process-config` (JSON text or parsed). */
      mmProcessConfig: z.union([z.string(), z.record(z.string(), z.unknown())]).optional(),
      /** Relevant environment: SGLANG_IMAGE_MAX_PIXELS, VIDEO_MAX_PIXELS (the total video budget). */
      env: z.record(z.string(), z.string()).optional(),
      /** The build has processors/qwen3_vl.py (single HF resize for Qwen3-VL video). */
      qwen3DirectResize: z.boolean().optional(),
      /** `Engine.generate` accepts `mm_hashes` (probed); default: version >= 0.5.13. */
      acceptsMmHashes: z.boolean().optional(),
      /** Probed transformers branch for a Qwen3-VL video side < 32. */
      qwen3VideoSmallSide: z.enum(["raise", "scale"]).optional(),
      /** SGLang before 2025-11-12 pre-resized images itself. */
      legacyImagePreresize: z.boolean().optional(),
    })
    .default({}),
});
export type SglangRuntime = z.input<typeof SglangRuntimeSchema>;

export type DeriveResult = { ok: true; contract: WorkerContract } | Ineligible;

type Version = [number, number, number];

export function parseVersion(s: string): Version | null {
  const m = /^v?(\d+)\.(\d+)(?:\.(\d+))?/.exec(s.trim());
  return m ? [Number(m[1]), Number(m[2]), Number(m[3] ?? 0)] : null;
}

export function versionAtLeast(v: Version, min: Version): boolean {
  for (let i = 0; i < 3; i++) if (v[i] !== min[i]) return v[i]! > min[i]!;
  return true;
}

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === "object" && v !== null && !Array.isArray(v);
const isPosInt = (v: unknown): v is number => typeof v === "number" && Number.isInteger(v) && v > 0;

class Reject extends Error {
  readonly result: Ineligible;
  constructor(r: Ineligible) {
    super(r.detail);
    this.result = r;
  }
}
const fail = (reason: Ineligible["reason"], detail: string): never => {
  throw new Reject(ineligible(reason, detail));
};

function requireEqual(file: string, key: string, value: unknown, expected: number): void {
  if (value !== undefined && value !== expected) fail("geometry_mismatch", `${file} ${key}=${String(value)} but config.json says ${expected}`);
}

/** min/max pixels from `min_pixels`/`max_pixels` or `size.shortest_edge`/`longest_edge` (must agree if both). */
function pixelBounds(file: string, cfg: Obj, fallback: [number, number]): [number, number] {
  const size = cfg["size"];
  let sMin: unknown;
  let sMax: unknown;
  if (size !== undefined && size !== null) {
    if (!isObj(size)) return fail("geometry_mismatch", `${file} size is not an object`);
    const extra = Object.keys(size).filter((k) => k !== "shortest_edge" && k !== "longest_edge");
    if (extra.length) fail("unsupported_processor_config", `${file} size has ${extra.join(",")}`);
    sMin = size["shortest_edge"];
    sMax = size["longest_edge"];
  }
  const pick = (direct: unknown, fromSize: unknown, dflt: number, name: string): number => {
    if (direct !== undefined && direct !== null && fromSize !== undefined && direct !== fromSize) {
      fail("geometry_mismatch", `${file} ${name} disagrees with size`);
    }
    const v = direct ?? fromSize ?? dflt;
    if (!isPosInt(v)) return fail("geometry_mismatch", `${file} ${name} is not a positive integer`);
    return v;
  };
  const min = pick(cfg["min_pixels"], sMin, fallback[0], "min_pixels");
  const max = pick(cfg["max_pixels"], sMax, fallback[1], "max_pixels");
  if (max < min) fail("geometry_mismatch", `${file} max pixels < min pixels`);
  return [min, max];
}

function checkProcessorGeometry(file: string, cfg: Obj, patch: number, merge: number, temporal: number): void {
  requireEqual(file, "patch_size", cfg["patch_size"], patch);
  requireEqual(file, "merge_size", cfg["merge_size"], merge);
  requireEqual(file, "temporal_patch_size", cfg["temporal_patch_size"], temporal);
  if (cfg["do_resize"] === false) fail("unsupported_processor_config", `${file} do_resize=false`);
}

/** Python `int(s)` for a decimal environment value (strict subset). */
function envInt(name: string, s: string): number {
  const t = s.trim();
  if (!/^[+-]?\d+(_\d+)*$/.test(t)) return fail("unsupported_processor_config", `${name}=${s} is not an integer`);
  const v = Number(t.replace(/_/g, ""));
  if (!Number.isSafeInteger(v) || v <= 0) return fail("unsupported_processor_config", `${name}=${s} out of range`);
  return v;
}

/** Python `int(float(s))`. */
function envIntOfFloat(name: string, s: string): number {
  const t = s.trim();
  if (!/^[+-]?(\d+(_\d+)*)?(\.\d*)?([eE][+-]?\d+)?$/.test(t) || !/\d/.test(t)) return fail("unsupported_processor_config", `${name}=${s} is not a number`);
  const v = Math.trunc(Number(t.replace(/_/g, "")));
  if (!Number.isSafeInteger(v) || v <= 0) return fail("unsupported_processor_config", `${name}=${s} out of range`);
  return v;
}

function parseMmProcessConfig(raw: unknown, directVariant: boolean): SglangVideoConfig {
  if (raw === undefined || raw === null) return {};
  let cfg = raw;
  if (typeof cfg === "string") {
    if (cfg.trim() === "") return {};
    try {
      cfg = JSON.parse(cfg);
    } catch {
      return fail("unsupported_processor_config", "--mm-process-config is not JSON");
    }
  }
  if (!isObj(cfg)) return fail("unsupported_processor_config", "--mm-process-config is not an object");
  for (const k of Object.keys(cfg)) {
    if (k !== "image" && k !== "video") fail("unsupported_processor_config", `--mm-process-config.${k} is not modelled`);
  }
  const image = cfg["image"];
  if (image !== undefined && image !== null && !(isObj(image) && Object.keys(image).length === 0)) {
    fail("unsupported_processor_config", "image processor overrides are not modelled");
  }
  const video = cfg["video"] ?? {};
  const r = SglangVideoConfigSchema.safeParse(video);
  if (!r.success) return fail("unsupported_processor_config", `video config: ${r.error.issues.map((i) => i.message).join("; ")}`);
  if (directVariant && Object.keys(r.data).length > 0) fail("unsupported_processor_config", "video overrides with the qwen3 direct-resize variant");
  return r.data;
}

function deriveOrThrow(files: ModelDirFiles, runtimeIn: SglangRuntime): WorkerContract {
  const rt = SglangRuntimeSchema.safeParse(runtimeIn);
  if (!rt.success) return fail("unsupported_engine_version", "invalid SGLang runtime description");
  const { version, transformersVersion = "5.12.1", flags } = rt.data;

  const config = files.config;
  if (!isObj(config)) return fail("unsupported_model", "config.json is not an object");
  const modelType = config["model_type"];
  if (typeof modelType !== "string" || !Object.hasOwn(SUPPORTED_MODEL_TYPES, modelType)) {
    return fail("unsupported_model", `model_type ${String(modelType)} is not supported`);
  }
  const spec = SUPPORTED_MODEL_TYPES[modelType as SupportedModelType];
  const archs = config["architectures"];
  if (!Array.isArray(archs) || archs.length !== 1 || archs[0] !== spec.architecture) {
    return fail("unsupported_model", `architectures ${JSON.stringify(archs)} is not [${spec.architecture}]`);
  }
  const family = spec.family;
  const defaults = DEFAULT_GEOMETRY[family];

  const vision = config["vision_config"];
  if (!isObj(vision)) return fail("geometry_mismatch", "config.json has no vision_config");
  const patch = vision["patch_size"] ?? vision["spatial_patch_size"];
  const merge = vision["spatial_merge_size"];
  const temporal = vision["temporal_patch_size"];
  if (!isPosInt(patch) || !isPosInt(merge) || !isPosInt(temporal)) {
    return fail("geometry_mismatch", "vision_config lacks patch_size/spatial_merge_size/temporal_patch_size");
  }
  const tokenKeys = {
    visionStart: "vision_start_token_id",
    visionEnd: "vision_end_token_id",
    imagePad: "image_token_id",
    videoPad: "video_token_id",
  } as const;
  for (const [k, key] of Object.entries(tokenKeys) as [keyof typeof tokenKeys, string][]) {
    const v = config[key];
    if (v !== undefined && v !== QWEN_VISION_TOKEN_IDS[k]) {
      fail("unsupported_model", `${key}=${String(v)} differs from the Qwen-VL vocabulary (${QWEN_VISION_TOKEN_IDS[k]})`);
    }
  }

  const pre = files.preprocessorConfig ?? {};
  if (!isObj(pre)) return fail("geometry_mismatch", "preprocessor_config.json is not an object");
  checkProcessorGeometry("preprocessor_config.json", pre, patch, merge, temporal);
  const ipt = pre["image_processor_type"];
  if (ipt !== undefined && ipt !== "Qwen2VLImageProcessor" && ipt !== "Qwen2VLImageProcessorFast") {
    fail("unsupported_processor_config", `image_processor_type ${String(ipt)}`);
  }
  const [imageMin, imageMax] = pixelBounds("preprocessor_config.json", pre, [defaults.imageMinPixels, defaults.imageMaxPixels]);

  const isQwen3 = family === "qwen3_vl";
  let vpre = files.videoPreprocessorConfig;
  if (vpre === undefined || vpre === null) {
    // transformers falls back to preprocessor_config.json for Qwen2/2.5; Qwen3 snapshots ship their own.
    if (isQwen3) return fail("geometry_mismatch", "Qwen3-VL needs video_preprocessor_config.json");
    vpre = pre;
  }
  if (!isObj(vpre)) return fail("geometry_mismatch", "video_preprocessor_config.json is not an object");
  checkProcessorGeometry("video_preprocessor_config.json", vpre, patch, merge, temporal);
  const vpt = vpre["video_processor_type"];
  const wantVpt = isQwen3 ? "Qwen3VLVideoProcessor" : "Qwen2VLVideoProcessor";
  if (vpt !== undefined && vpt !== wantVpt) fail("unsupported_processor_config", `video_processor_type ${String(vpt)} is not ${wantVpt}`);
  if (vpre["cap_pixels_per_frame"] === true) fail("unsupported_processor_config", "cap_pixels_per_frame is not modelled");
  const videoFallback: [number, number] = files.videoPreprocessorConfig ? [defaults.videoMinPixels, defaults.videoMaxPixels] : [imageMin, imageMax];
  const [videoMin, videoMax] = pixelBounds("video_preprocessor_config.json", vpre, videoFallback);
  const num = (k: string, d: number): number => {
    const v = vpre[k];
    if (v === undefined || v === null) return d;
    if (typeof v !== "number" || !Number.isFinite(v) || v <= 0) return fail("geometry_mismatch", `video_preprocessor_config.json ${k} is invalid`);
    return v;
  };

  const hf: HfGeometry = {
    patchSize: patch,
    mergeSize: merge,
    temporalPatchSize: temporal,
    imageMinPixels: imageMin,
    imageMaxPixels: imageMax,
    videoMinPixels: videoMin,
    videoMaxPixels: videoMax,
    videoFps: num("fps", defaults.videoFps),
    videoMinFrames: num("min_frames", defaults.videoMinFrames),
    videoMaxFrames: num("max_frames", defaults.videoMaxFrames),
  };

  const sv = parseVersion(version);
  const tv = parseVersion(transformersVersion);
  if (!tv) return fail("unsupported_engine_version", `transformers version ${transformersVersion} is not parseable`);
  const acceptsMmHashes = flags.acceptsMmHashes ?? (sv !== null && versionAtLeast(sv, [0, 5, 13]));
  const direct = isQwen3 && flags.qwen3DirectResize === true;

  const sglangPreprocess: SglangPreprocess = { ...SGLANG_DEFAULTS };
  const env = flags.env ?? {};
  if (env["SGLANG_IMAGE_MAX_PIXELS"] !== undefined) sglangPreprocess.maxPixels = envInt("SGLANG_IMAGE_MAX_PIXELS", env["SGLANG_IMAGE_MAX_PIXELS"]);
  if (env["VIDEO_MAX_PIXELS"] !== undefined) sglangPreprocess.videoTotalPixels = envIntOfFloat("VIDEO_MAX_PIXELS", env["VIDEO_MAX_PIXELS"]);

  const contract: WorkerContract = {
    schema: CONTRACT_SCHEMA_ID,
    engine: "sglang",
    modelType: modelType as SupportedModelType,
    architecture: spec.architecture,
    family,
    tokenIds: { ...QWEN_VISION_TOKEN_IDS },
    sglangVersion: version,
    sglangVariant: direct ? "qwen3_direct_resize" : "main",
    sglangPreprocess,
    sglangVideoConfig: parseMmProcessConfig(flags.mmProcessConfig, direct),
    imagePreresize: flags.legacyImagePreresize ? "sglang_legacy" : "none",
    frameSampling: "floor_linspace_unique",
    padValueShift: MM_PAD_SHIFT_VALUE,
    acceptsMmHashes,
    transformersVersion,
    hf,
    // transformers >= 5.10 replaces only the bare <|video_pad|>, keeping the template's outer pair.
    placeholderTarget: versionAtLeast(tv, [5, 10, 0]) ? "bare_video_token" : "vision_wrapped_video_token",
    resizeMode: versionAtLeast(tv, [5, 15, 0]) ? "round_ties_even" : "legacy_ceil",
    smallSidePolicy: flags.qwen3VideoSmallSide ?? (versionAtLeast(tv, [5, 0, 0]) ? "unknown" : "raise"),
    layoutVariant: isQwen3 ? "timestamped_groups" : "repeated_pad",
  };
  const checked = WorkerContractSchema.safeParse(contract);
  if (!checked.success) return fail("invalid_contract", checked.error.issues.map((i) => i.message).join("; "));
  return checked.data;
}

export function deriveContract(files: ModelDirFiles, sglang: SglangRuntime): DeriveResult {
  try {
    return { ok: true, contract: deriveOrThrow(files, sglang) };
  } catch (e) {
    if (e instanceof Reject) return e.result;
    throw e;
  }
}
