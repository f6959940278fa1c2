/**
 * DP ranks inside a prefill/decode pool. A DP prefill runs a request on `routed_dp_rank`, else on
 * rank `bootstrap_room % dp_size` (follow_bootstrap_room), and fails one whose rank is not the room's
 * unless the request names the prefill rank (`disagg_prefill_dp_rank`); the decode pulls the KV from
 * that rank, else from `room % dp_size` (sgl-project/sglang disaggregation/common/conn.py
 * `CommonKVSender.__init__` @ad7733e4; disaggregation/decode.py L549-566 @9d147fd). The edge picks a
 * room that agrees with the prefill rank the index chose and names the rank for the decode.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { takeBootstrapRoom, withBootstrap } from "../../../src/edge/chat/pd-dispatch.ts";
import { startSimulatedWorker, type SimulatedWorker } from "../../../services/sglang-sim/worker.ts";

describe("the room and rank fields the edge sends to a DP prefill", () => {
  it("takes a room ≡ the prefill rank (mod its dp size), non-zero, unique in flight", () => {
    const draws = [8n, 8n, 9n, 1n << 62n];
    const next = () => draws.shift()!;
    const a = takeBootstrapRoom(next, { rank: 3, dpSize: 4 }); // 8 → 11
    expect(a.room).toBe(11n);
    const b = takeBootstrapRoom(next, { rank: 3, dpSize: 4 }); // 8 → 11 again, in flight; 9 → 11 too; 2^62 → 2^62 + 3
    expect(b.room).toBe((1n << 62n) + 3n);
    const zero = takeBootstrapRoom(
      (() => {
        const d = [2n, 5n];
        return () => d.shift()!;
      })(),
      { rank: 0, dpSize: 2 },
    ); // 2 → 2 (rank 0, non-zero)
    expect(zero.room).toBe(2n);
    for (const r of [a, b, zero]) r.release();
    // A single-rank prefill: any room.
    const c = takeBootstrapRoom(() => 7n, { rank: 0, dpSize: 1 });
    expect(c.room).toBe(7n);
    c.release();
  });

  it("names the prefill rank as disagg_prefill_dp_rank after the bootstrap fields", async () => {
    const room = (1n << 62n) + 1n;
    const out = await (await withBootstrap(new Blob(['{"text":"hi"}']), { host: "h", port: 8998, room, prefillDpRank: 1 })).text();
    expect(out).toBe(`{"text":"hi","bootstrap_host":"h","bootstrap_port":8998,"bootstrap_room":${room},"disagg_prefill_dp_rank":1}`);
    expect(await (await withBootstrap(new Blob(["{}"]), { host: "h", port: 1, room: 7n, prefillDpRank: null })).text()).toBe('{"bootstrap_host":"h","bootstrap_port":1,"bootstrap_room":7}');
  });
});

describe("a simulated DP prefill and its decode", () => {
  let prefill: SimulatedWorker;
  let decode: SimulatedWorker;
  let bootstrapPort: number;
  beforeAll(async () => {
    [prefill, decode] = await Promise.all([
      startSimulatedWorker({ disaggregationMode: "prefill", dpSize: 2, enableDpAttention: true }),
      startSimulatedWorker({ disaggregationMode: "decode", disaggregationWaitingTimeoutMs: 1_500 }),
    ]);
    bootstrapPort = ((await (await fetch(`${prefill.url}/server_info`)).json()) as { disaggregation_bootstrap_port: number }).disaggregation_bootstrap_port;
  });
  afterAll(async () => {
    await Promise.all([prefill?.close(), decode?.close()]);
  });

  const prompt = "Summarise the bootstrap room rules for a data-parallel prefill worker in one line.";
  const post = (url: string, room: bigint, extra: string) =>
    fetch(`${url}/generate`, {
      method: "POST",
      // The room beyond 2^53 written exactly: 2^62 + 1 reads as the even 2^62 through a double.
      body: `{"text":${JSON.stringify(prompt)},"sampling_params":{"max_new_tokens":4}${extra},"bootstrap_host":"127.0.0.1","bootstrap_port":${bootstrapPort},"bootstrap_room":${room}}`,
    });

  it("fails a request routed to another rank than its room's, as follow_bootstrap_room does", async () => {
    const r = await post(prefill.url, (1n << 62n) + 1n, ',"routed_dp_rank":0');
    expect(r.status).toBe(500);
    expect(((await r.json()) as { message: string }).message).toMatch(/follow_bootstrap_room conflict: dispatched to dp_rank 0 but bootstrap_room 4611686018427387905 implies dp_rank 1/);
  });

  it("runs an unrouted request on the room's rank (read exactly), where the decode finds its KV", async () => {
    const room = (1n << 62n) + 1n;
    const [p, d] = await Promise.all([post(prefill.url, room, ""), post(decode.url, room, "")]);
    expect(p.status).toBe(200);
    expect(((await p.json()) as { meta_info: { dp_rank: number } }).meta_info.dp_rank).toBe(1);
    expect(d.status).toBe(200);
    expect(prefill.rankEngines[1]!.cache.dump().length).toBeGreaterThan(0);
    expect(prefill.rankEngines[0]!.cache.dump()).toHaveLength(0);
  });

  it("with the rank and an agreeing room, the repeat hits that rank's cache and the decode reports it", async () => {
    const room = (1n << 62n) + 3n;
    const rank = ',"routed_dp_rank":1';
    const [p, d] = await Promise.all([post(prefill.url, room, rank), post(decode.url, room, ',"disagg_prefill_dp_rank":1')]);
    expect(p.status).toBe(200);
    const out = (await d.json()) as { meta_info: { cached_tokens: number; prompt_tokens: number } };
    expect(out.meta_info.cached_tokens).toBeGreaterThan(0);
    expect(out.meta_info.cached_tokens).toBeLessThanOrEqual(out.meta_info.prompt_tokens);
  });

  it("a decode told another prefill rank than the one that ran the request waits out its timeout", async () => {
    const room = (1n << 62n) + 5n; // rank 1
    const [p, d] = await Promise.all([post(prefill.url, room, ""), post(decode.url, room, ',"disagg_prefill_dp_rank":0')]);
    expect(p.status).toBe(200);
    expect(d.status).toBe(500);
    expect(((await d.json()) as { message: string }).message).toMatch(/KV transfer timed out/);
  });
});
