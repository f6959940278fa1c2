/**
 * The relay beside a DP-attention worker (a simulated `--dp-size 2` SGLang worker, real ZMQ): one
 * process follows every rank, each on its own port (base + rank) with its own block set; a relay
 * whose endpoint carries another rank's batches (attn_dp_rank differs) keeps none of their blocks.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { silentLogger } from "../../../services/relay/log.ts";
import { startWorkerRelays } from "../../../services/relay/rank-relays.ts";
import type { Relay } from "../../../services/relay/relay.ts";
import { offsetEndpoint } from "../../../services/relay/worker-info.ts";
import { startSimulatedWorker, type SimulatedWorker } from "../../../services/sglang-sim/worker.ts";
import { testCredential } from "./fakes.ts";

let w: SimulatedWorker;
const relays: Relay[] = [];

beforeAll(async () => {
  w = await startSimulatedWorker({ dpSize: 2, enableDpAttention: true, pageSize: 4 });
});
afterAll(async () => {
  await Promise.all(relays.map((r) => r.close()));
  await w?.close();
});

const options = { indexUrl: "ws://127.0.0.1:1", workerId: "w1", credential: testCredential("dp"), replayEndpoint: null };

async function generateOn(rank: number, k: number): Promise<void> {
  const input_ids = Array.from({ length: 17 }, (_, i) => 700_000 + k * 100 + i);
  const r = await fetch(`${w.url}/generate`, { method: "POST", body: JSON.stringify({ input_ids, sampling_params: { max_new_tokens: 1 }, routed_dp_rank: rank }) });
  expect(r.status).toBe(200);
}

/** PUB/SUB joins asynchronously: keep storing new prompts on `rank` until `seen` holds. */
async function until(rank: number, seen: () => boolean): Promise<void> {
  for (let k = 0; !seen() && k < 100; k++) {
    await generateOn(rank, k + rank * 1000);
    await new Promise((r) => setTimeout(r, 20));
  }
  expect(seen()).toBe(true);
}

describe("relays of a DP worker", () => {
  it("follow every rank from one process, each rank's blocks in its own view", async () => {
    const started = await startWorkerRelays({ ...options, workerUrl: w.url }, silentLogger);
    relays.push(...started);
    expect(started).toHaveLength(2);
    expect(started[1]!.info.kvEndpoint).toBe(offsetEndpoint(w.kvEndpoint!, "127.0.0.1", 1));
    await until(1, () => started[1]!.blockSet.size > 0);
    expect(started[0]!.blockSet.size).toBe(0);
    await until(0, () => started[0]!.blockSet.size > 0);
  });

  it("keeps no blocks of another rank's batches (an endpoint that points at the wrong rank)", async () => {
    const [misrouted] = await startWorkerRelays({ ...options, workerUrl: w.url, dpRank: 1, kvEndpoint: w.kvEndpoint! }, silentLogger);
    relays.push(misrouted!);
    await until(0, () => (misrouted!.stats().dropped["wrong_dp_rank"] ?? 0) > 0);
    expect(misrouted!.blockSet.size).toBe(0);
  });
});
