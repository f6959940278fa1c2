/**
 * CLI: the regional media store and decode service. Installed from the kvedge-host package as
 * `kvedge-store` (scripts/build-host-package.mjs); from a clone, `npx node services/decode/main.ts`.
 *   kvedge-store [--host 127.0.0.1] [--port 7070] [--decoder native|wasm|auto]
 *   [--concurrency N] [--warm-probes N] [--allow 127.0.0.1:8080 ...] [--max-body-bytes N] [--verbose]
 *   [--max-downloads N] [--max-download-queue N] [--store-dir DIR] [--store-max-bytes N]
 *   [--max-url-fresh-sec N]
 * Secrets come from the environment or a file, never argv: the bearer token from
 * KVEDGE_DECODE_TOKEN (or --no-auth for local experiments), the signed-URL key shared with the
 * edge from KVEDGE_MEDIA_URL_KEY or the file named by KVEDGE_MEDIA_URL_KEY_FILE. Prints one JSON
 * line {ready, url, decoder} on stdout once listening.
 */
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { ZodError } from "zod";
import { fileURLToPath } from "node:url";
import { installLastResort } from "./last-resort.ts";
import { importMediaUrlKey, workerMediaCredential } from "../../src/media/signed-url.ts";
import { startDecodeService } from "./server.ts";
import { exitWithSupervisor, isSupervisedChild, supervise } from "./supervisor.ts";
import type { DecodeServiceOptionsInput } from "./options.ts";

const { values } = parseArgs({
  options: {
    host: { type: "string" },
    port: { type: "string" },
    decoder: { type: "string" },
    "ffprobe-path": { type: "string" },
    concurrency: { type: "string" },
    "warm-probes": { type: "string" },
    "max-body-bytes": { type: "string" },
    "max-fetch-bytes": { type: "string" },
    "fetch-timeout-ms": { type: "string" },
    "probe-timeout-ms": { type: "string" },
    allow: { type: "string", multiple: true },
    "max-downloads": { type: "string" },
    "max-download-queue": { type: "string" },
    "client-share": { type: "string" },
    "request-timeout-ms": { type: "string" },
    "idle-timeout-ms": { type: "string" },
    "store-dir": { type: "string" },
    "store-max-bytes": { type: "string" },
    "store-max-items": { type: "string" },
    "store-client-share": { type: "string" },
    "store-lease-sec": { type: "string" },
    "store-lease-share": { type: "string" },
    "max-url-fresh-sec": { type: "string" },
    "host-map": { type: "string", multiple: true },
    "no-auth": { type: "boolean" },
    "no-supervise": { type: "boolean" },
    "no-worker-credential": { type: "boolean" },
    "worker-credential": { type: "string" },
    verbose: { type: "boolean", short: "v" },
    help: { type: "boolean", short: "h" },
  },
  strict: true,
});

if (values.help) {
  process.stdout.write(
    "usage: KVEDGE_DECODE_TOKEN=... kvedge-store [--host 127.0.0.1] [--port 7070]\n" +
      "  [--decoder native|wasm|auto] [--ffprobe-path ffprobe] [--concurrency N] [--warm-probes N] [--max-body-bytes N]\n" +
      "  [--max-fetch-bytes N] [--fetch-timeout-ms N] [--probe-timeout-ms N]\n" +
      "  [--allow HOST:PORT|CIDR ...  (local development only)] [--no-auth] [--verbose]\n" +
      "  [--no-supervise  (serve in this process; default: a supervisor restarts the serving process when it dies)]\n" +
      "  [--no-worker-credential  (serve a signed URL to whoever holds it, not only to the worker it names)]\n" +
      "  --worker-credential ID  prints worker ID's media credential as a .netrc fragment (login ID password ...) and exits\n" +
      "  [--max-downloads N] [--max-download-queue N] [--request-timeout-ms N] [--idle-timeout-ms N]\n" +
      "  [--client-share F  (most of the probe and download slots one edge client holds, 0 < F <= 1; default 0.5)]\n" +
      "  [--store-dir DIR] [--store-max-bytes N] [--store-max-items N] [--store-client-share F  (most of the store's bytes one client holds; default 0.25)]\n" +
      "  [--store-lease-sec N  (held items kept at least N s after the edge asked; 0: no leases; default 600)] [--store-lease-share F  (most of the store's bytes, items and each client's share under lease; default 0.25)]\n" +
      "  [--host-map NAME=ADDR ...  (static answers, still SSRF-checked)]\n" +
      "  [--max-url-fresh-sec N  (reuse a URL's bytes without asking its origin for at most N s of its stated freshness; 0: always ask)]\n" +
      "  env: KVEDGE_MEDIA_URL_KEY or KVEDGE_MEDIA_URL_KEY_FILE (signed media URLs, shared with the edge)\n",
  );
  process.exit(0);
}

