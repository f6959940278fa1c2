/**
 * What the relay learns from the worker's `GET /server_info` (sgl-project/sglang @9d147fd
 * python/sglang/srt/entrypoints/http_server.py L719-751; its `kv_events` entry comes from
 * python/sglang/srt/server_args.py `describe_kv_events_publisher`, L7577-7664): block size, KV event and replay endpoints, topic, model name, start time;
 * and the `/health` probe.
 */
import { createHash } from "node:crypto";
import { DisaggregationModeSchema, MAX_KV_CAPACITY_TOKENS, type DisaggregationMode } from "../../src/relay-wire/relay-protocol.ts";

export class RelayStartupError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "RelayStartupError";
  }
}

export interface WorkerInfo {
  blockSize: number;
  /** KV event PUB endpoint; null when the relay runs without events (approximate mode). */
  kvEndpoint: string | null;
  /** ROUTER endpoint answering replay requests; null when the worker has none. */
  replayEndpoint: string | null;
  topic: string;
  modelName: string | null;
  /** Worker process start time (ms since epoch) when the worker publishes one. */
  startTimeMs: number | null;
  dpSize: number;
  /**
   * `--incremental-streaming-output` (ServerArgs.incremental_streaming_output): stream frames carry
   * only the new text. The edge must know, or it would take each delta for the text so far.
   */
  incrementalStreaming: boolean;
  /**
   * KV pool size in tokens (`max_total_num_tokens`, from the scheduler's init info that SGLang's
   * /server_info merges in: python/sglang/srt/entrypoints/http_server.py `server_info`,
   * scheduler.py `get_init_info`); null when absent. The index bounds this worker's blocks by it.
   */
  kvCapacityTokens: number | null;
  /** `disaggregation_mode` (server_args.py L2434 @9d147fd): "null" unified, or a PD pool's prefill or decode side. */
  disaggregationMode: DisaggregationMode;
  /** A prefill worker's `disaggregation_bootstrap_port` (L2445; default 8998); null on other roles. */
  bootstrapPort: number | null;
  /**
   * The HiCache storage backend (L3) the worker writes to: `hicache_storage_backend` with a digest of
   * `hicache_storage_backend_extra_config` (server_args.py @9d147fd L2118-2181), so workers naming
   * the same backend and configuration share one; null without `enable_hierarchical_cache` or L3.
   */
  hicacheStorage: string | null;
  /** `language_only` (SGLang's EPD): the worker takes media embeddings from its `--encoder-urls`. */
  languageOnly: boolean;
}

export interface WorkerInfoOverrides {
  /** Expected block size: startup is refused when the worker disagrees. */
  blockSize?: number;
  kvEndpoint?: string;
  /** A string overrides; null disables replay; undefined derives it from kv_events_config. */
  replayEndpoint?: string | null;
  topic?: string;
  /** Which attention-DP rank's publisher to follow (its port is base + rank). */
  dpRank?: number;
  /** "required" (default): no endpoint is a startup error; "off": never follow events; "auto": none is fine. */
  kvEvents?: "required" | "off" | "auto";
}

const WILDCARD_HOSTS = new Set(["*", "0.0.0.0", "::", "[::]", ""]);
/** Start-time fields a worker may publish (SGLang itself has none; the simulator may). */
const START_TIME_KEYS = ["start_time", "server_start_time", "started_at", "startup_time"];

