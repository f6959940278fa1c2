/**
 * The worker contract a relay publishes at hello: derived from the served model's
 * directory (config.json, preprocessor_config.json, video_preprocessor_config.json) and the
 * worker's `/server_info` (version, `mm_process_config`). Published only when the worker accepts
 * caller `mm_hashes`: a worker that ignores them pads media with its own hashes, so the router's
 * pad-valued block keys could never match its cache.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { deriveContract, SGLANG_CONTRACT_KEY, type ModelDirFiles, type SglangRuntime, type WorkerContract } from "../../src/layout/index.ts";
import { RelayStartupError } from "./worker-info.ts";

export const MODEL_DIR_FILES = {
  config: "config.json",
  preprocessorConfig: "preprocessor_config.json",
  videoPreprocessorConfig: "video_preprocessor_config.json",
} as const;

async function readJsonFile(path: string, required: boolean): Promise<unknown> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT" && !required) return undefined;
    throw new RelayStartupError(`model dir: cannot read ${path}: ${(e as Error).message}`);
  }
  try {
    return JSON.parse(text) as unknown;
  } catch (e) {
    throw new RelayStartupError(`model dir: ${path} is not JSON: ${(e as Error).message}`);
  }
}

/**
 * Reads the three files of a model directory. config.json is required (a model dir without it is a
 * misconfiguration); the processor configs may be absent, which deriveContract handles (Qwen2/2.5
 * fall back to preprocessor_config.json, Qwen3-VL fails closed).
 */
export async function readModelDir(dir: string): Promise<ModelDirFiles> {
  const [config, preprocessorConfig, videoPreprocessorConfig] = await Promise.all([
    readJsonFile(join(dir, MODEL_DIR_FILES.config), true),
    readJsonFile(join(dir, MODEL_DIR_FILES.preprocessorConfig), false),
    readJsonFile(join(dir, MODEL_DIR_FILES.videoPreprocessorConfig), false),
  ]);
  const files: ModelDirFiles = { config };
  if (preprocessorConfig !== undefined) files.preprocessorConfig = preprocessorConfig;
  if (videoPreprocessorConfig !== undefined) files.videoPreprocessorConfig = videoPreprocessorConfig;
  return files;
}

/**
 * The SGLang runtime description from `/server_info`: `version` and the ServerArgs field
 * `mm_process_config` (`--mm-process-config`). Environment overrides and the transformers version
 * are not visible there; deriveContract uses SGLang's defaults and pin for them.
 */
export function runtimeFromServerInfo(raw: unknown): SglangRuntime | null {
  if (typeof raw !== "object" || raw === null) return null;
  const info = raw as Record<string, unknown>;
  const version = info["version"];
  if (typeof version !== "string" || version.length === 0) return null;
  const flags: NonNullable<SglangRuntime["flags"]> = {};
  const mm = info["mm_process_config"];
  if (typeof mm === "string" || (typeof mm === "object" && mm !== null && !Array.isArray(mm))) {
    flags.mmProcessConfig = mm as string | Record<string, unknown>;
  }
  return { version, flags };
}

export type ContractResolution =
  | { published: { [SGLANG_CONTRACT_KEY]: WorkerContract }; contract: WorkerContract }
  | { published: null; reason: string; detail: string };

/** What to put in hello's `contract`: the published object, or null with the reason why not. */
export function resolveContract(files: ModelDirFiles | null, serverInfo: unknown): ContractResolution {
  if (!files) return { published: null, reason: "no_model_dir", detail: "relay started without --model-dir" };
  const runtime = runtimeFromServerInfo(serverInfo);
  if (!runtime) return { published: null, reason: "no_version", detail: "/server_info has no version" };
  const r = deriveContract(files, runtime);
  if (!r.ok) return { published: null, reason: r.reason, detail: r.detail };
  if (!r.contract.acceptsMmHashes) {
    return {
      published: null,
      reason: "worker_rejects_mm_hashes",
      detail: `SGLang ${runtime.version} ignores caller mm_hashes (needs >= 0.5.13): its media cache keys could never match the router's`,
    };
  }
  const epd = encoderBackendProblem(serverInfo);
  if (epd) return { published: null, reason: "encoder_backend_ignores_mm_hashes", detail: epd };
  return { published: { [SGLANG_CONTRACT_KEY]: r.contract }, contract: r.contract };
}

/**
 * An encoder-backed (`--language-only`) worker applies caller mm_hashes only to items whose
 * embeddings come back through its tokenizer (`--encoder-transfer-backend zmq_to_tokenizer`:
 * sgl-project/sglang managers/tokenizer_manager.py `_tokenize_one_request` @001067ff). With
 * `zmq_to_scheduler` (SGLang's default) or `mooncake` the scheduler builds the items from the
 * received embeddings (disaggregation/encode_receiver.py `WaitingImageRequest` @00126648) and pads
 * them with a hash of the embedding, which no router can compute. Null when the worker is fine.
 */
export function encoderBackendProblem(serverInfo: unknown): string | null {
  if (typeof serverInfo !== "object" || serverInfo === null) return null;
  const info = serverInfo as Record<string, unknown>;
  if (info["language_only"] !== true) return null;
  const backend = info["encoder_transfer_backend"];
  if (backend === "zmq_to_tokenizer") return null;
  return `this --language-only worker takes embeddings by --encoder-transfer-backend ${typeof backend === "string" ? backend : "(unknown)"}, which pads media with the embedding's hash and ignores caller mm_hashes: start it with --encoder-transfer-backend zmq_to_tokenizer for exact media routing`;
}
