/**
 * The relay publishes the worker contract at hello: derived from --model-dir and the worker's
 * /server_info, only when the worker accepts caller mm_hashes. Against real simulated workers and
 * a fake index (real sockets on 127.0.0.1).
 */
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { RelayHelloSchema } from "../../../src/relay-wire/relay-protocol.ts";
import { parseWorkerContract, SGLANG_CONTRACT_KEY, type QwenFamily } from "../../../src/layout/index.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { readModelDir, resolveContract, runtimeFromServerInfo } from "../../../services/relay/contract.ts";
import { createLogger } from "../../../services/relay/log.ts";
import { startRelay, type Relay } from "../../../services/relay/relay.ts";
import { RelayStartupError } from "../../../services/relay/worker-info.ts";
import { startSimulatedWorker, type SimulatedWorker } from "../../../services/sglang-sim/worker.ts";
import { fixtureContract, fixtureModelDir } from "../../fixtures/models/load.ts";
import { FakeIndex, testCredential, waitFor } from "./fakes.ts";

const SECRET = "contract-secret";
const fixtureDir = (fam: QwenFamily): string => fileURLToPath(new URL(`../../fixtures/models/${fam}`, import.meta.url));

beforeAll(() => initHashing());

describe("contract resolution", () => {
  let tmp: string;
  beforeAll(() => {
    tmp = mkdtempSync(join(tmpdir(), "relay-contract-"));
  });
  afterAll(() => rmSync(tmp, { recursive: true, force: true }));

  it("reads a model dir; absent processor configs are left to deriveContract", async () => {
    expect(await readModelDir(fixtureDir("qwen3_vl"))).toEqual(fixtureModelDir("qwen3_vl"));
    const only = (fam: QwenFamily, name: string, keep: string[]): string => {
      const d = join(tmp, name);
      rmSync(d, { recursive: true, force: true });
      mkdirSync(d, { recursive: true });
      for (const f of keep) copyFileSync(join(fixtureDir(fam), f), join(d, f));
      return d;
    };
    // Qwen2.5-VL: the video processor falls back to preprocessor_config.json.
    const a = await readModelDir(only("qwen2_5_vl", "a", ["config.json", "preprocessor_config.json"]));
    expect(a.videoPreprocessorConfig).toBeUndefined();
    const ra = resolveContract(a, { version: "0.5.19" });
    expect(ra.published).not.toBeNull();
    // Qwen3-VL without video_preprocessor_config.json: no contract (fail closed).
    const b = await readModelDir(only("qwen3_vl", "b", ["config.json", "preprocessor_config.json"]));
    expect(resolveContract(b, { version: "0.5.19" })).toMatchObject({ published: null, reason: "geometry_mismatch" });
    // No config.json, or a broken one: the relay refuses to start.
    await expect(readModelDir(only("qwen3_vl", "c", ["preprocessor_config.json"]))).rejects.toBeInstanceOf(RelayStartupError);
    const d = only("qwen3_vl", "d", []);
    writeFileSync(join(d, "config.json"), "{not json");
    await expect(readModelDir(d)).rejects.toThrow(/not JSON/);
  });

  it("publishes {sglang_qwen_vl_contract: contract} only for workers that take caller mm_hashes", () => {
    const files = fixtureModelDir("qwen3_vl");
    const ok = resolveContract(files, { version: "0.5.19", mm_process_config: null });
    expect(ok.published).toEqual({ [SGLANG_CONTRACT_KEY]: fixtureContract("qwen3_vl") });
    expect(parseWorkerContract(ok.published)).toEqual({ ok: true, contract: fixtureContract("qwen3_vl") });
    expect(resolveContract(files, { version: "0.5.12" })).toMatchObject({ published: null, reason: "worker_rejects_mm_hashes" });
    expect(resolveContract(null, { version: "0.5.19" })).toMatchObject({ published: null, reason: "no_model_dir" });
    // An encoder-backed worker publishes only where its encoders' items take the caller's mm_hashes.
    for (const backend of ["zmq_to_scheduler", "mooncake"])
      expect(resolveContract(files, { version: "0.5.19", language_only: true, encoder_transfer_backend: backend })).toMatchObject({
        published: null,
        reason: "encoder_backend_ignores_mm_hashes",
        detail: expect.stringContaining(backend),
      });
    expect(resolveContract(files, { version: "0.5.19", language_only: true, encoder_transfer_backend: "zmq_to_tokenizer" }).published).not.toBeNull();
    expect(resolveContract(files, { page_size: 16 })).toMatchObject({ published: null, reason: "no_version" });
    // --mm-process-config video overrides from /server_info reach the contract.
    const over = resolveContract(files, { version: "0.5.19", mm_process_config: '{"video":{"fps":1.0}}' });
    expect(over.published?.[SGLANG_CONTRACT_KEY].sglangVideoConfig).toEqual({ fps: 1 });
    expect(runtimeFromServerInfo({ version: "0.5.19", mm_process_config: { video: {} } })).toEqual({ version: "0.5.19", flags: { mmProcessConfig: { video: {} } } });
    expect(resolveContract({ config: { model_type: "llava" } }, { version: "0.5.19" })).toMatchObject({ published: null, reason: "unsupported_model" });
  });
});

