/**
 * The simulator's HTTP surface (node:http): SGLang's routes plus the debug route `/debug/cache`.
 * Info payloads follow sgl-project/sglang python/sglang/srt/entrypoints/http_server.py @9d147fd
 * (`/health*` L602-676, `/model_info` L679-706, `/server_info` L719-751).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { SimScheduler } from "./dp-engines.ts";
import type { PagedRadixCache } from "./radix-cache.ts";
import { handleGenerate, newRid, type GenerateContext } from "./generate.ts";
import type { PdSide } from "./pd-generate.ts";
import { parseGenerateJson } from "./disaggregation.ts";
import { handleEncode, type EncoderCache } from "./encoder.ts";
import type { MediaLoader } from "./media-fetch.ts";
import { handleChatCompletions, type OpenAIContext } from "./openai.ts";
import type { SimOptions } from "./options.ts";
import { SglangInternalError, SglangValueError, validationErrorBody } from "./sglang-errors.ts";
import { recentlyLoadedMedia } from "./media-fetch.ts";
import type { Timing } from "./timing.ts";
import { authorized } from "./http-auth.ts";

const MAX_BODY_BYTES = 64 * 1024 * 1024;

export interface KvEndpointInfo {
  /** Host the sockets bound to; "*" when bound to all interfaces. */
  host: string;
  port: number;
  replayPort: number;
}

export interface HttpServerDeps {
  opts: SimOptions;
  timing: Timing;
  engine: SimScheduler;
  /** Every DP rank's radix cache, rank r at index r (/debug/cache?rank=r). */
  rankCaches?: readonly PagedRadixCache[];
  openai: OpenAIContext;
  kv: KvEndpointInfo | null;
  /** The model directory the media contract was derived from. */
  modelDir: string;
  /** The worker's side of a PD pool (pd-generate.ts); null for a unified worker. */
  pd?: PdSide | null;
  /** An encoder-only server's cache and media loader (encoder.ts); null otherwise. */
  encoder?: { cache: EncoderCache; loader: MediaLoader; useCache: boolean } | null;
  maxReqInputLen: number;
  /** False while shutting down: health endpoints answer 503. */
  isServing: () => boolean;
}

export const MODEL_INFO_BY_FAMILY = {
  qwen2_vl: { model_type: "qwen2_vl", architectures: ["Qwen2VLForConditionalGeneration"] },
  qwen2_5_vl: { model_type: "qwen2_5_vl", architectures: ["Qwen2_5_VLForConditionalGeneration"] },
  qwen3_vl: { model_type: "qwen3_vl", architectures: ["Qwen3VLForConditionalGeneration"] },
} as const;

class BodyTooLarge extends Error {}

function readBody(req: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on("data", (c: Buffer) => {
      size += c.length;
      if (size > MAX_BODY_BYTES) {
        reject(new BodyTooLarge());
        req.destroy();
        return;
      }
      chunks.push(c);
    });
    req.on("end", () => resolve(Buffer.concat(chunks)));
    req.on("error", reject);
  });
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const data = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(data) });
  res.end(data);
}

function sendText(res: ServerResponse, status: number, text: string): void {
  res.writeHead(status, { "content-type": "text/plain; charset=utf-8", "content-length": Buffer.byteLength(text) });
  res.end(text);
}

function sendEmpty(res: ServerResponse, status: number): void {
  res.writeHead(status, { "content-length": 0 });
  res.end();
}

async function readJson(req: IncomingMessage, res: ServerResponse, parse: (text: string) => unknown = JSON.parse): Promise<{ ok: true; value: unknown } | { ok: false }> {
  let buf: Buffer;
  try {
    buf = await readBody(req);
  } catch (err) {
    if (err instanceof BodyTooLarge) sendJson(res, 413, validationErrorBody("Request body too large"));
    return { ok: false };
  }
  try {
    return { ok: true, value: parse(buf.toString("utf8")) };
  } catch (err) {
    sendJson(res, 400, validationErrorBody(`JSON decode error: ${(err as Error).message}`));
    return { ok: false };
  }
}

