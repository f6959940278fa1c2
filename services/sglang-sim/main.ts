/**
 * CLI: npx node services/sglang-sim/main.ts --port 30001 --kv-port 5557 --replay-port 5558 \
 *   --page-size 16 --capacity-tokens 200000 --model-name Qwen/Qwen3-VL-8B-Instruct \
 *   --family qwen3_vl --template qwen3vl-instruct [--timing fast|instant|h100-8b|l4-8b|h200-7b|h100-7b] \
 *   [--model-dir DIR] [--no-mm-hashes] [--sglang-version V] [--locked-down-media] [--media-store URL]
 * Prints one JSON line with the bound endpoints on stdout once ready (the fleet script reads it).
 */
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { ZodError } from "zod";
import { startSimulatedWorker, type StartOptions } from "./worker.ts";

const { values } = parseArgs({
  options: {
    host: { type: "string" },
    port: { type: "string" },
    "kv-port": { type: "string" },
    "replay-port": { type: "string" },
    "dp-size": { type: "string" },
    "enable-dp-attention": { type: "boolean" },
    "disaggregation-mode": { type: "string" },
    "disaggregation-bootstrap-port": { type: "string" },
    "no-kv-events": { type: "boolean" },
    "encoder-only": { type: "boolean" },
    "enable-prefix-mm-cache": { type: "boolean" },
    "language-only": { type: "boolean" },
    "encoder-urls": { type: "string", multiple: true },
    "encoder-transfer-backend": { type: "string" },
    topic: { type: "string" },
    "buffer-steps": { type: "string" },
    "page-size": { type: "string" },
    "capacity-tokens": { type: "string" },
    "context-length": { type: "string" },
    "model-name": { type: "string" },
    "served-model-name": { type: "string" },
    family: { type: "string" },
    template: { type: "string" },
    timing: { type: "string" },
    "prefill-tokens-per-sec": { type: "string" },
    "decode-ms-per-token": { type: "string" },
    "no-cache-report": { type: "boolean" },
    "unknown-sampling-key-status": { type: "string" },
    "incremental-streaming-output": { type: "boolean" },
    "stream-interval": { type: "string" },
    "output-seed": { type: "string" },
    "model-dir": { type: "string" },
    "no-mm-hashes": { type: "boolean" },
    "media-store": { type: "string" },
    "locked-down-media": { type: "boolean" },
    "speculative-algorithm": { type: "string" },
    "enable-hierarchical-cache": { type: "boolean" },
    "hicache-ratio": { type: "string" },
    "hicache-load-gbps": { type: "string" },
    "hicache-storage-backend": { type: "string" },
    "sglang-version": { type: "string" },
    "api-key-env": { type: "string" },
    "api-key-file": { type: "string" },
    verbose: { type: "boolean", short: "v" },
    help: { type: "boolean", short: "h" },
  },
  strict: true,
});

