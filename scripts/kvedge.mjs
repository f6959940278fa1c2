#!/usr/bin/env node
/**
 * kvedge operator CLI. Talks to a deployed (or local) edge over HTTP with the admin token; plain
 * JavaScript with no imports beyond Node built-ins, so `npx kvedge` runs on any Node ≥ 20.
 *
 *   npx kvedge status                      pools: workers up, index size, hit rate, requests, cohort
 *   npx kvedge workers [--model M]         one pool's workers: state, blocks, load, contract
 *   npx kvedge explain request.json        how the edge would route this chat request (nothing sent)
 *   npx kvedge explain --tokens req.json   the same, plus the whole routed id sequence, media spans and block hashes
 *   npx kvedge explain --as-tenant req.json  as the tenant of KVEDGE_API_KEY (its own cache namespace)
 *   npx kvedge explain --as-client 203.0.113.7 req.json  as a keyless caller from that address (its network's namespace)
 *   npx kvedge replay trace.jsonl          send a JSONL trace of chat requests; hit rate, latency
 *   npx kvedge relay-key issue|list|revoke per-worker relay credentials (docs/relay.md §Credentials)
 *
 * Connection: --url / KVEDGE_URL (default http://127.0.0.1:8787); secrets from the environment only
 * (a command line is readable by every local user): KVEDGE_ADMIN_TOKEN, and KVEDGE_API_KEY (client
 * key for replay, when the edge requires one). --json prints
 * the raw JSON instead of text.
 */
