/**
 * docs/configuration.md is the one place defaults are written down: every table marked
 * `<!-- defaults: <id> -->` is compared, row by row, with the default the code really applies
 * (zod schemas parsed with no input, exported constants). A row whose value differs, a documented
 * field the code lacks, or a code default missing from its table fails the test.
 */
import os from "node:os";
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { LimitsSchema } from "../../../src/api/limits.ts";
import { contextTokensOf, DEFAULT_MODELS, EdgeEnvSchema, ModelConfigSchema, parseEdgeConfig, RateLimitsSchema, RoutingConfigSchema } from "../../../src/config/config.ts";
import { SafeFetchPolicySchema } from "../../../src/media/safe-fetch.ts";
import { DecodeServiceConfigSchema } from "../../../src/media/decode-client.ts";
import { RegionsConfigSchema } from "../../../src/selection/regions.ts";
import { modelParsers } from "../../../src/proxy/chat-output.ts";
import { LoadTracker } from "../../../src/load/load-tracker.ts";
import { ReceiptBook } from "../../../src/routing-index/receipts.ts";
import { DEFAULT_QUARANTINE_MS, DEFAULT_RELAY_SILENT_MS } from "../../../src/routing-index/routing-core.ts";
import { RECENT_KEPT } from "../../../src/metrics/pool-recorder.ts";
import { MAX_ROUTING_TOKENS } from "../../../src/layout/eligibility.ts";
import { MAX_BLOCKS_PER_MESSAGE, MAX_KV_CAPACITY_TOKENS, MAX_RELAY_MESSAGE_BYTES } from "../../../src/relay-wire/relay-protocol.ts";
import { LOGPROB_ENTRY_BYTES, MAX_CUMULATIVE_LOGPROB_BYTES } from "../../../src/proxy/stream-cost.ts";
import { DEFAULT_MEDIA_MEMO_BYTES } from "../../../src/edge/media-memo.ts";
import { DEFAULT_VIEW_HASHES_BYTES } from "../../../src/edge/chat/view-hashes.ts";
import { ROUTED_ITEMS_MAX_BYTES } from "../../../src/edge/chat/routed-items.ts";
import { MAX_HELD_DIGESTS } from "../../../src/media/store-result.ts";
import { MAX_RECEIPT_AGE_MS, MAX_RECEIPT_ID_LENGTH, MAX_RECEIPTS_PER_CALL } from "../../../src/routing-index/receipt-entries.ts";
import { RECEIPT_FLUSH_MS } from "../../../src/edge/chat/receipt-outbox.ts";
import { MAX_CONVERSATION_BYTES, MAX_CONVERSATION_RECORDS, MAX_STORED_RECORD_BYTES, STORED_BYTES_PER_TENANT, STORED_RESPONSE_TTL_MS } from "../../../src/edge/responses/stored-response.ts";
import { RELAY_TOKEN_MAX_SKEW_S } from "../../../src/relay-wire/relay-auth.ts";
import { DEFAULT_INDEX_BYTES } from "../../../src/block-index/block-budget.ts";
import { DEFAULT_MAX_EVENT_CHARS } from "../../../src/proxy/sse.ts";
import { DEFAULT_PREFIX_CACHE_BYTES, DEFAULT_PREFIX_CACHE_TOKENS } from "../../../src/prompt/prefix-cache.ts";
import { DEFAULT_PIECE_CACHE_BYTES, DEFAULT_PIECE_CACHE_ENTRIES, DEFAULT_SEGMENT_CACHE_BYTES, DEFAULT_SEGMENT_CACHE_CHARS } from "../../../src/prompt/tokenizer/index.ts";
import { MEMO_MAX_BYTES } from "../../../src/layout/layout.ts";
import { STAND_IN_MEMO_CHARS } from "../../../src/prompt/turn-chain.ts";
import { MEMO_PARTITIONS, PIECE_MEMO_SLOTS } from "../../../src/prompt/tokenizer/engine.ts";
import { CLIENT_NAME_MEMO_ENTRIES } from "../../../src/edge/client-label.ts";
import { MAX_RATE_LEASE_NAME_CHARS, MAX_RATE_LEASES } from "../../../src/edge/rate-lease.ts";
import { LEASE_BURST_DIVISOR, LEASE_CLOCK_SLACK_MS, LEASE_LEVEL_SHARE, RATE_LEASE_TTL_MS } from "../../../src/util/token-bucket.ts";
import { APPROX_DROP_BATCH, APPROX_PRUNE_STEP, APPROX_REBUILD_MIN, ApproxConfigSchema } from "../../../src/block-index/approx-index.ts";
import { PendingRoutes } from "../../../src/block-index/pending-routes.ts";
import { WALK_MEMO_ADMIT_EVERY, WALK_MEMO_ADMIT_RARE, WALK_MEMO_BLOCKS, WALK_MEMO_ENTRIES, WALK_MEMO_MIN_BLOCKS } from "../../../src/block-index/walk-memo.ts";
import { KV_CAPACITY_HEADROOM } from "../../../src/routing-index/block-shares.ts";
import { MAX_PROBE_PACKETS } from "../../../services/decode/ffprobe-scan.ts";
import { FAILED_PROBE_TTL_MS } from "../../../services/decode/server.ts";
import { MAX_RELAY_KEYS } from "../../../durable-objects/relay-key-store.ts";
import { MAX_PICKED_SCHEMAS } from "../../../src/api/present-keys.ts";
import { RelayOptionsSchema } from "../../../services/relay/options.ts";
import { MAX_SEND_BACKLOG_BYTES } from "../../../services/relay/index-session.ts";
import { DecodeServiceOptionsSchema } from "../../../services/decode/options.ts";
import { LEGACY_VERSION, MM_HASHES_VERSION, parseSimOptions } from "../../../services/sglang-sim/options.ts";

