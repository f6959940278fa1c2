/**
 * DP-attention ranks on the wire, against SGLang's own structs (test/fixtures/sglang-dp-ranks.json,
 * written by scripts/golden/gen_sglang_dp_ranks.py with msgspec and the shapes of
 * sgl-project/sglang @9d147fd disaggregation/kv_events.py and managers/io_struct.py):
 *  - a batch's third field is the publisher's rank (`attn_dp_rank`): the simulator encodes it to
 *    SGLang's bytes and the relay's decoder reads it back;
 *  - rank r publishes on the base port + r (`offset_endpoint_port`, PUB and replay): the relay's
 *    endpoint arithmetic agrees, and a simulated `--dp-size 2` worker binds and publishes there;
 *  - `/generate` takes SGLang's rank field (`routed_dp_rank`), runs on that rank's radix cache and
 *    reports it in meta_info.dp_rank; unranked requests take the ranks in turn (round_robin); a
 *    rank outside [0, dp_size) is a 400.
 */
import { readFileSync } from "node:fs";
import { decode } from "@msgpack/msgpack";
import * as zmq from "zeromq";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { decodeKvEventBatch } from "../../../src/engine-events/event-decode.ts";
import { ROUTED_DP_RANK_FIELD } from "../../../src/proxy/routed-rank.ts";
import { encodeEventBatch } from "../../../services/sglang-sim/kv-wire.ts";
import { startSimulatedWorker, type SimulatedWorker } from "../../../services/sglang-sim/worker.ts";
import { offsetEndpoint, parseWorkerInfo } from "../../../services/relay/worker-info.ts";
import { initHashing } from "../../../src/util/hash.ts";

interface Fixture {
  batches: { name: string; rank: number; ts: number; payloadHex: string }[];
  ports: { endpoint: string; rank: number; offset: string }[];
  generateReqInputRankFields: string[];
}
const fixture = JSON.parse(readFileSync(new URL("../../fixtures/sglang-dp-ranks.json", import.meta.url), "utf8")) as Fixture;
const unhex = (h: string) => Uint8Array.from(Buffer.from(h, "hex"));

beforeAll(() => initHashing());

describe("SGLang's DP-rank structs", () => {
  it("the batch rank: the simulator writes SGLang's bytes, the relay's decoder reads the rank", () => {
    for (const c of fixture.batches) {
      const events = [
        { type: "BlockStored" as const, hash: -4242n, parent: null, tokens: [1, 2, 3, 4], blockSize: 4 },
        { type: "BlockRemoved" as const, hashes: [-4242n] },
      ];
      expect(Buffer.from(encodeEventBatch(c.ts, events, c.rank)).toString("hex"), c.name).toBe(c.payloadHex);
      expect(decodeKvEventBatch(unhex(c.payloadHex)).attnDpRank, c.name).toBe(c.rank);
    }
  });

  it("per-rank ports: the relay offsets the base endpoint exactly as SGLang's publisher does", () => {
    for (const p of fixture.ports) {
      const host = p.endpoint.includes("*") ? "127.0.0.1" : "10.0.0.7";
      expect(offsetEndpoint(p.endpoint, host, p.rank), `${p.endpoint} rank ${p.rank}`).toBe(p.offset.replace("*", host));
    }
  });

  it("the rank field the edge sends is GenerateReqInput's", () => {
    expect(fixture.generateReqInputRankFields).toContain(ROUTED_DP_RANK_FIELD);
  });
});

async function generate(w: SimulatedWorker, body: Record<string, unknown>): Promise<{ status: number; json: Record<string, any> }> {
  const r = await fetch(`${w.url}/generate`, { method: "POST", body: JSON.stringify(body) });
  return { status: r.status, json: (await r.json()) as Record<string, any> };
}

async function cacheTokens(w: SimulatedWorker, rank: number): Promise<number> {
  return ((await (await fetch(`${w.url}/debug/cache?rank=${rank}`)).json()) as { total_tokens: number }).total_tokens;
}