import { readFileSync, realpathSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

export const USAGE = `usage: kvedge <command> [options]
commands:
  status                         pools: workers up, index blocks, hit rate, requests, cohort state
  workers [--model M]            workers of one pool (default: the first configured model)
  explain <request.json>         token view, blocks, eligibility and the worker the edge would pick
          [--tokens]             also the whole routed id sequence, each media item's span and pad value, every block hash
          [--as-tenant]          route in the cache namespace of the KVEDGE_API_KEY tenant
          [--as-client IP]       route as a keyless caller from IP (its /64 or /32 namespace)
  replay <trace.jsonl>           replay chat requests through the edge; prints hit rate and latency
         [--concurrency N] [--limit N]
  relay-key issue --worker ID --worker-url URL [--model M] [--out FILE]
          [--dp-size N]          the worker's attention-DP ranks the key may connect (default 1)
          [--storage-group G]    share HiCache storage views with the keys of group G (default: its own)
                                 issue a relay credential bound to one worker and its URL; printed
                                 on stdout, or written to FILE (mode 0600) with --out; the worker's
                                 SGLang --api-key (edge with KVEDGE_WORKER_KEY_SECRET) is in --json,
                                 or written to FILE.worker-api-key
  relay-key list [--model M]     the pool's relay keys (ids, bindings, revoked; no key material)
  relay-key revoke <keyId> [--model M]
                                 revoke a key; relays connected with it are disconnected
options:
  --url URL        edge base URL (env KVEDGE_URL, default http://127.0.0.1:8787)
  env KVEDGE_ADMIN_TOKEN   admin token (never a flag: command lines are visible to other users)
  env KVEDGE_API_KEY       client API key for replay and explain --as-tenant
  --json           print JSON instead of text
  -h, --help`;

export class UsageError extends Error {}

/** argv (after the script) + env → a command. Throws UsageError on bad input. */
export function parseCli(argv, env = {}) {
  const opts = {
    command: null,
    file: null,
    url: env.KVEDGE_URL || "http://127.0.0.1:8787",
    token: env.KVEDGE_ADMIN_TOKEN || null,
    apiKey: env.KVEDGE_API_KEY || null,
    model: null,
    json: false,
    tokens: false,
    asTenant: false,
    asClient: null,
    concurrency: 1,
    limit: Infinity,
    help: false,
    sub: null,
    keyId: null,
    worker: null,
    workerUrl: null,
    out: null,
    dpSize: null,
    storageGroup: null,
  };
  const positional = [];
  // A key id is base64url and may start with "-": in the key id's place it is the key id, not an option.
  const keyIdPlace = () => positional.length === 2 && positional[0] === "relay-key" && positional[1] === "revoke";
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const value = () => {
      const v = argv[++i];
      if (v === undefined) throw new UsageError(`${a} needs a value`);
      return v;
    };
    const intValue = () => {
      const v = Number(value());
      if (!Number.isInteger(v) || v < 1) throw new UsageError(`${a} must be a positive integer`);
      return v;
    };
    if (a === "--") {
      positional.push(...argv.slice(i + 1));
      break;
    } else if (keyIdPlace() && /^[A-Za-z0-9_-]{22}$/.test(a)) positional.push(a);
    else if (a === "-h" || a === "--help") opts.help = true;
    else if (a === "--url") opts.url = value();
    else if (a === "--token" || a === "--api-key") throw new UsageError(`${a} is not accepted (a command line is visible to other local users): set ${a === "--token" ? "KVEDGE_ADMIN_TOKEN" : "KVEDGE_API_KEY"} in the environment`);
    else if (a === "--model") opts.model = value();
    else if (a === "--json") opts.json = true;
    else if (a === "--tokens") opts.tokens = true;
    else if (a === "--as-tenant") opts.asTenant = true;
    else if (a === "--as-client") opts.asClient = value();
    else if (a === "--concurrency") opts.concurrency = intValue();
    else if (a === "--limit") opts.limit = intValue();
    else if (a === "--worker") opts.worker = value();
    else if (a === "--worker-url") opts.workerUrl = value();
    else if (a === "--out") opts.out = value();
    else if (a === "--dp-size") opts.dpSize = intValue();
    else if (a === "--storage-group") opts.storageGroup = value();
    else if (a.startsWith("-")) throw new UsageError(`unknown option ${a}`);
    else positional.push(a);
  }
  if (opts.help) return opts;
  opts.command = positional[0] ?? null;
  if (!["status", "workers", "explain", "replay", "relay-key"].includes(opts.command ?? "")) throw new UsageError(opts.command ? `unknown command ${opts.command}` : "missing command");
  if (opts.tokens && opts.command !== "explain") throw new UsageError("--tokens is an explain option");
  if (opts.asTenant && opts.command !== "explain") throw new UsageError("--as-tenant is an explain option");
  if (opts.asTenant && !opts.apiKey) throw new UsageError("--as-tenant needs the tenant's key in KVEDGE_API_KEY");
  if (opts.asClient !== null && opts.command !== "explain") throw new UsageError("--as-client is an explain option");
  if (opts.asClient !== null && opts.asTenant) throw new UsageError("--as-client and --as-tenant name different callers: give one");
  if (opts.command === "relay-key") {
    opts.sub = positional[1] ?? null;
    if (!["issue", "list", "revoke"].includes(opts.sub ?? "")) throw new UsageError("relay-key needs issue, list or revoke");
    if (opts.sub === "issue" && (!opts.worker || !opts.workerUrl)) throw new UsageError("relay-key issue needs --worker and --worker-url");
    if (opts.sub === "revoke") {
      opts.keyId = positional[2] ?? null;
      if (!opts.keyId || !/^[A-Za-z0-9_-]{22}$/.test(opts.keyId)) throw new UsageError("relay-key revoke needs a key id");
    }
    if (positional.length > (opts.sub === "revoke" ? 3 : 2)) throw new UsageError("too many arguments");
  } else if (opts.command === "explain" || opts.command === "replay") {
    opts.file = positional[1] ?? null;
    if (!opts.file) throw new UsageError(`${opts.command} needs a file`);
    if (positional.length > 2) throw new UsageError("too many arguments");
  } else if (positional.length > 1) throw new UsageError("too many arguments");
  try {
    opts.url = new URL(opts.url).toString().replace(/\/+$/, "");
  } catch {
    throw new UsageError(`bad --url ${opts.url}`);
  }
  if (opts.command !== "replay" && !opts.token) throw new UsageError("admin token missing: set KVEDGE_ADMIN_TOKEN");
  return opts;
}