if (values.help) {
  process.stdout.write(
    "usage: npx node services/sglang-sim/main.ts [--host 127.0.0.1] [--port 30001] [--kv-port 5557] [--replay-port 5558] [--dp-size N [--enable-dp-attention]] (rank r publishes on kv/replay port + r)\n" +
      "  [--disaggregation-mode null|prefill|decode [--disaggregation-bootstrap-port P (prefill; default ephemeral)]]\n" +
      "  [--encoder-only [--enable-prefix-mm-cache]] [--language-only --encoder-urls URL[,URL…] [--encoder-transfer-backend zmq_to_scheduler|zmq_to_tokenizer|mooncake]]\n" +
      "  [--no-kv-events] [--topic T] [--buffer-steps N] [--page-size 16] [--capacity-tokens 200000] [--context-length N]\n" +
      "  [--model-name NAME] [--served-model-name NAME] [--family qwen2_vl|qwen2_5_vl|qwen3_vl]\n" +
      "  [--template qwen2vl|qwen3vl-instruct|qwen3vl-thinking] [--timing fast|instant|h100-8b|l4-8b|h200-7b|h100-7b]\n" +
      "  [--prefill-tokens-per-sec N] [--decode-ms-per-token N] [--no-cache-report]\n" +
      "  [--unknown-sampling-key-status 400|500] [--incremental-streaming-output] [--stream-interval N] [--output-seed prompt|rid]\n" +
      "  [--model-dir DIR (default test/fixtures/models/<family>)] [--no-mm-hashes (ignore caller mm_hashes, version 0.5.10-sim)]\n" +
      "  [--locked-down-media (media only as data: URLs or from --media-store URL's /v1/media/)]\n" +
      "  [--sglang-version V (/server_info.version; default 0.5.19-sim)] [--speculative-algorithm EAGLE (bigram KV keys)]\n" +
      "  [--enable-hierarchical-cache [--hicache-ratio 2.0] [--hicache-load-gbps 37] [--hicache-storage-backend file]] (HiCache host tier, write-through) [--verbose]\n" +
      "  [--api-key-env VAR | --api-key-file PATH (SGLang's --api-key, read from the environment or a file, never argv)]\n",
  );
  process.exit(0);
}

const int = (v: string | undefined): number | undefined => (v === undefined ? undefined : Number(v));

/** SGLang's `file` storage backend keeps its pages under this directory (hicache_storage.py HiCacheFile). */
function fileStorageDir(backend: string): string {
  if (backend !== "file") {
    process.stderr.write(`sglang-sim: --hicache-storage-backend ${backend} is not simulated (file)\n`);
    process.exit(2);
  }
  return process.env.SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR || "/tmp/hicache";
}