const DOC = join(resolve(import.meta.dirname, "../../.."), "docs/configuration.md");

/** A default the code computes rather than states: the doc cell must mention each of these. */
type Mentions = { mentions: (string | number)[] };
type Expected = unknown | Mentions;
const mentions = (...m: (string | number)[]): Mentions => ({ mentions: m });
const isMentions = (v: unknown): v is Mentions => typeof v === "object" && v !== null && "mentions" in v;

/** Nested plain objects become dotted keys (`authFailures.burst`); empty objects and arrays stay values. */
function flatten(obj: Record<string, unknown>, prefix = ""): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(obj)) {
    if (v !== null && typeof v === "object" && !Array.isArray(v) && Object.keys(v).length > 0) Object.assign(out, flatten(v as Record<string, unknown>, `${prefix}${k}.`));
    else out[`${prefix}${k}`] = v;
  }
  return out;
}

const cfg = parseEdgeConfig({});
const CREDENTIAL = `kvr1.${"k".repeat(22)}.${"0".repeat(64)}`;
const relayRequired = { workerUrl: "http://127.0.0.1:1", indexUrl: "ws://127.0.0.1:2", workerId: "w", credential: CREDENTIAL };
const simDefaults = parseSimOptions({});
const decodeDefaults = DecodeServiceOptionsSchema.parse({ allowNoAuth: false, token: "t".repeat(32) });