// ---- formatting helpers ----

const pct = (x) => (x === null || x === undefined || Number.isNaN(x) ? "–" : `${(x * 100).toFixed(1)}%`);
const fmtMs = (x) => (x === null || x === undefined ? "–" : `${x.toFixed(x < 10 ? 2 : 0)} ms`);

export function table(headers, rows) {
  const all = [headers, ...rows.map((r) => r.map((c) => String(c)))];
  const widths = headers.map((_, i) => Math.max(...all.map((r) => r[i].length)));
  return all.map((r) => r.map((c, i) => c.padEnd(widths[i])).join("  ").trimEnd()).join("\n");
}

function receiptTotals(snapshot) {
  const t = { ok: 0, error: 0, unreported: 0, promptTokens: 0, predictedCachedTokens: 0, actualCachedTokens: 0 };
  for (const r of Object.values(snapshot.recorder.receipts)) for (const k of Object.keys(t)) t[k] += r[k];
  return t;
}

export function formatStatus(overview, url) {
  const lines = [`edge ${url}: ${overview.models.length} pool(s)`];
  for (const p of overview.models) {
    if (!p.snapshot) {
      lines.push(`\n${p.model}: index did not answer`);
      continue;
    }
    const s = p.snapshot;
    const t = receiptTotals(s);
    const up = s.workers.filter((w) => w.status === "up").length;
    const rq = s.recorder.requests;
    lines.push(
      "",
      p.model,
      `  workers      ${up}/${s.workers.length} up, block size ${s.blockSize ?? "?"}${s.blockSize !== null && s.blockSize !== p.configuredBlockSize ? ` (config says ${p.configuredBlockSize}!)` : ""}`,
      `  index        ${s.indexedBlocks} blocks, ${s.activeRequests} active requests`,
      `  hit rate     ${pct(p.hitRate)} actual, ${t.promptTokens ? pct(t.predictedCachedTokens / t.promptTokens) : "–"} predicted (${t.actualCachedTokens}/${t.promptTokens} tokens${t.unreported ? `, ${t.unreported} receipts without cache report` : ""})`,
      `  requests     ok ${rq.ok}, error ${rq.error}, no worker ${rq.no_worker}, retries ${s.recorder.retries}`,
      `  cohort       ${p.cohort.state}${p.cohort.exactMedia ? " (exact media routing on)" : " (exact media routing off)"}`,
      `  events       applied ${s.counters.eventsApplied}, dropped ${s.counters.eventsDropped}, gaps ${s.counters.dropReasons.parent_not_found ?? 0}, dumps ${s.counters.dumps}`,
    );
    const fb = Object.entries(s.recorder.fallbacks);
    if (fb.length) lines.push(`  fallbacks    ${fb.map(([k, v]) => `${k} ${v}`).join(", ")}`);
  }
  return lines.join("\n");
}

export function formatWorkers(model, workers) {
  if (!workers.length) return `${model}: no workers registered`;
  return (
    `${model}\n` +
    table(
      ["worker", "state", "synced", "blocks", "active", "prefill_tok", "decode_blk", "events", "contract", "url"],
      workers.map((w) => [
        w.workerId,
        w.status,
        w.synced ? "yes" : "no",
        // Sharded pools: the split over the shard objects too.
        Array.isArray(w.blocksPerShard) ? `${w.blocks} (${w.blocksPerShard.join("/")})` : w.blocks,
        w.activeRequests,
        w.activePrefillTokens,
        w.activeDecodeBlocks,
        // "approx!" = events, but the index's view may be wrong (relay lost history / index full).
        !w.kvEvents ? "approx" : w.approximate ? "approx!" : "yes",
        w.contractDigest ? w.contractDigest.slice(0, 12) : "none",
        w.url,
      ]),
    )
  );
}

/** Token pieces as one escaped line: `<|im_start|>user\nHello`. */
export function renderTokens(list) {
  return list.map((t) => JSON.stringify(t.text).slice(1, -1)).join("");
}