describe("a simulated --dp-size 2 worker", () => {
  let w: SimulatedWorker;
  beforeAll(async () => {
    w = await startSimulatedWorker({ dpSize: 2, enableDpAttention: true, pageSize: 4 });
  });
  afterAll(async () => {
    await w?.close();
  });

  it("advertises its ranks in /server_info as SGLang does, and the relay derives each rank's endpoints", async () => {
    const info = (await (await fetch(`${w.url}/server_info`)).json()) as Record<string, any>;
    expect(info.dp_size).toBe(2);
    expect(info.enable_dp_attention).toBe(true);
    expect(info.load_balance_method).toBe("round_robin");
    expect(info.internal_states).toHaveLength(2);
    expect(info.kv_events).toMatchObject({ dp_size: 2, endpoint_port_base: Number(new URL(w.kvEndpoint!.replace("tcp", "http")).port), block_size: 4 });
    const rank1 = parseWorkerInfo(info, w.url, { dpRank: 1 });
    expect(rank1.dpSize).toBe(2);
    expect(rank1.kvEndpoint).toBe(offsetEndpoint(w.kvEndpoint!, "127.0.0.1", 1));
    expect(rank1.replayEndpoint).toBe(offsetEndpoint(w.replayEndpoint!, "127.0.0.1", 1));
  });

  it("runs a routed request on that rank's cache, publishing on that rank's port with its rank", async () => {
    const sub = new zmq.Subscriber();
    sub.connect(offsetEndpoint(w.kvEndpoint!, "127.0.0.1", 1));
    sub.subscribe();
    try {
      const ids = (k: number) => Array.from({ length: 33 }, (_, i) => 500_000 + k * 100 + i);
      // PUB/SUB joins asynchronously: send distinct prompts to rank 1 until a batch arrives.
      let frames: Buffer[] | null = null;
      const received = (async () => {
        for await (const f of sub) return f as Buffer[];
        return null;
      })();
      for (let k = 0; frames === null && k < 50; k++) {
        const r = await generate(w, { input_ids: ids(k), sampling_params: { max_new_tokens: 1 }, [ROUTED_DP_RANK_FIELD]: 1 });
        expect(r.status).toBe(200);
        expect(r.json.meta_info.dp_rank).toBe(1);
        frames = await Promise.race([received, new Promise<null>((res) => setTimeout(() => res(null), 50))]);
      }
      expect(frames).not.toBeNull();
      const payload = decode(frames![2]!, { useBigInt64: true }) as unknown[];
      expect(payload[2]).toBe(1);
      expect(await cacheTokens(w, 1)).toBeGreaterThan(0);
      expect(await cacheTokens(w, 0)).toBe(0);
      // A repeat on the same rank finds its prefix; on the other rank it does not.
      const again = await generate(w, { input_ids: ids(0), sampling_params: { max_new_tokens: 1 }, routed_dp_rank: 1 });
      expect(again.json.meta_info.cached_tokens).toBeGreaterThanOrEqual(32);
      const other = await generate(w, { input_ids: ids(1), sampling_params: { max_new_tokens: 1 }, routed_dp_rank: 0 });
      expect(other.json.meta_info.dp_rank).toBe(0);
      expect(other.json.meta_info.cached_tokens).toBe(0);
    } finally {
      sub.close();
    }
  });

  it("takes ranks in turn for unranked requests and refuses a rank outside its dp size", async () => {
    const ranks: number[] = [];
    for (let k = 0; k < 4; k++) ranks.push((await generate(w, { input_ids: [900 + k, 901, 902, 903, 904], sampling_params: { max_new_tokens: 1 } })).json.meta_info.dp_rank);
    expect(new Set([ranks[0], ranks[1]])).toEqual(new Set([0, 1]));
    expect(ranks[2]).toBe(ranks[0]);
    expect(ranks[3]).toBe(ranks[1]);
    const bad = await generate(w, { input_ids: [1, 2, 3, 4, 5], routed_dp_rank: 2 });
    expect(bad.status).toBe(400);
  });
});