/** Each documented table's defaults as the code applies them. `undefined` = no default (doc: unset/required). */
const ACTUAL: Record<string, Record<string, Expected>> = {
  vars: {
    KVEDGE_MODELS: mentions(DEFAULT_MODELS[0]!.id, DEFAULT_MODELS[0]!.family, DEFAULT_MODELS[0]!.templateId, DEFAULT_MODELS[0]!.blockSize),
    KVEDGE_ROUTING: mentions(),
    KVEDGE_LIMITS: mentions(),
    KVEDGE_MEDIA: mentions(),
    KVEDGE_REGIONS: undefined,
    KVEDGE_RATE_LIMIT: cfg.rateLimits === null ? "off" : "on",
    KVEDGE_DECODE_URL: cfg.decode.url,
    KVEDGE_MEDIA_STORE_URL: mentions("KVEDGE_DECODE_URL"),
    KVEDGE_MEDIA_INLINE_MAX_BYTES: cfg.mediaStore.inlineMaxBytes,
    KVEDGE_FORWARD_CLIENT_URLS: cfg.mediaStore.forwardClientUrls,
    KVEDGE_EXACT_MEDIA: cfg.exactMedia ? "on" : "off",
    KVEDGE_ACCESS: cfg.publicAccess ? "public" : "api_keys",
    KVEDGE_DEBUG_HEADERS: cfg.debugHeaders ? "on" : "off",
    KVEDGE_CORS: cfg.cors === null ? "off" : cfg.cors.origins === "*" ? "*" : [...cfg.cors.origins].join(","),
    KVEDGE_KV_SHARING: cfg.kvSharing,
    KVEDGE_SHARDS: cfg.shards,
    KVEDGE_RELAY_ALLOW_HTTP: cfg.relayAllowHttp ? "1" : "0",
    KVEDGE_TURN_CHECK_RATE: cfg.turnCheckRate,
    KVEDGE_WORKER_AUTH: cfg.workerAuth.required ? "required" : "none",
  },
  model: {
    ...ModelConfigSchema.parse({ id: "m", family: "qwen3_vl", templateId: "qwen3vl-instruct" }),
    id: undefined,
    family: undefined,
    templateId: undefined,
    contextTokens: mentions(...(["qwen2_vl", "qwen2_5_vl", "qwen3_vl"] as const).flatMap((family) => [family, contextTokensOf({ ...DEFAULT_MODELS[0]!, family })])),
    toolCallParser: modelParsers({ templateId: "qwen3vl-instruct" }).toolCallParser,
    reasoningParser: mentions(String(modelParsers({ templateId: "qwen3vl-thinking" }).reasoningParser), String(modelParsers({ templateId: "qwen3vl-instruct" }).reasoningParser)),
  },
  routing: { ...flatten(RoutingConfigSchema.parse({})), streamInterval: undefined, "admission.workerTokens": undefined },
  regions: { ...RegionsConfigSchema.parse({}), self: undefined },
  limits: LimitsSchema.parse({}),
  media: SafeFetchPolicySchema.parse({}),
  rateLimit: { ...flatten(RateLimitsSchema.parse({})), inputTokensPerMinute: undefined, outputTokensPerMinute: undefined },
  fixed: {
    "DecodeServiceConfig.timeoutMs": DecodeServiceConfigSchema.parse({}).timeoutMs,
    "mediaStore.urlTtlSec": cfg.mediaStore.urlTtlSec,
    "LoadTracker.staleMs": new LoadTracker().staleMs,
    DEFAULT_QUARANTINE_MS,
    DEFAULT_RELAY_SILENT_MS,
    "ReceiptBook.capacity": new ReceiptBook().capacity,
    "ReceiptBook.alpha": new ReceiptBook().alpha,
    "ReceiptBook.driftThreshold": new ReceiptBook().driftThreshold,
    RECENT_KEPT,
    MAX_ROUTING_TOKENS,
    MAX_RELAY_MESSAGE_BYTES,
    MAX_BLOCKS_PER_MESSAGE,
    MAX_SEND_BACKLOG_BYTES,
    RELAY_TOKEN_MAX_SKEW_S,
    DEFAULT_INDEX_BYTES,
    DEFAULT_MAX_EVENT_CHARS,
    DEFAULT_PREFIX_CACHE_TOKENS,
    DEFAULT_PREFIX_CACHE_BYTES,
    DEFAULT_SEGMENT_CACHE_CHARS,
    DEFAULT_SEGMENT_CACHE_BYTES,
    DEFAULT_PIECE_CACHE_ENTRIES,
    DEFAULT_PIECE_CACHE_BYTES,
    PIECE_MEMO_SLOTS,
    MEMO_PARTITIONS,
    MAX_RATE_LEASES,
    MAX_RATE_LEASE_NAME_CHARS,
    RATE_LEASE_TTL_MS,
    LEASE_CLOCK_SLACK_MS,
    LEASE_BURST_DIVISOR,
    LEASE_LEVEL_SHARE,
    CLIENT_NAME_MEMO_ENTRIES,
    MEMO_MAX_BYTES,
    STAND_IN_MEMO_CHARS,
    MAX_RELAY_KEYS,
    MAX_PICKED_SCHEMAS,
    "PendingRoutes.ttlMs": new PendingRoutes().ttlMs,
    "PendingRoutes.maxPerWorker": new PendingRoutes().maxPerWorker,
    "PendingRoutes.maxBlocks": new PendingRoutes().maxBlocks,
    "PendingRoutes.keyStride": new PendingRoutes().keyStride,
    APPROX_DROP_BATCH,
    APPROX_REBUILD_MIN,
    APPROX_PRUNE_STEP,
    WALK_MEMO_ENTRIES,
    WALK_MEMO_BLOCKS,
    WALK_MEMO_MIN_BLOCKS,
    WALK_MEMO_ADMIT_EVERY,
    WALK_MEMO_ADMIT_RARE,
    KV_CAPACITY_HEADROOM,
    MAX_PROBE_PACKETS,
    FAILED_PROBE_TTL_MS,
    MAX_CUMULATIVE_LOGPROB_BYTES,
    LOGPROB_ENTRY_BYTES,
    MAX_KV_CAPACITY_TOKENS,
    STORED_RESPONSE_TTL_MS,
    STORED_BYTES_PER_TENANT,
    MAX_STORED_RECORD_BYTES,
    MAX_CONVERSATION_RECORDS,
    MAX_CONVERSATION_BYTES,
    DEFAULT_MEDIA_MEMO_BYTES,
    ROUTED_ITEMS_MAX_BYTES,
    DEFAULT_VIEW_HASHES_BYTES,
    MAX_HELD_DIGESTS,
    RECEIPT_FLUSH_MS,
    MAX_RECEIPTS_PER_CALL,
    MAX_RECEIPT_AGE_MS,
    MAX_RECEIPT_ID_LENGTH,
  },
  approx: ApproxConfigSchema.parse({}),
  relay: {
    ...RelayOptionsSchema.parse(relayRequired),
    workerUrl: undefined,
    indexUrl: undefined,
    workerId: undefined,
    credential: undefined,
    workerApiKey: undefined,
    advertiseUrl: mentions("workerUrl"),
    model: mentions("served_model_name"),
    blockSize: undefined,
    kvEndpoint: mentions("/server_info"),
    replayEndpoint: mentions("/server_info"),
    topic: mentions("/server_info"),
    region: undefined,
    prefillTokensPerSec: undefined,
    modelDir: undefined,
    stateFile: undefined,
  },
  decode: {
    ...flatten(decodeDefaults),
    token: DecodeServiceOptionsSchema.parse({ allowNoAuth: true }).token,
    concurrency: decodeDefaults.concurrency === os.availableParallelism() ? mentions("cores") : decodeDefaults.concurrency,
    tmpDir: decodeDefaults.tmpDir === os.tmpdir() ? mentions("temp") : decodeDefaults.tmpDir,
    // Nested defaults of null stay visible as their own rows.
    "store.dir": decodeDefaults.store.dir,
    "store.urlKey": decodeDefaults.store.urlKey,
  },
  sim: {
    ...flatten(simDefaults as unknown as Record<string, unknown>),
    version: mentions(MM_HASHES_VERSION, LEGACY_VERSION),
    servedModelName: undefined,
    modelDir: mentions("test/fixtures/models/<family>"),
  },
};