export function formatExplain(e) {
  const d = e.decision;
  const lines = [
    `model        ${e.model}`,
    `routing      ${e.routing}${e.fallbackReason ? ` (fallback: ${e.fallbackReason})` : ""}`,
    `eligibility  ${e.eligibility}`,
    `media        ${e.prompt.mediaItems.length ? e.prompt.mediaItems.join(", ") : "none"}`,
    `namespace    ${namespaceLine(e.namespace)}`,
    `tokens       ${e.tokens.count} in the prompt, ${e.tokens.routed} routed`,
    `  first      ${renderTokens(e.tokens.head)}`,
  ];
  if (e.tokens.tail.length) lines.push(`  last       …${renderTokens(e.tokens.tail)}`);
  lines.push(
    `blocks       ${e.blocks.total} × ${e.blocks.blockSize} tokens${e.blocks.partialTailTokens ? ` (+${e.blocks.partialTailTokens} tail tokens not hashed)` : ""}`,
  );
  if (e.blocks.first.length) lines.push(`  hashes     ${e.blocks.first.join(" ")}${e.blocks.last.length ? ` … ${e.blocks.last.join(" ")}` : ""}`);
  lines.push(
    `decision     ${d.workerId ?? "none"}: ${d.reason}`,
    `  predicted  ${d.overlapBlocks} blocks cached = ${d.predictedCachedTokens} tokens${d.tiedWith.length ? `; tied with ${d.tiedWith.join(", ")} (random pick)` : ""}`,
  );
  if (e.candidates.length)
    lines.push(
      "candidates",
      table(
        ["  worker", "overlap", "cost", "prefill_tok", "decode_blk"],
        e.candidates.map((c) => [`  ${c.workerId}`, c.overlapBlocks, c.cost.toFixed(2), c.activePrefillTokens, c.activeDecodeBlocks]),
      ),
    );
  for (const w of e.warnings) lines.push(`warning: ${w}`);
  return lines.join("\n");
}

/** Which cache namespace an explain ran in (older edges do not report one). */
function namespaceLine(ns) {
  if (!ns) return "not reported by this edge";
  const parts = [];
  if (ns.tenant) parts.push("the tenant's own");
  if (ns.network) parts.push("the client network's own");
  if (ns.adapter) parts.push(`adapter ${ns.adapter}`);
  return `${parts.length ? parts.join(", ") : "the pool's common"} (${ns.salted ? "salted" : "unsalted"}; sharing ${ns.sharing})`;
}

/** `explain --tokens`: the routed ids as one JSON array line (diffable against a worker's ids), spans, block hashes. */
export function formatRouted(r) {
  const lines = [`routed ids   ${r.ids.length}`, JSON.stringify(r.ids)];
  if (r.items.length) {
    lines.push("media items");
    r.items.forEach((it, k) => lines.push(`  #${k} ${it.kind} [${it.start}, ${it.end}) pad ${it.padValue} mm_hash ${it.mmHash ?? "–"}`));
  }
  lines.push(`block hashes ${r.blockHashes.length}`);
  for (let i = 0; i < r.blockHashes.length; i += 8) lines.push(`  ${r.blockHashes.slice(i, i + 8).join(" ")}`);
  return lines.join("\n");
}

// ---- replay ----

/** JSONL trace → chat request bodies. A line is a body, or `{ "body": … }` / `{ "request": … }`. */
export function parseTrace(text) {
  const out = [];
  const lines = text.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i].trim();
    if (!line || line.startsWith("//")) continue;
    let v;
    try {
      v = JSON.parse(line);
    } catch {
      throw new UsageError(`trace line ${i + 1}: not JSON`);
    }
    const body = v && typeof v === "object" && !Array.isArray(v) && !("messages" in v) ? (v.body ?? v.request) : v;
    if (!body || typeof body !== "object" || !Array.isArray(body.messages)) throw new UsageError(`trace line ${i + 1}: no chat request (needs "messages")`);
    out.push(body);
  }
  return out;
}

/** Nearest-rank percentile of an ascending array. */
export function percentile(sorted, p) {
  if (sorted.length === 0) return null;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))];
}

