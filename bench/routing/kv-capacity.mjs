// KV capacity of one worker, derived from the calibrated model's geometry and GPU
// (bench/calibration/h200-qwen2_5-vl-7b.json by default, or another raw run such as the H100's:
// dims, device memory, language-model parameter count)
// as SGLang sizes it with its defaults: the static pool is mem_fraction_static of the GPU's memory,
// less the weights (language model and vision tower, bf16); the rest is KV cache at 2 (K and V) ×
// layers × KV heads × head dim × 2 bytes (bf16) per token.
import { readFileSync } from "node:fs";

/**
 * SGLang's default --mem-fraction-static for one GPU at tp 1 (sgl-project/sglang
 * python/sglang/srt/arg_groups/memory_hook.py @031ed82d: handle_gpu_memory_settings and
 * adjust_mem_fraction_for_vlm; the same heuristic as server_args.py _handle_gpu_memory_settings
 * before the move): a GPU of 60–160 GiB (H100 below 90, H200 above: two branches with the same values)
 * gets chunked_prefill_size 8192 and decode max_bs 256 at tp < 4,
 * reserved = 512 + 8192 × 1.5 + 256 × 2 + 1024 / 8 MiB (at least 10 GiB above 60 GiB), fraction =
 * round((GPU − reserved) / GPU, 3); a multimodal model then multiplies it by 0.95 × (1 − 0.1 ×
 * (layers × hidden² ÷ (24 × 1024²) − 1)) clamped to [0.8, 1.05], where layers is the vision config's
 * num_hidden_layers (24 when absent, as in Qwen2.5-VL's, which names it depth) and hidden its hidden_size.
 */
export function sglangDefaultMemFraction(gpuMiB, vision) {
  const reserved = Math.max(512 + 8192 * 1.5 + 256 * 2 + 1024 / 8, gpuMiB > 60 * 1024 ? 10 * 1024 : 0);
  const base = Math.round(((gpuMiB - reserved) / gpuMiB) * 1000) / 1000;
  if (!vision) return base;
  const ratio = (vision.layers * vision.hidden ** 2) / (24 * 1024 ** 2);
  return base * 0.95 * Math.max(0.8, Math.min(1.05, 1 - 0.1 * (ratio - 1)));
}

/**
 * Qwen2.5-VL-7B's vision tower (its config.json vision_config: 32 blocks of hidden 1280, SwiGLU MLP
 * 3420, patch 14, temporal patch 2, 2×2 merge into the language model's 3584): attention 4·h² and MLP
 * 3·h·3420 per block, the patch embedding and the merger MLP; biases and norms left out (< 0.1 %).
 * With the language model's 7.62 B this is the model card's 8.29 B.
 */
const VISION = { depth: 32, hidden: 1280, intermediate: 3420, patch: 14, temporalPatch: 2, merge: 2, outHidden: 3584 };
const visionParams = (v) => {
  const merged = v.hidden * v.merge ** 2;
  return v.depth * (4 * v.hidden ** 2 + 3 * v.hidden * v.intermediate) + 3 * v.temporalPatch * v.patch ** 2 * v.hidden + merged * merged + merged * v.outHidden;
};

export function kvCapacity(calibrationPath = new URL("../calibration/h200-qwen2_5-vl-7b.json", import.meta.url)) {
  const cal = JSON.parse(readFileSync(calibrationPath, "utf8"));
  const d = cal.dims;
  const headDim = d.hidden_size / d.num_attention_heads;
  const bytesPerToken = 2 * d.num_hidden_layers * d.num_key_value_heads * headDim * 2;
  const gpuBytes = cal.device.memory_gib * 2 ** 30;
  const memFractionStatic = sglangDefaultMemFraction(cal.device.memory_gib * 1024, { layers: 24, hidden: VISION.hidden });
  const params = cal.params + visionParams(VISION);
  const weightBytes = params * 2;
  const tokens = Math.floor((gpuBytes * memFractionStatic - weightBytes) / bytesPerToken);
  return { gpu: cal.device.gpu, memoryGiB: cal.device.memory_gib, memFractionStatic: +memFractionStatic.toFixed(4), params, weightGiB: +(weightBytes / 2 ** 30).toFixed(2), bytesPerToken, tokens };
}