describe("relay hello carries the worker contract", () => {
  const open: { close(): unknown }[] = [];
  afterEach(async () => {
    for (const o of open.splice(0).reverse()) await o.close();
  });

  async function helloFor(
    sim: Parameters<typeof startSimulatedWorker>[0],
    modelDir: string | undefined,
  ): Promise<{ hello: Record<string, unknown>; relay: Relay; worker: SimulatedWorker; logs: Record<string, unknown>[] }> {
    const logs: Record<string, unknown>[] = [];
    const worker = await startSimulatedWorker({ timingPreset: "instant", pageSize: 16, ...sim });
    open.push(worker);
    const index = await FakeIndex.create(SECRET);
    index.poolBlockSize = 16;
    open.push(index);
    const relay = await startRelay(
      {
        workerUrl: worker.url,
        indexUrl: index.url,
        workerId: "w1",
        credential: testCredential(SECRET),
        ...(modelDir ? { modelDir } : {}),
        healthIntervalMs: 1000,
        startupTimeoutMs: 5000,
      },
      createLogger({}, "info", (line) => logs.push(JSON.parse(line) as Record<string, unknown>)),
    );
    open.push(relay);
    await waitFor(() => (index.last?.messages.length ?? 0) >= 1, "hello");
    const hello = index.last!.messages[0]!;
    expect(hello.type).toBe("hello");
    expect(RelayHelloSchema.safeParse(hello).success).toBe(true);
    return { hello: hello as unknown as Record<string, unknown>, relay, worker, logs };
  }

  it("qwen3_vl: the contract the simulator itself follows", async () => {
    const { hello, relay, worker, logs } = await helloFor({ family: "qwen3_vl" }, fixtureDir("qwen3_vl"));
    expect(logs.find((l) => l.msg === "contract_published")).toMatchObject({ modelType: "qwen3_vl", sglangVersion: "0.5.19-sim" });
    const parsed = parseWorkerContract(hello.contract as Record<string, unknown>);
    expect(parsed.ok).toBe(true);
    if (!parsed.ok) return;
    expect(parsed.contract).toEqual(worker.media.contract);
    expect(parsed.contract.family).toBe("qwen3_vl");
    expect(parsed.contract.sglangVersion).toBe("0.5.19-sim");
    expect(parsed.contract.acceptsMmHashes).toBe(true);
    expect(relay.contract).toEqual(hello.contract);
  });

  it("qwen2_5_vl", async () => {
    const { hello, worker } = await helloFor({ family: "qwen2_5_vl", template: "qwen2vl", modelName: "Qwen/Qwen2.5-VL-7B-Instruct" }, fixtureDir("qwen2_5_vl"));
    const parsed = parseWorkerContract(hello.contract as Record<string, unknown>);
    expect(parsed.ok && parsed.contract.modelType).toBe("qwen2_5_vl");
    expect(parsed.ok && parsed.contract).toEqual(worker.media.contract);
  });

  it("null when the worker ignores caller mm_hashes", async () => {
    const { hello, relay, logs } = await helloFor({ family: "qwen3_vl", acceptsMmHashes: false }, fixtureDir("qwen3_vl"));
    expect(hello.contract).toBeNull();
    const line = logs.find((l) => l.msg === "contract_not_published");
    expect(line).toMatchObject({ level: "warn", reason: "worker_rejects_mm_hashes" });
    expect(String(line?.detail)).toMatch(/0\.5\.10-sim ignores caller mm_hashes/);
    expect(relay.contract).toBeNull();
  });

  it("null without --model-dir", async () => {
    const { hello, logs } = await helloFor({ family: "qwen3_vl" }, undefined);
    expect(hello.contract).toBeNull();
    expect(logs.find((l) => l.msg === "contract_not_published")).toMatchObject({ reason: "no_model_dir" });
  });
});
