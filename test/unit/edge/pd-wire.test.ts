/**
 * Prefill/decode fields on the wire, against SGLang's own structs:
 *  - what the edge adds to a /generate body against GenerateReqInput's PD fields
 *    (python/sglang/srt/managers/io_struct.py, sgl-project/sglang @9d147fd L245-249; read in the
 *    mirror zyzshishui/sglang @06f49baf: `bootstrap_host: Optional[Union[List[str], str]]`,
 *    `bootstrap_port: Optional[Union[List[Optional[int]], int]]`,
 *    `bootstrap_room: Optional[Union[List[int], int]]`), with the room SGLang stores as a uint64
 *    (int64 on NPU) and reads 0 as "not landed" (disaggregation/utils.py L117-126, L248-254);
 *  - what the relay reads of /server_info (`disaggregation_mode`, `disaggregation_bootstrap_port`:
 *    server_args.py L2434-2445) from a real simulated prefill and decode over HTTP, and what it
 *    refuses; the hello's new fields are optional (an older relay's hello still parses).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { withBootstrap } from "../../../src/edge/chat/pd-dispatch.ts";
import { RelayHelloSchema } from "../../../src/relay-wire/relay-protocol.ts";
import { fetchServerInfo, parseWorkerInfo, RelayStartupError } from "../../../services/relay/worker-info.ts";
import { startSimulatedWorker, type SimulatedWorker } from "../../../services/sglang-sim/worker.ts";

/** A Python int: any integral JSON number (beyond 2^53 too, which JavaScript reads rounded). */
const pyInt = z.number().refine(Number.isInteger, "not an int");
/** GenerateReqInput's PD trio as pydantic would accept them. */
const SglangPdFields = z.object({
  bootstrap_host: z.union([z.string(), z.array(z.string())]).nullable().optional(),
  bootstrap_port: z.union([pyInt, z.array(pyInt.nullable())]).nullable().optional(),
  bootstrap_room: z.union([pyInt, z.array(pyInt)]).nullable().optional(),
});

describe("the bootstrap fields against GenerateReqInput", () => {
  it("host, port and room have SGLang's types; the room is an exact non-zero integer below 2^63", async () => {
    const room = (1n << 63n) - 1025n;
    const text = await (await withBootstrap(new Blob(['{"text":"x","sampling_params":{"max_new_tokens":4}}']), { host: "10.0.0.7", port: 8998, room })).text();
    const parsed = SglangPdFields.parse(JSON.parse(text));
    expect(parsed).toMatchObject({ bootstrap_host: "10.0.0.7", bootstrap_port: 8998 });
    // JSON.parse rounds a 63-bit integer; Python's json reads the text exactly: check the text.
    const raw = /"bootstrap_room":(\d+)\}$/.exec(text);
    expect(raw).not.toBeNull();
    const exact = BigInt(raw![1]!);
    expect(exact).toBe(room);
    expect(exact > 0n && exact < 1n << 63n).toBe(true);
  });
});

describe("the worker's role from /server_info", () => {
  let prefill: SimulatedWorker;
  let decode: SimulatedWorker;
  let unified: SimulatedWorker;
  beforeAll(async () => {
    [prefill, decode, unified] = await Promise.all([
      startSimulatedWorker({ disaggregationMode: "prefill" }),
      startSimulatedWorker({ disaggregationMode: "decode" }),
      startSimulatedWorker({}),
    ]);
  });
  afterAll(async () => {
    await Promise.all([prefill?.close(), decode?.close(), unified?.close()]);
  });

  it("reads prefill (with its bootstrap port), decode and unified workers", async () => {
    const p = parseWorkerInfo(await fetchServerInfo(prefill.url, 5_000), prefill.url);
    expect(p.disaggregationMode).toBe("prefill");
    // The port the prefill's bootstrap server answers on.
    expect((await fetch(`http://127.0.0.1:${p.bootstrapPort}/health`)).status).toBe(200);
    expect(parseWorkerInfo(await fetchServerInfo(decode.url, 5_000), decode.url)).toMatchObject({ disaggregationMode: "decode", bootstrapPort: null });
    expect(parseWorkerInfo(await fetchServerInfo(unified.url, 5_000), unified.url)).toMatchObject({ disaggregationMode: "null", bootstrapPort: null });
  });

  it("refuses an unknown role and a prefill without a bootstrap port, naming the worker", async () => {
    const info = (await fetchServerInfo(prefill.url, 5_000)) as Record<string, unknown>;
    expect(() => parseWorkerInfo({ ...info, disaggregation_mode: "encode" }, prefill.url)).toThrow(RelayStartupError);
    expect(() => parseWorkerInfo({ ...info, disaggregation_mode: "encode" }, prefill.url)).toThrow(prefill.url);
    expect(() => parseWorkerInfo({ ...info, disaggregation_bootstrap_port: null }, prefill.url)).toThrow(/bootstrap_port/);
  });

  it("a decode worker refuses a request without its prefill peer, and times out when the peer never has the room", async () => {
    const noPeer = await fetch(`${decode.url}/generate`, { method: "POST", body: JSON.stringify({ text: "hi" }) });
    expect(noPeer.status).toBe(400);
    const port = parseWorkerInfo(await fetchServerInfo(prefill.url, 5_000), prefill.url).bootstrapPort!;
    const impatient = await startSimulatedWorker({ disaggregationMode: "decode", disaggregationWaitingTimeoutMs: 200 });
    try {
      const r = await fetch(`${impatient.url}/generate`, { method: "POST", body: JSON.stringify({ text: "hi", bootstrap_host: "127.0.0.1", bootstrap_port: port, bootstrap_room: 4242 }) });
      expect(r.status).toBe(500);
      expect(((await r.json()) as { message: string }).message).toMatch(/KV transfer timed out .*room 4242/);
    } finally {
      await impatient.close();
    }
  });

  it("hello: the role fields are optional, so an older relay's hello still parses as a unified worker", () => {
    const base = { type: "hello", workerId: "w", url: "http://w:30000", blockSize: 16, epoch: 1, modelName: "m" };
    expect(RelayHelloSchema.parse(base).disaggregationMode).toBeUndefined();
    expect(RelayHelloSchema.parse({ ...base, disaggregationMode: "prefill", bootstrapPort: 8998 })).toMatchObject({ disaggregationMode: "prefill", bootstrapPort: 8998 });
    expect(RelayHelloSchema.safeParse({ ...base, disaggregationMode: "encode" }).success).toBe(false);
  });
});