export function serverInfo(d: HttpServerDeps): Record<string, unknown> {
  const o = d.opts;
  const kvConfig = d.kv
    ? {
        publisher: "zmq",
        endpoint: `tcp://${d.kv.host}:${d.kv.port}`,
        replay_endpoint: `tcp://${d.kv.host}:${d.kv.replayPort}`,
        buffer_steps: o.bufferSteps,
        hwm: o.hwm,
        max_queue_size: 100_000,
        topic: o.topic,
      }
    : null;
  const args = {
    model_path: o.modelName,
    tokenizer_path: o.modelName,
    served_model_name: o.servedModelName ?? o.modelName,
    host: o.host,
    context_length: null,
    page_size: o.pageSize,
    // HiCache (server_args.py @9d147fd L2118-2181); the simulator has no L3 storage backend.
    enable_hierarchical_cache: o.hicache !== null,
    hicache_ratio: o.hicache?.ratio ?? 2.0,
    hicache_size: 0,
    hicache_write_policy: "write_through",
    hicache_storage_backend: o.hicache?.storageDir ? "file" : null,
    hicache_storage_backend_extra_config: null,
    dp_size: o.dpSize,
    enable_dp_attention: o.enableDpAttention,
    // `auto` resolves to follow_bootstrap_room on a PD prefill, round_robin elsewhere (server_args.py L3086-3101 @9d147fd).
    load_balance_method: o.disaggregationMode === "prefill" ? "follow_bootstrap_room" : "round_robin",
    tp_size: 1,
    kv_events_config: kvConfig ? JSON.stringify(kvConfig) : null,
    disaggregation_mode: o.disaggregationMode,
    // EPD (server_args.py L2481-2510 @9d147fd): an encoder-only server, or a language-only one and its encoders.
    encoder_only: o.encoderOnly,
    language_only: o.languageOnly,
    encoder_urls: o.encoderUrls,
    encoder_transfer_backend: o.encoderTransferBackend,
    enable_prefix_mm_cache: o.enablePrefixMmCache,
    // The KV moves by no real transfer engine here: SGLang's "fake" backend is the nearest name.
    disaggregation_transfer_backend: o.disaggregationMode === "null" ? "mooncake" : "fake",
    disaggregation_bootstrap_port: d.pd?.bootstrapPort ?? 8998,
    incremental_streaming_output: o.incrementalStreamingOutput,
    stream_interval: o.streamInterval,
    stream_response_default_include_usage: false,
    enable_cache_report: o.enableCacheReport,
    skip_tokenizer_init: false,
    chat_template: null,
    default_chat_template_kwargs: null,
    reasoning_parser: null,
    tool_call_parser: null,
    sampling_defaults: "model",
    preferred_sampling_params: null,
    allow_auto_truncate: false,
    disable_radix_cache: false,
    enable_deterministic_inference: false,
    weight_version: "default",
    // `--mm-process-config`: the simulator runs SGLang's defaults (no video/image overrides).
    mm_process_config: null,
  };
  return {
    ...args,
    status: "ready",
    max_total_num_tokens: o.capacityTokens,
    max_req_input_len: d.maxReqInputLen,
    // One entry per DP rank (http_server.py L729-751 @9d147fd).
    internal_states: Array.from({ length: o.dpSize }, () => ({
      ...args,
      last_gen_throughput: d.engine.throughput / o.dpSize,
      memory_usage: { weight: 0, kvcache: 0, token_capacity: o.capacityTokens, graph: 0 },
      effective_max_running_requests_per_dp: 4096,
    })),
    version: o.version,
    kv_events: d.kv
      ? {
          publisher: "zmq",
          endpoint_host: d.kv.host,
          endpoint_port_base: d.kv.port,
          topic: o.topic,
          block_size: o.pageSize,
          dp_size: o.dpSize,
        }
      : null,
    // Not in SGLang: lets tools tell a simulator from a real worker and read its cost model.
    simulator: { timing: d.timing, family: o.family, template: o.template, model_dir: d.modelDir, accepts_mm_hashes: o.acceptsMmHashes },
  };
}