export function summarizeReplay(results) {
  const ok = results.filter((r) => r.status === 200);
  const lat = ok.map((r) => r.latencyMs).sort((a, b) => a - b);
  const ttft = ok.filter((r) => r.ttftMs !== null).map((r) => r.ttftMs).sort((a, b) => a - b);
  let prompt = 0;
  let cached = 0;
  let overlap = 0;
  let blocks = 0;
  const workers = {};
  const errors = {};
  const modes = {};
  for (const r of results) {
    if (r.status !== 200) {
      errors[r.status] = (errors[r.status] ?? 0) + 1;
      continue;
    }
    if (r.promptTokens !== null) {
      prompt += r.promptTokens;
      cached += r.cachedTokens ?? 0;
    }
    if (r.overlapBlocks !== null && r.totalBlocks !== null) {
      overlap += r.overlapBlocks;
      blocks += r.totalBlocks;
    }
    if (r.worker) workers[r.worker] = (workers[r.worker] ?? 0) + 1;
    if (r.routing) modes[r.routing] = (modes[r.routing] ?? 0) + 1;
  }
  return {
    requests: results.length,
    ok: ok.length,
    errors,
    hitRate: prompt > 0 ? cached / prompt : null,
    promptTokens: prompt,
    cachedTokens: cached,
    predictedOverlap: blocks > 0 ? overlap / blocks : null,
    latencyMs: { p50: percentile(lat, 50), p90: percentile(lat, 90), p99: percentile(lat, 99), max: lat.length ? lat[lat.length - 1] : null },
    ttftMs: { p50: percentile(ttft, 50), p90: percentile(ttft, 90), p99: percentile(ttft, 99) },
    workers,
    routing: modes,
  };
}

export function formatReplay(s) {
  const errs = Object.entries(s.errors);
  const lines = [
    `requests     ${s.requests} (${s.ok} ok${errs.length ? `, errors: ${errs.map(([k, v]) => `HTTP ${k} × ${v}`).join(", ")}` : ""})`,
    `hit rate     ${pct(s.hitRate)} (${s.cachedTokens} cached / ${s.promptTokens} prompt tokens)`,
    `overlap      ${pct(s.predictedOverlap)} of routed blocks predicted cached`,
    `latency      p50 ${fmtMs(s.latencyMs.p50)}, p90 ${fmtMs(s.latencyMs.p90)}, p99 ${fmtMs(s.latencyMs.p99)}, max ${fmtMs(s.latencyMs.max)}`,
  ];
  if (s.ttftMs.p50 !== null) lines.push(`ttft         p50 ${fmtMs(s.ttftMs.p50)}, p90 ${fmtMs(s.ttftMs.p90)}, p99 ${fmtMs(s.ttftMs.p99)}`);
  lines.push(`workers      ${Object.entries(s.workers).map(([k, v]) => `${k} ${v}`).join(", ") || "–"}`);
  lines.push(`routing      ${Object.entries(s.routing).map(([k, v]) => `${k} ${v}`).join(", ") || "–"}`);
  return lines.join("\n");
}

const intHeader = (h, name) => {
  const v = h.get(name);
  return v === null ? null : Number(v);
};

/** Usage from an SSE body: the last chunk that carries `usage`. */
export function usageFromSse(text) {
  let usage = null;
  for (const line of text.split("\n")) {
    if (!line.startsWith("data:")) continue;
    const data = line.slice(5).trim();
    if (data === "[DONE]") continue;
    try {
      const chunk = JSON.parse(data);
      if (chunk.usage) usage = chunk.usage;
    } catch {
      // A malformed chunk: counted as no usage.
    }
  }
  return usage;
}

