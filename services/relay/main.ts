/**
 * CLI: one relay beside one SGLang worker. Installed from the kvedge-host package as `kvedge-relay`
 * (scripts/build-host-package.mjs); from a clone, `npx node services/relay/main.ts`.
 *   kvedge-relay --worker-url http://127.0.0.1:30001 --index-url ws://127.0.0.1:8787 \
 *     --worker-id w1 --model Qwen/Qwen3-VL-8B-Instruct --key-env KVEDGE_RELAY_KEY
 * The worker's relay credential (`kvedge relay-key issue`) is read from the named environment
 * variable or from a file (never from argv: argv is world-readable).
 */
import { readFile } from "node:fs/promises";
import { parseArgs } from "node:util";
import { createLogger, errorMessage, type LogLevel } from "./log.ts";
import { startWorkerRelays } from "./rank-relays.ts";
import { RelayStartupError } from "./worker-info.ts";
import { parseRelayCredential } from "../../src/relay-wire/relay-auth.ts";

const USAGE = `usage: kvedge-relay --worker-url URL --index-url WS_URL --worker-id ID
       [--model NAME] [--key-env VAR (default KVEDGE_RELAY_KEY) | --key-file PATH] [--advertise-url URL]
       [--worker-key-env VAR (default KVEDGE_WORKER_API_KEY; unset: none) | --worker-key-file PATH]   (the worker's SGLang --api-key)
       [--block-size N] [--kv-endpoint tcp://h:p] [--replay-endpoint tcp://h:p | none] [--topic T]
       [--model-dir DIR] [--dp-rank N (default: every rank of a --dp-size worker)] [--health-interval-ms N] [--health-timeout-ms N] [--log-level debug|info|warn|error]
       [--stats-interval-ms N] [--region NAME] [--prefill-tokens-per-sec N]
       [--no-kv-events | --allow-no-kv-events]   (worker without KV events: approximate mode)
       [--state-file PATH] [--state-interval-ms N]   (resume the saved view after a restart)
       [--on-history-lost approximate|flush]   (flush: reset the worker's cache to be exact again)`;

function positive(v: string | undefined, flag: string): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) throw new RelayStartupError(`${flag} must be a positive number, got ${v}`);
  return n;
}

function int(v: string | undefined, flag: string): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isInteger(n)) throw new RelayStartupError(`${flag} must be an integer, got ${v}`);
  return n;
}

function onHistoryLost(v: string | undefined): "approximate" | "flush" | undefined {
  if (v === undefined || v === "approximate" || v === "flush") return v;
  throw new RelayStartupError(`--on-history-lost must be approximate or flush, not ${JSON.stringify(v)}`);
}

/** The relay credential from --key-file, else from the --key-env variable; checked by the options schema. */
async function readCredential(envName: string, file: string | undefined): Promise<string> {
  let v: string | undefined;
  if (file !== undefined) {
    try {
      v = await readFile(file, "utf8");
    } catch (e) {
      throw new RelayStartupError(`relay key: cannot read ${file} (${errorMessage(e)})`);
    }
  } else {
    v = process.env[envName];
    if (!v) throw new RelayStartupError(`relay key: environment variable ${envName} is empty or unset (issue one with \`kvedge relay-key issue\`)`);
  }
  // Never echo the value: it is the key.
  if (!parseRelayCredential(v)) throw new RelayStartupError(`relay key from ${file ?? envName} is not a relay credential (kvr1.<key id>.<64 hex digits>)`);
  return v.trim();
}