/** The last /generate bodies' routing-relevant fields (debug only; bounded). */
const recentRequests: {
  rid: string | null;
  mmHashes: unknown;
  images: number;
  videos: number;
  /** Output controls the router forwarded (constrained decoding, logprobs, reasoning count). */
  jsonSchema: unknown;
  returnLogprob: unknown;
  requireReasoning: unknown;
  /** The W3C `traceparent` header the request came with (SGLang with --enable-trace parents its spans on it). */
  traceparent: string | null;
}[] = [];
function recordRequest(body: unknown, traceparent: string | undefined): void {
  const b = (body ?? {}) as { rid?: unknown; mm_hashes?: unknown; image_data?: unknown; video_data?: unknown; sampling_params?: { json_schema?: unknown }; return_logprob?: unknown; require_reasoning?: unknown };
  const count = (v: unknown) => (Array.isArray(v) ? v.length : v ? 1 : 0);
  recentRequests.push({
    rid: typeof b.rid === "string" ? b.rid : null,
    mmHashes: b.mm_hashes ?? null,
    images: count(b.image_data),
    videos: count(b.video_data),
    jsonSchema: b.sampling_params?.json_schema ?? null,
    returnLogprob: b.return_logprob ?? null,
    requireReasoning: b.require_reasoning ?? null,
    traceparent: traceparent ?? null,
  });
  if (recentRequests.length > 256) recentRequests.shift();
}

export function createHttpServer(d: HttpServerDeps): Server {
  const gen: GenerateContext = d.openai;
  const server = createServer((req, res) => {
    void route(req, res, d, gen).catch((err: unknown) => {
      process.stderr.write(`sglang-sim: internal error: ${(err as Error)?.stack ?? String(err)}\n`);
      if (!res.headersSent) sendText(res, 500, "Internal Server Error");
      else res.destroy();
    });
  });
  server.keepAliveTimeout = 5_000;
  return server;
}