interface Row { name: string; cell: string; line: number }

/** Rows of every `<!-- defaults: id -->` table; a first-column cell may name several fields (`a`, `b`). */
function documentedTables(text: string): Map<string, Row[]> {
  const lines = text.split("\n");
  const tables = new Map<string, Row[]>();
  for (let i = 0; i < lines.length; i++) {
    const m = /^<!-- defaults: ([A-Za-z]+) -->$/.exec(lines[i]!);
    if (!m) continue;
    const header = lines[i + 1]!.split("|").map((c) => c.trim());
    const col = header.indexOf("default") >= 0 ? header.indexOf("default") : header.indexOf("value");
    if (col < 0) throw new Error(`table ${m[1]} (line ${i + 2}) has no default/value column`);
    const rows: Row[] = [];
    for (let j = i + 3; j < lines.length && lines[j]!.startsWith("|"); j++) {
      const cells = lines[j]!.split("|").map((c) => c.trim());
      for (const n of cells[1]!.matchAll(/`([^`]+)`/g)) rows.push({ name: n[1]!, cell: cells[col]!, line: j + 1 });
    }
    tables.set(m[1]!, rows);
  }
  return tables;
}

const UNIT: Record<string, number> = { B: 1, KiB: 1024, MiB: 1024 ** 2, GiB: 1024 ** 3, ms: 1, s: 1000, min: 60_000, h: 3_600_000 };
const TIME_UNITS = new Set(["ms", "s", "min", "h"]);

/** A documented literal: `code` (JSON or bare text), a number with optional unit, or undefined for unset/required. */
function docValue(name: string, cell: string): unknown {
  if (/^(unset|required|—)/.test(cell)) return undefined;
  const code = /^`([^`]*)`$/.exec(cell);
  if (code) {
    try {
      return JSON.parse(code[1]!) as unknown;
    } catch {
      return code[1];
    }
  }
  const num = /^(-?[\d][\d ,.]*?)\s*(B|KiB|MiB|GiB|ms|s|min|h)?$/.exec(cell);
  if (num) {
    const n = Number(num[1]!.replace(/[ ,]/g, ""));
    const unit = num[2];
    if (!unit) return n;
    // Times are written for people; the field's own unit is in its name (…Ms, …Sec, …_S, else ms).
    if (TIME_UNITS.has(unit) && /(Sec|_S)$/.test(name)) return (n * UNIT[unit]!) / 1000;
    return n * UNIT[unit]!;
  }
  return { unparsed: cell };
}

const digitsOnly = (s: string) => s.replace(/(\d)[ ,](?=\d{3}\b)/g, "$1");

describe("docs/configuration.md defaults match the code", () => {
  const tables = documentedTables(readFileSync(DOC, "utf8"));

  it("documents every table the code has defaults for", () => {
    expect([...tables.keys()].sort()).toEqual(Object.keys(ACTUAL).sort());
  });

  for (const [id, actual] of Object.entries(ACTUAL)) {
    it(`${id}: every documented default equals the code's, and every code default is documented`, () => {
      const rows = tables.get(id) ?? [];
      const problems: string[] = [];
      const seen = new Set<string>();
      for (const { name, cell, line } of rows) {
        seen.add(name);
        if (!(name in actual)) {
          problems.push(`line ${line}: \`${name}\` is documented but the code has no such default`);
          continue;
        }
        const want = actual[name];
        if (isMentions(want)) {
          for (const m of want.mentions) if (!digitsOnly(cell).includes(String(m))) problems.push(`line ${line}: \`${name}\` should mention ${String(m)} (the code's default), doc says "${cell}"`);
          continue;
        }
        const got = docValue(name, cell);
        if (JSON.stringify(got) !== JSON.stringify(want) && String(got) !== String(want)) {
          problems.push(`line ${line}: \`${name}\` is documented as "${cell}" (${JSON.stringify(got)}), the code's default is ${JSON.stringify(want)}`);
        }
      }
      for (const name of Object.keys(actual)) if (!seen.has(name)) problems.push(`\`${name}\` (default ${JSON.stringify(actual[name])}) is missing from the ${id} table`);
      expect(problems).toEqual([]);
    });
  }

  it("every var and secret the edge reads is on the page", () => {
    const text = readFileSync(DOC, "utf8");
    const firstColumns = text.split("\n").filter((l) => l.startsWith("| ")).map((l) => l.split("|")[1]!);
    const missing = Object.keys(EdgeEnvSchema.shape).filter((v) => !firstColumns.some((c) => c.includes(`\`${v}\``)));
    expect(missing).toEqual([]);
  });
});