/** The worker's SGLang API key from --worker-key-file, else the --worker-key-env variable (optional: a worker without --api-key needs none). */
async function readWorkerApiKey(envName: string, file: string | undefined): Promise<string | undefined> {
  if (file === undefined) return process.env[envName]?.trim() || undefined;
  try {
    const v = (await readFile(file, "utf8")).trim();
    if (!v) throw new RelayStartupError(`worker key: ${file} is empty`);
    return v;
  } catch (e) {
    if (e instanceof RelayStartupError) throw e;
    throw new RelayStartupError(`worker key: cannot read ${file} (${errorMessage(e)})`);
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      "worker-url": { type: "string" },
      "index-url": { type: "string" },
      "worker-id": { type: "string" },
      model: { type: "string" },
      "key-env": { type: "string", default: "KVEDGE_RELAY_KEY" },
      "key-file": { type: "string" },
      "worker-key-env": { type: "string", default: "KVEDGE_WORKER_API_KEY" },
      "worker-key-file": { type: "string" },
      "advertise-url": { type: "string" },
      "block-size": { type: "string" },
      "kv-endpoint": { type: "string" },
      "replay-endpoint": { type: "string" },
      topic: { type: "string" },
      "model-dir": { type: "string" },
      "dp-rank": { type: "string" },
      "health-interval-ms": { type: "string" },
      "health-timeout-ms": { type: "string" },
      "log-level": { type: "string", default: "info" },
      "stats-interval-ms": { type: "string", default: "60000" },
      region: { type: "string" },
      "prefill-tokens-per-sec": { type: "string" },
      "no-kv-events": { type: "boolean" },
      "allow-no-kv-events": { type: "boolean" },
      "state-file": { type: "string" },
      "state-interval-ms": { type: "string" },
      "on-history-lost": { type: "string" },
      help: { type: "boolean", short: "h" },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(USAGE + "\n");
    return;
  }
  const workerId = values["worker-id"];
  if (!values["worker-url"] || !values["index-url"] || !workerId) throw new RelayStartupError(USAGE);
  const credential = await readCredential(values["key-env"]!, values["key-file"]);
  const workerApiKey = await readWorkerApiKey(values["worker-key-env"]!, values["worker-key-file"]);
  const level = values["log-level"] as LogLevel;
  const log = createLogger({ svc: "relay", worker: workerId }, level);

  const replay = values["replay-endpoint"];
  if (values["no-kv-events"] && values["allow-no-kv-events"]) {
    throw new RelayStartupError("--no-kv-events and --allow-no-kv-events are mutually exclusive");
  }
  const kvEvents = values["no-kv-events"] ? "off" : values["allow-no-kv-events"] ? "auto" : "required";
  const relays = await startWorkerRelays(
    {
      workerUrl: values["worker-url"],
      indexUrl: values["index-url"],
      workerId,
      credential,
      workerApiKey,
      model: values.model,
      advertiseUrl: values["advertise-url"],
      blockSize: int(values["block-size"], "--block-size"),
      kvEndpoint: values["kv-endpoint"],
      replayEndpoint: replay === undefined ? undefined : replay === "none" ? null : replay,
      topic: values.topic,
      modelDir: values["model-dir"],
      dpRank: int(values["dp-rank"], "--dp-rank"),
      healthIntervalMs: int(values["health-interval-ms"], "--health-interval-ms"),
      healthTimeoutMs: int(values["health-timeout-ms"], "--health-timeout-ms"),
      kvEvents,
      region: values.region,
      prefillTokensPerSec: positive(values["prefill-tokens-per-sec"], "--prefill-tokens-per-sec"),
      stateFile: values["state-file"],
      stateIntervalMs: int(values["state-interval-ms"], "--state-interval-ms"),
      onHistoryLost: onHistoryLost(values["on-history-lost"]),
    },
    log,
  );

  const statsEvery = int(values["stats-interval-ms"], "--stats-interval-ms") ?? 60_000;
  const statsTimer =
    statsEvery > 0
      ? setInterval(() => {
          relays.forEach((relay, rank) => {
            const s = relay.stats();
            log.info("stats", {
              ...(relays.length > 1 ? { rank } : {}),
              workerState: s.worker,
              epoch: s.epoch,
              blocks: s.blocks,
              ...(s.hostBlocks > 0 ? { hostBlocks: s.hostBlocks } : {}),
              lastSeq: s.lastSeq,
              batches: s.batches,
              dropped: s.dropped,
              gaps: s.feed.gaps,
              historyLost: s.historyLost,
              ...(s.approximate !== null ? { approximate: s.approximate } : {}),
              session: s.session.state,
              ...(s.shards > 1 ? { shards: s.shards, shardSessions: s.shardSessions.map((x) => x.state) } : {}),
            });
          });
        }, statsEvery)
      : null;

  const shutdown = (signal: string): void => {
    log.info("shutdown", { signal });
    // A SIGTERM is an orderly stop (a rolling restart): the index stops sending the worker new
    // requests before this relay's sockets close. SIGINT (a developer's Ctrl-C) only closes.
    if (signal === "SIGTERM") for (const r of relays) r.drain("relay received SIGTERM");
    if (statsTimer) clearInterval(statsTimer);
    Promise.all(relays.map((r) => r.close())).then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  process.once("SIGINT", () => shutdown("SIGINT"));
  process.once("SIGTERM", () => shutdown("SIGTERM"));
}

main().catch((e: unknown) => {
  const startup = e instanceof RelayStartupError;
  process.stderr.write(`relay: ${startup ? "refusing to start: " : ""}${errorMessage(e)}\n`);
  process.exit(startup ? 2 : 1);
});