async function route(req: IncomingMessage, res: ServerResponse, d: HttpServerDeps, gen: GenerateContext): Promise<void> {
  const url = new URL(req.url ?? "/", "http://sim");
  const path = url.pathname;
  const method = req.method ?? "GET";
  if (!authorized(d.opts.apiKey, method, path, req.headers.authorization)) {
    req.resume();
    return sendJson(res, 401, { error: "Unauthorized" });
  }

  if (d.encoder) {
    // An encoder-only server serves /encode, not generation (SGLang runs it as its own app: encode_server.py).
    if (path === "/encode" && method === "POST") {
      const body = await readJson(req, res);
      if (!body.ok) return;
      try {
        return sendJson(res, 200, await handleEncode(body.value, d.encoder));
      } catch (err) {
        if (err instanceof SglangValueError) return sendJson(res, 400, { message: err.message });
        if (err instanceof SglangInternalError) return sendJson(res, 500, { message: err.message });
        throw err;
      }
    }
    // Not in SGLang: the encoder cache's hit counters, for tests.
    if (path === "/sim/encoder" && method === "GET") return sendJson(res, 200, d.encoder.cache.stats());
    if (path === "/generate" || path === "/v1/chat/completions") return sendJson(res, 404, { detail: "Not Found" });
  }
  if (path === "/generate" && (method === "POST" || method === "PUT")) {
    // A PD side reads the bootstrap room exactly (rooms pass 2^53; the DP rank follows room % dp_size).
    const body = await readJson(req, res, d.pd ? parseGenerateJson : undefined);
    if (body.ok) {
      recordRequest(body.value, req.headers.traceparent?.toString());
      if (d.pd && !(await d.pd.beforeGenerate(body.value, res))) return;
      await handleGenerate(res, body.value, gen);
    }
    return;
  }
  if (path === "/v1/chat/completions" && method === "POST") {
    const body = await readJson(req, res);
    if (body.ok) await handleChatCompletions(res, body.value, d.openai);
    return;
  }
  if ((path === "/server_info" || path === "/get_server_info") && method === "GET") return sendJson(res, 200, serverInfo(d));
  if ((path === "/model_info" || path === "/get_model_info") && method === "GET") {
    const o = d.opts;
    return sendJson(res, 200, {
      model_path: o.modelName,
      tokenizer_path: o.modelName,
      is_generation: true,
      preferred_sampling_params: null,
      weight_version: "default",
      has_image_understanding: true,
      has_audio_understanding: false,
      ...MODEL_INFO_BY_FAMILY[o.family],
    });
  }
  if (path === "/v1/models" && method === "GET") {
    const name = d.opts.servedModelName ?? d.opts.modelName;
    return sendJson(res, 200, {
      object: "list",
      data: [{ id: name, object: "model", created: Math.floor(Date.now() / 1000), owned_by: "sglang", root: name, max_model_len: d.opts.contextLength }],
    });
  }
  if (path === "/health" && method === "GET") return sendEmpty(res, d.isServing() ? 200 : 503);
  if (path === "/health_generate" && method === "GET") {
    if (!d.isServing()) return sendEmpty(res, 503);
    // The probe SGLang submits: input_ids=[0], max_new_tokens=1, greedy.
    const rid = `HEALTH_CHECK_${newRid()}`;
    await d.engine.submit({
      rid,
      inputIds: [0],
      sampling: {
        maxNewTokens: 1,
        minNewTokens: 0,
        temperature: 1,
        topP: 1,
        topK: 1,
        minP: 0,
        stop: [],
        stopTokenIds: [],
        ignoreEos: false,
        noStopTrim: false,
        skipSpecialTokens: true,
        samplingSeed: null,
        streamInterval: null,
        n: 1,
      },
    });
    return sendEmpty(res, d.isServing() ? 200 : 503);
  }
  if (path === "/flush_cache" && (method === "POST" || method === "GET")) {
    const timeoutS = Number(url.searchParams.get("timeout") ?? "0");
    const deadline = performance.now() + (Number.isFinite(timeoutS) ? Math.max(0, timeoutS) : 0) * 1000;
    while (!d.engine.idle && performance.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    if (timeoutS > 0 && !d.engine.idle) return sendText(res, 400, "Timed out waiting for idle state.\n");
    if (!d.engine.flushCache()) return sendText(res, 400, "Flush cache failed.\n");
    return sendText(
      res,
      200,
      "Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n",
    );
  }
  if (path === "/abort_request" && method === "POST") {
    const body = await readJson(req, res);
    if (!body.ok) return;
    const b = (body.value ?? {}) as { rid?: unknown; abort_all?: unknown };
    d.engine.abort(typeof b.rid === "string" ? b.rid : "", b.abort_all === true);
    return sendEmpty(res, 200);
  }
  if (path === "/debug/requests" && method === "GET") {
    // Not SGLang: what callers sent, so tests can check e.g. that mm_hashes were (not) forwarded.
    return sendJson(res, 200, { requests: recentRequests });
  }
  if (path === "/debug/media" && method === "GET") {
    // Not SGLang: the SHA-256 of every media item this worker processed (tests compare with the edge's).
    return sendJson(res, 200, { media: recentlyLoadedMedia() });
  }
  if (path === "/debug/cache" && method === "GET") {
    // `?rank=r`: DP rank r's radix cache (dp-engines.ts); default rank 0.
    const rank = Number(url.searchParams.get("rank") ?? "0");
    const c = d.rankCaches?.[rank] ?? (rank === 0 ? d.engine.cache : null);
    if (c === null) return sendJson(res, 404, { detail: `no DP rank ${url.searchParams.get("rank")}` });
    return sendJson(res, 200, {
      page_size: c.pageSize,
      total_tokens: c.totalTokens,
      protected_tokens: c.protectedTokens,
      running: d.engine.runningCount,
      waiting: d.engine.waitingCount,
      blocks: c.dump().map((b) => ({ hash: b.hash.toString(), parent: b.parent === null ? null : b.parent.toString(), tokens: b.tokens, ...(b.pairs ? { pairs: b.pairs } : {}), ...(b.cacheSalt ? { cacheSalt: b.cacheSalt } : {}) })),
    });
  }
  sendJson(res, 404, { detail: "Not Found" });
}
