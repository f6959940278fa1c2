/**
 * SGLang's rank field on `/generate`: `routed_dp_rank` (GenerateReqInput, sgl-project/sglang @9d147fd
 * python/sglang/srt/managers/io_struct.py L252). Every load-balance method of the data-parallel
 * controller honours it before its own choice (managers/data_parallel_controller.py L605-610), and a
 * rank outside [0, dp_size) is refused (tokenizer_manager.py L623-632). The older `data_parallel_rank`
 * is not read by native `/generate` at that pin (PR #29214), so it is never sent. Only the edge sets
 * it: clients' rank fields are refused (src/api/validate.ts).
 */
export const ROUTED_DP_RANK_FIELD = "routed_dp_rank";

/**
 * The body with the rank added as its first key. A `/generate` body is a JSON object that opens
 * with its `text` key (generate-body.ts), so the rank goes in without re-encoding the prompt.
 */
export function withRoutedDpRank(body: Blob, rank: number): Blob {
  if (!Number.isInteger(rank) || rank < 0) throw new RangeError(`bad DP rank ${rank}`);
  return new Blob([`{"${ROUTED_DP_RANK_FIELD}":${rank},`, body.slice(1)], { type: body.type });
}
