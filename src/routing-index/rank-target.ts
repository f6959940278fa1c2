/**
 * DP-attention ranks as routing targets. A worker started with `--dp-size N --enable-dp-attention`
 * holds N radix caches, one per attention-DP rank, each publishing its own KV event stream on port
 * base + rank (sgl-project/sglang @9d147fd python/sglang/srt/disaggregation/kv_events.py
 * `select_kv_publisher_dp_rank` L39-58 and `ZmqEventPublisher.__init__`, which offsets both the PUB
 * and the replay endpoint by the rank). The index treats each rank as its own target: target id
 * `<worker>#<rank>`, with its own block view, load, cohort entry and receipts. A worker with one
 * rank keeps its plain worker id, so single-rank pools are unchanged. `#` is outside the worker id
 * alphabet (relay-protocol.ts), so a target id never collides with a worker id.
 */

/** Upper bound on a worker's DP size (SGLang spreads ranks over GPUs; 1024 is far beyond any host). */
export const MAX_DP_SIZE = 1024;

const RANK_SEPARATOR = "#";
const TARGET_ID = /^(.+)#(\d{1,4})$/;

/** The target id of `rank` of a worker with `dpSize` ranks: the worker id itself when it has one rank. */
export function rankTargetId(workerId: string, rank: number, dpSize: number): string {
  return dpSize > 1 ? `${workerId}${RANK_SEPARATOR}${rank}` : workerId;
}

/** The worker and the rank a target id names; `rank` null for a single-rank worker. */
export function parseRankTarget(targetId: string): { workerId: string; rank: number | null } {
  const m = TARGET_ID.exec(targetId);
  return m ? { workerId: m[1]!, rank: Number(m[2]) } : { workerId: targetId, rank: null };
}

/** Why a hello's rank claim is refused (naming the worker), or null when it is coherent. */
export function rankClaimProblem(workerId: string, rank: number, dpSize: number): string | null {
  if (!Number.isInteger(dpSize) || dpSize < 1 || dpSize > MAX_DP_SIZE) return `worker ${workerId}: dp size ${dpSize} is outside 1…${MAX_DP_SIZE}`;
  if (!Number.isInteger(rank) || rank < 0 || rank >= dpSize) return `worker ${workerId}: dp rank ${rank} is outside its dp size ${dpSize} (ranks 0…${dpSize - 1})`;
  return null;
}