export function parseWorkerInfo(raw: unknown, workerUrl: string, o: WorkerInfoOverrides = {}): WorkerInfo {
  if (!isRecord(raw)) throw new RelayStartupError(`worker ${workerUrl}: /server_info is not a JSON object`);
  const kv = isRecord(raw["kv_events"]) ? raw["kv_events"] : null;
  const kvConfig = parseKvEventsConfig(raw["kv_events_config"]);
  const dpRank = o.dpRank ?? 0;
  const workerHost = new URL(workerUrl).hostname;

  const blockSize = positiveInt(kv?.["block_size"]) ?? positiveInt(raw["page_size"]);
  if (blockSize === null) {
    throw new RelayStartupError(`worker ${workerUrl}: /server_info has neither kv_events.block_size nor page_size`);
  }
  if (o.blockSize !== undefined && o.blockSize !== blockSize) {
    throw new RelayStartupError(
      `worker ${workerUrl} has block size ${blockSize} but --block-size ${o.blockSize} was given; ` +
        `the router must hash prompts at the worker's page size`,
    );
  }

  const mode = o.kvEvents ?? "required";
  let kvEndpoint = mode === "off" ? null : (o.kvEndpoint ?? null);
  if (mode !== "off" && kvEndpoint === null && kv) {
    const base = positiveInt(kv["endpoint_port_base"]) ?? null;
    const host = typeof kv["endpoint_host"] === "string" ? kv["endpoint_host"] : "*";
    if (kv["publisher"] !== undefined && kv["publisher"] !== "zmq") {
      throw new RelayStartupError(`worker ${workerUrl}: KV events publisher ${String(kv["publisher"])} is not zmq`);
    }
    if (base !== null) kvEndpoint = `tcp://${concreteHost(host, workerHost)}:${base + dpRank}`;
  }
  if (kvEndpoint === null && mode === "required") {
    throw new RelayStartupError(
      `worker ${workerUrl}: KV events are not configured (/server_info kv_events is null). Start SGLang with ` +
        `--kv-events-config '{"publisher":"zmq","endpoint":"tcp://*:5557","replay_endpoint":"tcp://*:5558"}' ` +
        `or pass --kv-endpoint; or run the relay with --no-kv-events / --allow-no-kv-events (approximate mode)`,
    );
  }

  let replayEndpoint: string | null = null;
  if (kvEndpoint === null) {
    replayEndpoint = null; // no feed, nothing to replay
  } else if (o.replayEndpoint !== undefined) {
    replayEndpoint = o.replayEndpoint;
  } else if (typeof kvConfig?.["replay_endpoint"] === "string") {
    replayEndpoint = offsetEndpoint(kvConfig["replay_endpoint"], workerHost, dpRank);
  } else if (typeof kv?.["replay_endpoint"] === "string") {
    replayEndpoint = offsetEndpoint(kv["replay_endpoint"], workerHost, dpRank);
  }

  const topic =
    o.topic ?? (typeof kv?.["topic"] === "string" ? kv["topic"] : typeof kvConfig?.["topic"] === "string" ? kvConfig["topic"] : "");
  const served = raw["served_model_name"] ?? raw["model_path"];
  const modelName = typeof served === "string" && served.length > 0 ? served : null;
  const dpSize = positiveInt(kv?.["dp_size"]) ?? positiveInt(raw["dp_size"]) ?? 1;
  const incrementalStreaming = raw["incremental_streaming_output"] === true;
  const capacity = positiveInt(raw["max_total_num_tokens"]);
  const kvCapacityTokens = capacity !== null && capacity <= MAX_KV_CAPACITY_TOKENS ? capacity : null;
  const { disaggregationMode, bootstrapPort } = disaggregationOf(raw, workerUrl);
  return { blockSize, kvEndpoint, replayEndpoint, topic, modelName, startTimeMs: startTimeMs(raw), dpSize, incrementalStreaming, kvCapacityTokens, disaggregationMode, bootstrapPort, hicacheStorage: hicacheStorageOf(raw), languageOnly: raw["language_only"] === true };
}

/** `<backend>` or `<backend>:<sha-256 prefix of its extra config>`; null when no L3 is attached. */
function hicacheStorageOf(raw: Record<string, unknown>): string | null {
  const backend = raw["hicache_storage_backend"];
  if (raw["enable_hierarchical_cache"] !== true || typeof backend !== "string" || !/^[A-Za-z0-9_.-]{1,64}$/.test(backend)) return null;
  const extra = raw["hicache_storage_backend_extra_config"];
  return typeof extra === "string" && extra.length > 0 ? `${backend}:${createHash("sha256").update(extra).digest("hex").slice(0, 32)}` : backend;
}