const int = (v: string | undefined): number | undefined => (v === undefined ? undefined : Number(v));
const opts: DecodeServiceOptionsInput = { token: process.env.KVEDGE_DECODE_TOKEN || null, allowNoAuth: values["no-auth"] === true };
if (values.host !== undefined) opts.host = values.host;
if (values.port !== undefined) opts.port = int(values.port)!;
if (values.decoder !== undefined) opts.decoder = values.decoder as "native" | "wasm" | "auto";
if (values["ffprobe-path"] !== undefined) opts.ffprobePath = values["ffprobe-path"];
if (values.concurrency !== undefined) opts.concurrency = int(values.concurrency)!;
if (values["warm-probes"] !== undefined) opts.warmProbes = int(values["warm-probes"])!;
if (values["max-body-bytes"] !== undefined) opts.maxBodyBytes = int(values["max-body-bytes"])!;
if (values["probe-timeout-ms"] !== undefined) opts.probeTimeoutMs = int(values["probe-timeout-ms"])!;
const fetchPolicy: NonNullable<DecodeServiceOptionsInput["fetch"]> = {};
if (values["max-fetch-bytes"] !== undefined) fetchPolicy.maxBytes = int(values["max-fetch-bytes"])!;
if (values["fetch-timeout-ms"] !== undefined) fetchPolicy.timeoutMs = int(values["fetch-timeout-ms"])!;
if (values.allow) fetchPolicy.allowlist = values.allow;
opts.fetch = fetchPolicy;
if (values.verbose) opts.verbose = true;
if (values["max-downloads"] !== undefined) opts.maxDownloads = int(values["max-downloads"])!;
if (values["max-download-queue"] !== undefined) opts.maxDownloadQueue = int(values["max-download-queue"])!;
if (values["client-share"] !== undefined) opts.clientShare = Number(values["client-share"]);
if (values["request-timeout-ms"] !== undefined) opts.requestTimeoutMs = int(values["request-timeout-ms"])!;
if (values["idle-timeout-ms"] !== undefined) opts.idleTimeoutMs = int(values["idle-timeout-ms"])!;
if (values["max-url-fresh-sec"] !== undefined) opts.maxUrlFreshSec = int(values["max-url-fresh-sec"])!;
const keyFile = process.env.KVEDGE_MEDIA_URL_KEY_FILE;
const urlKey = keyFile ? readFileSync(keyFile, "utf8").trim() : process.env.KVEDGE_MEDIA_URL_KEY || null;
opts.store = { urlKey };
if (!urlKey) process.stderr.write("decode: no KVEDGE_MEDIA_URL_KEY: the media store will serve no worker URLs (every /v1/media request is refused)\n");
if (values["store-dir"] !== undefined) opts.store.dir = values["store-dir"];
if (values["no-worker-credential"]) opts.store.requireWorkerCredential = false;
if (values["worker-credential"] !== undefined) {
  if (!urlKey) throw new Error("--worker-credential needs the media URL key (KVEDGE_MEDIA_URL_KEY or KVEDGE_MEDIA_URL_KEY_FILE)");
  const id = values["worker-credential"];
  // For SGLang's ~/.netrc, after "machine <the store's host>": python-requests sends it as Basic auth.
  process.stdout.write(`login ${id} password ${await workerMediaCredential(await importMediaUrlKey(urlKey), id)}\n`);
  process.exit(0);
}
if (values["store-max-bytes"] !== undefined) opts.store.maxTotalBytes = int(values["store-max-bytes"])!;
if (values["store-max-items"] !== undefined) opts.store.maxItems = int(values["store-max-items"])!;
if (values["store-lease-sec"] !== undefined) opts.store.leaseSec = int(values["store-lease-sec"])!;
if (values["store-lease-share"] !== undefined) opts.store.leaseShare = Number(values["store-lease-share"]);
if (values["store-client-share"] !== undefined) opts.store.clientShare = Number(values["store-client-share"]);
if (values["host-map"]) {
  const map: Record<string, string[]> = {};
  for (const e of values["host-map"]) {
    const i = e.indexOf("=");
    if (i <= 0) throw new Error(`--host-map ${e}: expected NAME=ADDR`);
    (map[e.slice(0, i)] ??= []).push(e.slice(i + 1));
  }
  opts.hostMap = map;
}

// By default this process only supervises (supervisor.ts): a child with the same arguments serves.
if (!isSupervisedChild() && values["no-supervise"] !== true) {
  supervise({ script: fileURLToPath(import.meta.url), args: process.argv.slice(2), port: opts.port ?? 0, storeDir: opts.store.dir ?? null });
} else {
  if (isSupervisedChild()) exitWithSupervisor();
  installLastResort((msg) => process.stderr.write(`decode: ${msg}\n`));
  await serve();
}

async function serve(): Promise<void> {
  try {
    const svc = await startDecodeService(opts);
    process.stdout.write(JSON.stringify({ ready: true, url: svc.url, decoder: svc.decoder }) + "\n");
    if (svc.decoder === "wasm" && opts.decoder !== "wasm") process.stderr.write("decode: no native ffprobe found: probing with ffmpeg's wasm build (@ffmpeg/core)\n");
    let stopping = false;
    const stop = (): void => {
      if (stopping) return;
      stopping = true;
      void svc.close().then(() => process.exit(0));
    };
    process.on("SIGINT", stop);
    process.on("SIGTERM", stop);
  } catch (err) {
    if (err instanceof ZodError) {
      process.stderr.write(`decode: bad options: ${err.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}\n`);
    } else {
      process.stderr.write(`decode: failed to start: ${(err as Error).stack ?? String(err)}\n`);
    }
    process.exit(1);
  }
}
