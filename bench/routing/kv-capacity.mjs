// KV capacity of one worker, derived from the calibrated model's geometry and GPU
// (bench/calibration/h200-qwen2_5-vl-7b.json: dims, device memory, parameter count): SGLang's
// static pool is mem_fraction_static of the GPU's memory, less the weights; the rest is KV cache at
// 2 (K and V) × layers × KV heads × head dim × 2 bytes (bf16) per token.
import { readFileSync } from "node:fs";

/** SGLang --mem-fraction-static as assumed here (its default is chosen per GPU size; ~0.85–0.9 on 80–141 GB cards). */
export const MEM_FRACTION_STATIC = 0.85;

export function kvCapacity(calibrationPath = new URL("../calibration/h200-qwen2_5-vl-7b.json", import.meta.url)) {
  const cal = JSON.parse(readFileSync(calibrationPath, "utf8"));
  const d = cal.dims;
  const headDim = d.hidden_size / d.num_attention_heads;
  const bytesPerToken = 2 * d.num_hidden_layers * d.num_key_value_heads * headDim * 2;
  const gpuBytes = cal.device.memory_gib * 2 ** 30;
  const weightBytes = cal.params * 2;
  const tokens = Math.floor((gpuBytes * MEM_FRACTION_STATIC - weightBytes) / bytesPerToken);
  return { gpu: cal.device.gpu, memoryGiB: cal.device.memory_gib, memFractionStatic: MEM_FRACTION_STATIC, weightGiB: +(weightBytes / 2 ** 30).toFixed(2), bytesPerToken, tokens };
}