async function sendOne(opts, body, fetchImpl) {
  const stream = body.stream === true;
  const payload = stream ? { ...body, stream_options: { ...(body.stream_options ?? {}), include_usage: true } } : body;
  const headers = { "content-type": "application/json" };
  // The admin token, when given, is also a client credential and the one that shows the routing
  // headers (x-kvedge-*: admin callers only unless KVEDGE_DEBUG_HEADERS=on).
  const credential = opts.token || opts.apiKey;
  if (credential) headers.authorization = `Bearer ${credential}`;
  const t0 = performance.now();
  let res;
  try {
    res = await fetchImpl(`${opts.url}/v1/chat/completions`, { method: "POST", headers, body: JSON.stringify(payload) });
  } catch {
    return { status: 0, latencyMs: performance.now() - t0, ttftMs: null, promptTokens: null, cachedTokens: null, worker: null, overlapBlocks: null, totalBlocks: null, routing: null };
  }
  let ttftMs = null;
  let text = "";
  if (stream && res.body) {
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      if (ttftMs === null) ttftMs = performance.now() - t0;
      text += dec.decode(value, { stream: true });
    }
  } else text = await res.text();
  const latencyMs = performance.now() - t0;
  let usage = null;
  if (res.status === 200) {
    if (stream) usage = usageFromSse(text);
    else {
      try {
        usage = JSON.parse(text).usage ?? null;
      } catch {
        usage = null;
      }
    }
  }
  return {
    status: res.status,
    latencyMs,
    ttftMs,
    promptTokens: usage?.prompt_tokens ?? null,
    cachedTokens: usage?.prompt_tokens_details?.cached_tokens ?? null,
    worker: res.headers.get("x-kvedge-worker"),
    overlapBlocks: intHeader(res.headers, "x-kvedge-overlap-blocks"),
    totalBlocks: intHeader(res.headers, "x-kvedge-total-blocks"),
    routing: res.headers.get("x-kvedge-routing"),
  };
}

/** Sends the trace in order with at most `concurrency` requests in flight. */
export async function replay(opts, bodies, fetchImpl = fetch) {
  const list = bodies.slice(0, Number.isFinite(opts.limit) ? opts.limit : undefined);
  const results = new Array(list.length);
  let next = 0;
  const lane = async () => {
    while (next < list.length) {
      const i = next++;
      results[i] = await sendOne(opts, list[i], fetchImpl);
    }
  };
  await Promise.all(Array.from({ length: Math.min(opts.concurrency, list.length) }, lane));
  return results;
}

// ---- commands ----

async function adminJson(opts, path, init = {}, fetchImpl = fetch) {
  const res = await fetchImpl(`${opts.url}${path}`, { ...init, headers: { ...(init.headers ?? {}), authorization: `Bearer ${opts.token}` } });
  const text = await res.text();
  let body;
  try {
    body = JSON.parse(text);
  } catch {
    body = null;
  }
  if (!res.ok) throw new Error(`${path}: HTTP ${res.status}${body?.error?.message ? `: ${body.error.message}` : text ? `: ${text.slice(0, 200)}` : ""}`);
  return body;
}

/** Runs one CLI invocation; returns the exit code (0 ok, 1 failed, 2 usage). */
export async function run(argv, env, io = { out: (s) => process.stdout.write(s + "\n"), err: (s) => process.stderr.write(s + "\n") }, fetchImpl = fetch) {
  let opts;
  try {
    opts = parseCli(argv, env);
  } catch (e) {
    if (!(e instanceof UsageError)) throw e;
    io.err(`kvedge: ${e.message}\n${USAGE}`);
    return 2;
  }
  if (opts.help) {
    io.out(USAGE);
    return 0;
  }
  try {
    if (opts.command === "status") {
      const o = await adminJson(opts, "/admin/overview", {}, fetchImpl);
      io.out(opts.json ? JSON.stringify(o, null, 2) : formatStatus(o, opts.url));
    } else if (opts.command === "workers") {
      const q = opts.model ? `?model=${encodeURIComponent(opts.model)}` : "";
      const o = await adminJson(opts, `/admin/workers${q}`, {}, fetchImpl);
      io.out(opts.json ? JSON.stringify(o, null, 2) : formatWorkers(o.model, o.workers));
    } else if (opts.command === "relay-key") {
      return await relayKeyCommand(opts, io, fetchImpl);
    } else if (opts.command === "explain") {
      const body = readFileSync(opts.file, "utf8");
      const path = opts.tokens ? "/admin/explain?tokens=all" : "/admin/explain";
      // The tenant's key travels in a header, never the URL.
      const headers = { "content-type": "application/json", ...(opts.asTenant ? { "x-kvedge-tenant-key": opts.apiKey } : {}), ...(opts.asClient !== null ? { "x-kvedge-client-ip": opts.asClient } : {}) };
      const o = await adminJson(opts, path, { method: "POST", headers, body }, fetchImpl);
      io.out(opts.json ? JSON.stringify(o, null, 2) : opts.tokens ? `${formatExplain(o)}\n${formatRouted(o.routed)}` : formatExplain(o));
    } else {
      const bodies = parseTrace(readFileSync(opts.file, "utf8"));
      const summary = summarizeReplay(await replay(opts, bodies, fetchImpl));
      io.out(opts.json ? JSON.stringify(summary, null, 2) : formatReplay(summary));
      if (summary.ok < summary.requests) return 1;
    }
    return 0;
  } catch (e) {
    io.err(`kvedge ${opts.command}: ${e instanceof Error ? e.message : String(e)}`);
    return e instanceof UsageError ? 2 : 1;
  }
}