const opts: StartOptions = {};
if (values.host !== undefined) opts.host = values.host;
if (values.port !== undefined) opts.port = int(values.port)!;
if (values["kv-port"] !== undefined) opts.kvPort = int(values["kv-port"])!;
if (values["replay-port"] !== undefined) opts.replayPort = int(values["replay-port"])!;
if (values["no-kv-events"]) opts.kvEvents = false;
if (values["dp-size"] !== undefined) opts.dpSize = int(values["dp-size"])!;
if (values["enable-dp-attention"]) opts.enableDpAttention = true;
if (values["disaggregation-mode"] !== undefined) opts.disaggregationMode = values["disaggregation-mode"] as StartOptions["disaggregationMode"];
if (values["disaggregation-bootstrap-port"] !== undefined) opts.disaggregationBootstrapPort = int(values["disaggregation-bootstrap-port"])!;
if (values["encoder-only"]) opts.encoderOnly = true;
if (values["enable-prefix-mm-cache"]) opts.enablePrefixMmCache = true;
if (values["language-only"]) opts.languageOnly = true;
// SGLang takes `--encoder-urls A B`; here each URL is its own flag or a comma-separated list.
if (values["encoder-urls"] !== undefined) opts.encoderUrls = values["encoder-urls"].flatMap((v) => v.split(",")).filter((v) => v.length > 0);
if (values["encoder-transfer-backend"] !== undefined) opts.encoderTransferBackend = values["encoder-transfer-backend"] as StartOptions["encoderTransferBackend"];
if (values.topic !== undefined) opts.topic = values.topic;
if (values["buffer-steps"] !== undefined) opts.bufferSteps = int(values["buffer-steps"])!;
if (values["page-size"] !== undefined) opts.pageSize = int(values["page-size"])!;
if (values["capacity-tokens"] !== undefined) opts.capacityTokens = int(values["capacity-tokens"])!;
if (values["context-length"] !== undefined) opts.contextLength = int(values["context-length"])!;
if (values["model-name"] !== undefined) opts.modelName = values["model-name"];
if (values["served-model-name"] !== undefined) opts.servedModelName = values["served-model-name"];
if (values.family !== undefined) opts.family = values.family as StartOptions["family"];
if (values.template !== undefined) opts.template = values.template as StartOptions["template"];
if (values.timing !== undefined) opts.timingPreset = values.timing as StartOptions["timingPreset"];
const timing: NonNullable<StartOptions["timing"]> = {};
if (values["prefill-tokens-per-sec"] !== undefined) timing.prefillTokensPerSec = int(values["prefill-tokens-per-sec"])!;
if (values["decode-ms-per-token"] !== undefined) timing.decodeMsPerToken = int(values["decode-ms-per-token"])!;
opts.timing = timing;
if (values["no-cache-report"]) opts.enableCacheReport = false;
if (values["unknown-sampling-key-status"] !== undefined) {
  opts.unknownSamplingKeyStatus = int(values["unknown-sampling-key-status"]) as 400 | 500;
}
if (values["incremental-streaming-output"]) opts.incrementalStreamingOutput = true;
if (values["stream-interval"] !== undefined) opts.streamInterval = int(values["stream-interval"])!;
if (values["output-seed"] !== undefined) opts.outputSeed = values["output-seed"] as "prompt" | "rid";
if (values["model-dir"] !== undefined) opts.modelDir = values["model-dir"];
if (values["no-mm-hashes"]) opts.acceptsMmHashes = false;
if (values["media-store"] !== undefined || values["locked-down-media"]) {
  // The worker's media credential comes from the environment, never argv.
  opts.media = { lockedDown: values["locked-down-media"] === true, storeUrl: values["media-store"] ?? null, storeCredential: process.env.KVEDGE_MEDIA_STORE_CREDENTIAL || null };
}
if (values["speculative-algorithm"] !== undefined) {
  if (!/^EAGLE3?$/.test(values["speculative-algorithm"])) {
    process.stderr.write(`sglang-sim: --speculative-algorithm ${values["speculative-algorithm"]} is not simulated (EAGLE, EAGLE3)\n`);
    process.exit(2);
  }
  opts.eagle = true;
}
if (values["enable-hierarchical-cache"]) {
  opts.hicache = {
    ...(values["hicache-ratio"] !== undefined ? { ratio: Number(values["hicache-ratio"]) } : {}),
    ...(values["hicache-load-gbps"] !== undefined ? { loadGBps: Number(values["hicache-load-gbps"]) } : {}),
    ...(values["hicache-storage-backend"] !== undefined ? { storageDir: fileStorageDir(values["hicache-storage-backend"]) } : {}),
  };
}
if (values["sglang-version"] !== undefined) opts.version = values["sglang-version"];
if (values.verbose) opts.verbose = true;
if (values["api-key-file"] !== undefined) opts.apiKey = readFileSync(values["api-key-file"], "utf8").trim();
else if (values["api-key-env"] !== undefined) {
  const key = process.env[values["api-key-env"]];
  if (!key) {
    process.stderr.write(`sglang-sim: --api-key-env: ${values["api-key-env"]} is empty or unset\n`);
    process.exit(2);
  }
  opts.apiKey = key;
}

try {
  const worker = await startSimulatedWorker(opts);
  process.stdout.write(
    JSON.stringify({ ready: true, url: worker.url, kvEndpoint: worker.kvEndpoint, replayEndpoint: worker.replayEndpoint, videoDecoder: worker.videoDecoder }) + "\n",
  );
  if (worker.videoDecoder === "wasm") process.stderr.write("sglang-sim: no native ffprobe found: videos are probed with ffmpeg's wasm build (@ffmpeg/core)\n");
  let stopping = false;
  const stop = (): void => {
    if (stopping) return;
    stopping = true;
    void worker.close().then(() => process.exit(0));
  };
  process.on("SIGINT", stop);
  process.on("SIGTERM", stop);
} catch (err) {
  if (err instanceof ZodError) {
    process.stderr.write(`sglang-sim: bad options: ${err.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}\n`);
  } else {
    process.stderr.write(`sglang-sim: failed to start: ${(err as Error).stack ?? String(err)}\n`);
  }
  process.exit(1);
}