/** The worker's PD role and, on a prefill, its bootstrap port; an unknown role stops the relay. */
function disaggregationOf(raw: Record<string, unknown>, workerUrl: string): { disaggregationMode: DisaggregationMode; bootstrapPort: number | null } {
  const mode = DisaggregationModeSchema.safeParse(raw["disaggregation_mode"] ?? "null");
  if (!mode.success) throw new RelayStartupError(`worker ${workerUrl}: /server_info disaggregation_mode ${JSON.stringify(raw["disaggregation_mode"])} is none of null, prefill, decode`);
  if (mode.data !== "prefill") return { disaggregationMode: mode.data, bootstrapPort: null };
  const port = positiveInt(raw["disaggregation_bootstrap_port"]);
  if (port === null || port > 65535) throw new RelayStartupError(`worker ${workerUrl}: a prefill worker without a valid disaggregation_bootstrap_port in /server_info`);
  return { disaggregationMode: "prefill", bootstrapPort: port };
}

/** `tcp://*:5558` → `tcp://<worker host>:<5558 + rank>` (SGLang offsets every publisher port by rank). */
export function offsetEndpoint(endpoint: string, workerHost: string, dpRank: number): string {
  const m = /^tcp:\/\/(.*):(\d+)$/.exec(endpoint);
  if (!m) return endpoint;
  return `tcp://${concreteHost(m[1]!, workerHost)}:${Number(m[2]) + dpRank}`;
}

function concreteHost(host: string, workerHost: string): string {
  if (!WILDCARD_HOSTS.has(host)) return host.includes(":") && !host.startsWith("[") ? `[${host}]` : host;
  return workerHost;
}

function parseKvEventsConfig(v: unknown): Record<string, unknown> | null {
  if (isRecord(v)) return v;
  if (typeof v !== "string" || v.length === 0) return null;
  try {
    const parsed: unknown = JSON.parse(v);
    return isRecord(parsed) ? parsed : null;
  } catch {
    return null;
  }
}

function startTimeMs(raw: Record<string, unknown>): number | null {
  for (const k of START_TIME_KEYS) {
    const v = raw[k];
    if (typeof v === "number" && Number.isFinite(v) && v > 0) return Math.floor(v < 1e11 ? v * 1000 : v);
  }
  return null;
}

function positiveInt(v: unknown): number | null {
  return typeof v === "number" && Number.isInteger(v) && v > 0 ? v : null;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/**
 * Epoch of a worker life: its published start time when there is one (stable across relay restarts
 * and health flaps: same start time, same epoch), else the relay's clock; always above `previous`
 * for a new life.
 */
export function nextEpoch(startTimeMs: number | null, previous: number | null): number {
  const candidate = startTimeMs ?? Date.now();
  if (previous === null) return candidate;
  if (startTimeMs !== null && candidate === previous) return previous;
  return candidate > previous ? candidate : previous + 1;
}

/**
 * Headers for the relay's calls to its worker: SGLang's `--api-key` as a bearer (every path but
 * /health* and /metrics* needs it when the worker runs with one; docs/security.md).
 */
export function workerHeaders(apiKey: string | null | undefined): Record<string, string> {
  return apiKey ? { authorization: `Bearer ${apiKey}` } : {};
}

export async function fetchServerInfo(workerUrl: string, timeoutMs: number, apiKey?: string | null): Promise<unknown> {
  const headers = workerHeaders(apiKey);
  let res = await fetch(new URL("/server_info", workerUrl), { headers, signal: AbortSignal.timeout(timeoutMs) });
  if (res.status === 404) {
    await res.body?.cancel();
    res = await fetch(new URL("/get_server_info", workerUrl), { headers, signal: AbortSignal.timeout(timeoutMs) });
  }
  if (!res.ok) {
    await res.body?.cancel();
    throw new Error(`GET /server_info → HTTP ${res.status}${res.status === 401 ? " (the worker runs with --api-key: give the relay its key with --worker-key-env or --worker-key-file)" : ""}`);
  }
  return (await res.json()) as unknown;
}

/** `GET /health` answers 200 (empty body) when the worker serves; anything else counts as down. */
export async function probeHealth(workerUrl: string, timeoutMs: number, cancel?: AbortSignal): Promise<boolean> {
  const timeout = AbortSignal.timeout(timeoutMs);
  try {
    const signal = cancel ? AbortSignal.any([timeout, cancel]) : timeout;
    const res = await fetch(new URL("/health", workerUrl), { signal });
    await res.body?.cancel();
    return res.ok;
  } catch {
    return false;
  }
}