/** `relay-key issue|list|revoke`: the admin API of src/edge/relay-key-routes.ts. */
async function relayKeyCommand(opts, io, fetchImpl) {
  const q = opts.model ? `?model=${encodeURIComponent(opts.model)}` : "";
  if (opts.sub === "list") {
    const o = await adminJson(opts, `/admin/relay-keys${q}`, {}, fetchImpl);
    io.out(
      opts.json
        ? JSON.stringify(o, null, 2)
        : o.keys.length === 0
          ? `${o.model}: no relay keys`
          : `${o.model}\n` +
            table(
              ["key", "worker", "url", "dp", "storage group", "issued", "revoked"],
              o.keys.map((k) => [k.keyId, k.workerId, k.url, String(k.dpSize), k.storageGroup ?? "–", new Date(k.createdAt * 1000).toISOString(), k.revokedAt ? new Date(k.revokedAt * 1000).toISOString() : "–"]),
            ),
    );
    return 0;
  }
  if (opts.sub === "revoke") {
    const o = await adminJson(opts, `/admin/relay-keys/${opts.keyId}/revoke${q}`, { method: "POST" }, fetchImpl);
    io.out(opts.json ? JSON.stringify(o, null, 2) : `revoked ${o.key.keyId} (worker ${o.key.workerId}); ${o.closedSockets} relay socket(s) closed`);
    return 0;
  }
  const body = JSON.stringify({
    ...(opts.model ? { model: opts.model } : {}),
    workerId: opts.worker,
    url: opts.workerUrl,
    ...(opts.dpSize !== null ? { dpSize: opts.dpSize } : {}),
    ...(opts.storageGroup !== null ? { storageGroup: opts.storageGroup } : {}),
  });
  const o = await adminJson(opts, "/admin/relay-keys", { method: "POST", headers: { "content-type": "application/json" }, body }, fetchImpl);
  if (opts.out) {
    // The credential is a secret: owner-only file, never echoed.
    writeFileSync(opts.out, o.credential + "\n", { mode: 0o600 });
    // The worker's SGLang --api-key (edges with KVEDGE_WORKER_KEY_SECRET), a secret too: beside it.
    if (o.workerApiKey) writeFileSync(`${opts.out}.worker-api-key`, o.workerApiKey + "\n", { mode: 0o600 });
    io.out(`issued ${o.keyId} for worker ${o.workerId} at ${o.url} (pool ${o.model}); credential written to ${opts.out}${o.workerApiKey ? `, the worker's --api-key to ${opts.out}.worker-api-key` : ""}`);
  } else io.out(opts.json ? JSON.stringify(o, null, 2) : o.credential);
  return 0;
}

function isMain() {
  try {
    return process.argv[1] !== undefined && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url);
  } catch {
    return false;
  }
}

if (isMain()) process.exitCode = await run(process.argv.slice(2), process.env);
