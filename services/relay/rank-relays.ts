/**
 * One relay per attention-DP rank of a worker. SGLang with `--dp-size N --enable-dp-attention` runs
 * one scheduler per rank, each with its own radix cache and KV event publisher on port base + rank
 * (and replay on replay base + rank): sgl-project/sglang @9d147fd
 * python/sglang/srt/disaggregation/kv_events.py `select_kv_publisher_dp_rank` L39-58 and
 * `ZmqEventPublisher.__init__` (`offset_endpoint_port` on both endpoints); its batches carry the
 * rank as their third field, `attn_dp_rank` (L61-69). /server_info advertises the base port and
 * `dp_size` (server_args.py `describe_kv_events_publisher` L7577-7664). Each rank is its own event
 * stream with its own sequence numbers, so each gets a whole relay (feed, block set, index session
 * as target `<worker>#<rank>`); this file starts them all from one process.
 */
import type { Logger } from "./log.ts";
import { withFields } from "./log.ts";
import { RelayOptionsSchema, type RelayOptionsInput } from "./options.ts";
import { startRelay, type Relay } from "./relay.ts";
import { offsetEndpoint } from "./worker-info.ts";

/**
 * Starts the worker's relays: rank 0 first (it reads /server_info), then ranks 1…dp_size-1. With
 * `dpRank` given, only that rank's relay (an operator running one relay per rank).
 */
export async function startWorkerRelays(input: RelayOptionsInput, log: Logger): Promise<Relay[]> {
  if (input.dpRank !== undefined) return [await startRelay(input, log)];
  const first = await startRelay({ ...input, dpRank: 0 }, log);
  const relays = [first];
  try {
    for (let rank = 1; rank < first.info.dpSize; rank++) relays.push(await startRelay(rankOptions(input, rank), withFields(log, { rank })));
  } catch (e) {
    await Promise.allSettled(relays.map((r) => r.close()));
    throw e;
  }
  if (first.info.dpSize > 1) log.info("dp_ranks_followed", { dpSize: first.info.dpSize });
  return relays;
}

/** Rank `rank`'s options: explicit endpoints offset like SGLang's own, a state file of its own. */
function rankOptions(input: RelayOptionsInput, rank: number): RelayOptionsInput {
  const host = new URL(RelayOptionsSchema.shape.workerUrl.parse(input.workerUrl)).hostname;
  return {
    ...input,
    dpRank: rank,
    ...(input.kvEndpoint !== undefined ? { kvEndpoint: offsetEndpoint(input.kvEndpoint, host, rank) } : {}),
    ...(typeof input.replayEndpoint === "string" ? { replayEndpoint: offsetEndpoint(input.replayEndpoint, host, rank) } : {}),
    ...(input.stateFile !== undefined ? { stateFile: `${input.stateFile}.rank${rank}` } : {}),
  };
}
