/**
 * The worker contract: everything about a worker that decides the token layout it builds for
 * media. A relay publishes it at hello; the router expands media exactly only when every worker of
 * the pool publishes the same contract (digest.ts). zod is the source of truth for its shape.
 */
import { z } from "zod";
import { SglangVideoConfigSchema } from "./sglang-constants.ts";

export const SUPPORTED_MODEL_TYPES = {
  qwen2_vl: { architecture: "Qwen2VLForConditionalGeneration", family: "qwen2_vl" },
  qwen2_5_vl: { architecture: "Qwen2_5_VLForConditionalGeneration", family: "qwen2_5_vl" },
  qwen3_vl: { architecture: "Qwen3VLForConditionalGeneration", family: "qwen3_vl" },
  qwen3_vl_moe: { architecture: "Qwen3VLMoeForConditionalGeneration", family: "qwen3_vl" },
} as const;
export type SupportedModelType = keyof typeof SUPPORTED_MODEL_TYPES;

const posInt = z.number().int().positive();
const posNum = z.number().positive().refine(Number.isFinite, "must be finite");

export const SglangPreprocessSchema = z
  .strictObject({
    imageFactor: posInt,
    minPixels: posInt,
    maxPixels: posInt,
    maxRatio: posNum,
    videoMinPixels: posInt,
    videoMaxPixels: posInt,
    videoTotalPixels: posInt,
    frameFactor: posInt,
    fps: posNum,
    minFrames: posInt,
    maxFrames: posInt,
  })
  .refine((c) => c.maxPixels >= c.minPixels, "maxPixels < minPixels")
  .refine((c) => c.videoMaxPixels >= c.videoMinPixels, "videoMaxPixels < videoMinPixels")
  .refine((c) => c.maxFrames >= c.minFrames, "maxFrames < minFrames");

export const HfGeometrySchema = z
  .strictObject({
    patchSize: posInt,
    mergeSize: posInt,
    temporalPatchSize: posInt,
    imageMinPixels: posInt,
    imageMaxPixels: posInt,
    videoMinPixels: posInt,
    videoMaxPixels: posInt,
    videoFps: posNum,
    videoMinFrames: posInt,
    videoMaxFrames: posInt,
  })
  .refine((g) => g.imageMaxPixels >= g.imageMinPixels, "imageMaxPixels < imageMinPixels")
  .refine((g) => g.videoMaxPixels >= g.videoMinPixels, "videoMaxPixels < videoMinPixels");

export const CONTRACT_SCHEMA_ID = "kvedge.qwen-vl-worker-contract/1";

export const WorkerContractSchema = z
  .strictObject({
    schema: z.literal(CONTRACT_SCHEMA_ID),
    /** Only SGLang workers: the pad-value token view is SGLang's KV-event identity. */
    engine: z.literal("sglang"),
    modelType: z.enum(["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe"]),
    architecture: z.string(),
    family: z.enum(["qwen2_vl", "qwen2_5_vl", "qwen3_vl"]),
    tokenIds: z.strictObject({ visionStart: posInt, visionEnd: posInt, imagePad: posInt, videoPad: posInt }),
    sglangVersion: z.string().min(1),
    /** "main": SGLang 28-factor pre-resize then HF; "qwen3_direct_resize": processors/qwen3_vl.py. */
    sglangVariant: z.enum(["main", "qwen3_direct_resize"]),
    sglangPreprocess: SglangPreprocessSchema,
    /** `--mm-process-config` video overrides (Python key names), {} when none. */
    sglangVideoConfig: SglangVideoConfigSchema,
    imagePreresize: z.enum(["none", "sglang_legacy"]),
    frameSampling: z.literal("floor_linspace_unique"),
    padValueShift: z.literal(1_000_000),
    acceptsMmHashes: z.boolean(),
    transformersVersion: z.string().min(1),
    hf: HfGeometrySchema,
    placeholderTarget: z.enum(["bare_video_token", "vision_wrapped_video_token"]),
    /** Qwen3-VL video temporal rounding: ceil before transformers 5.15, half-even after. */
    resizeMode: z.enum(["legacy_ceil", "round_ties_even"]),
    /** Qwen3-VL video side < 32: transformers raises, scales up, or nobody knows (fail closed). */
    smallSidePolicy: z.enum(["raise", "scale", "unknown"]),
    layoutVariant: z.enum(["repeated_pad", "timestamped_groups"]),
  })
  .superRefine((c, ctx) => {
    const spec = SUPPORTED_MODEL_TYPES[c.modelType];
    if (spec.architecture !== c.architecture) ctx.addIssue({ code: "custom", message: `architecture ${c.architecture} does not match ${c.modelType}` });
    if (spec.family !== c.family) ctx.addIssue({ code: "custom", message: `family ${c.family} does not match ${c.modelType}` });
    const wantLayout = c.family === "qwen3_vl" ? "timestamped_groups" : "repeated_pad";
    if (c.layoutVariant !== wantLayout) ctx.addIssue({ code: "custom", message: `${c.family} uses layout ${wantLayout}` });
    if (c.sglangVariant === "qwen3_direct_resize" && c.family !== "qwen3_vl") {
      ctx.addIssue({ code: "custom", message: "qwen3_direct_resize is a Qwen3-VL variant" });
    }
    const vc = c.sglangVideoConfig;
    if (vc.fps !== undefined && vc.nframes !== undefined) ctx.addIssue({ code: "custom", message: "video config has both fps and nframes" });
    if ((vc.resized_height === undefined) !== (vc.resized_width === undefined)) {
      ctx.addIssue({ code: "custom", message: "resized_height and resized_width go together" });
    }
  });

export type WorkerContract = z.infer<typeof WorkerContractSchema>;

/** Runtime key under which a relay publishes the SGLang contract; a vLLM-style key means another engine. */
export const SGLANG_CONTRACT_KEY = "sglang_qwen_vl_contract";
export const VLLM_CONTRACT_KEY = "vllm_qwen_vl_contract";

export type ContractParseResult =
  | { ok: true; contract: WorkerContract }
  | { ok: false; reason: "no_contract" | "dual_contracts" | "cross_engine_contract" | "invalid_contract"; detail: string };

/**
 * Reads the contract out of what a worker published (its hello / model card runtime data).
 * Fail closed: none, both engines' keys, another engine's key, or a malformed one → no contract.
 */
export function parseWorkerContract(published: Readonly<Record<string, unknown>> | null | undefined): ContractParseResult {
  const sg = published?.[SGLANG_CONTRACT_KEY];
  const vl = published?.[VLLM_CONTRACT_KEY];
  if (sg !== undefined && vl !== undefined) return { ok: false, reason: "dual_contracts", detail: "worker publishes both SGLang and vLLM contracts" };
  if (vl !== undefined) return { ok: false, reason: "cross_engine_contract", detail: "worker publishes a vLLM contract" };
  if (sg === undefined || sg === null) return { ok: false, reason: "no_contract", detail: "worker publishes no contract" };
  let raw = sg;
  if (typeof raw === "string") {
    try {
      raw = JSON.parse(raw);
    } catch {
      return { ok: false, reason: "invalid_contract", detail: "contract is not JSON" };
    }
  }
  if (typeof raw === "object" && raw !== null && "engine" in raw && (raw as { engine: unknown }).engine !== "sglang") {
    return { ok: false, reason: "cross_engine_contract", detail: `contract engine ${String((raw as { engine: unknown }).engine)}` };
  }
  const r = WorkerContractSchema.safeParse(raw);
  if (!r.success) return { ok: false, reason: "invalid_contract", detail: r.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ") };
  return { ok: true, contract: r.data };
}
