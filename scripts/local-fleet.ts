/**
 * The local fleet: N simulated SGLang workers, one relay beside each, and the edge Worker served by
 * Miniflare (scripts/local-edge.ts), all on 127.0.0.1. Used by `npm start` and by the end-to-end
 * tests, so what the tests exercise is exactly what a user runs. Every part is a real child process: killing a worker
 * really closes its sockets.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, readFileSync, existsSync, statSync } from "node:fs";
import { createServer as createHttpServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { prepareLocalEdge } from "./local-edge.ts";
import { freePort, freePortRange, PortClashError, reportsBindFailure, reservePort, startOnFreshPorts, type PortPicker } from "./fleet-ports.ts";
import { deriveWorkerApiKey } from "../src/edge/worker-auth.ts";
import { importMediaUrlKey, workerMediaCredential } from "../src/media/signed-url.ts";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");
const NODE = process.execPath;

export type FleetShape = "unified" | "pd";

/** A worker's `--disaggregation-mode` in a fleet of this shape (worker i of n). */
export function fleetRoleOf(shape: FleetShape, i: number, n: number): "null" | "prefill" | "decode" {
  if (shape === "unified") return "null";
  return i < Math.ceil(n / 2) ? "prefill" : "decode";
}

export interface FleetOptions {
  workers?: number;
  edgePort?: number;
  model?: string;
  family?: "qwen2_vl" | "qwen2_5_vl" | "qwen3_vl";
  template?: "qwen2vl" | "qwen3vl-instruct" | "qwen3vl-thinking";
  pageSize?: number;
  capacityTokens?: number;
  timingPreset?: string;
  relaySecret?: string;
  adminToken?: string;
  /** The edge's local state (as wrangler dev's --persist-to); a fresh temp dir by default (removed on stop). */
  persistTo?: string;
  log?: (line: string) => void;
  /** Extra vars for the Worker (KVEDGE_ROUTING etc.). */
  vars?: Record<string, string>;
  /** Start the relays (false: workers without KV events routing). */
  relays?: boolean;
  /** Directory served at `mediaUrl` (images/videos for media requests); none = no media server. */
  mediaDir?: string;
  /** Start the regional decode service and media store; default true when a media dir is given. */
  decode?: boolean;
  /** Extra decode service arguments (e.g. --allow, --host-map, --max-downloads). */
  decodeArgs?: string[];
  /** Workers fetch media only from the store and data: URLs, like production workers (default true). */
  lockedDownWorkers?: boolean;
  /** Exact media routing at the edge (KVEDGE_EXACT_MEDIA); default on. */
  exactMedia?: boolean;
  /** Model directory the workers and relays derive their contract from (default: the family's fixture). */
  modelDir?: string;
  /**
   * Fleet shape: "unified" (default) workers, or "pd": a prefill/decode pool whose first
   * ceil(workers / 2) workers run `--disaggregation-mode prefill` and the rest `decode`.
   */
  shape?: FleetShape;
  /**
   * Attention-DP ranks per worker (the simulator's `--dp-size N --enable-dp-attention`, rank r
   * publishing on kv/replay port + r); each rank is a routing target `<worker>#<rank>`. Default 1.
   */
  dpSize?: number;
  /**
   * Encoder-only servers (EPD, the simulator's `--encoder-only --enable-prefix-mm-cache`) per worker
   * that is not a decode, with no relay (no KV events; never a routing target). That worker runs
   * `--language-only --encoder-urls <its encoders> --encoder-transfer-backend zmq_to_tokenizer`.
   * Its encoders fetch media from the store with its credential: the edge signs the media URLs for
   * the worker, and a store credential names one worker. Default 0.
   */
  encoders?: number;
  /** Per-worker overrides: extra simulator CLI args (e.g. ["--no-mm-hashes"]). */
  workerArgs?: string[][];
  /** Per-worker extra relay CLI args (e.g. ["--no-kv-events"], ["--region", "eu"]); kept across relay restarts. */
  relayArgs?: string[][];
  /** Open the V8 inspector on the edge (scripts/soak-heap.ts reads the isolate's heap through it); off by default. */
  inspector?: boolean;
  /** The edge process exited without being asked to: the fleet has no edge any more. */
  onEdgeLost?: (reason: string) => void;
  /** Picks each port the fleet hands a service (default freePort); tests hand out a taken one to see the service move. */
  portPicker?: PortPicker;
}

export interface FleetWorker {
  id: string;
  url: string;
  port: number;
  kvPort: number;
  replayPort: number;
  proc: ChildProcess;
  relay: ChildProcess | null;
  /** The model directory this worker (and its relay) derive the contract from. */
  modelDir: string;
  /** The worker's SGLang --api-key (the edge derives the same from KVEDGE_WORKER_KEY_SECRET and the URL). */
  apiKey: string;
}

export interface Fleet {
  edgeUrl: string;
  /** The edge's V8 inspector port (the edge isolate's heap: scripts/soak-heap.ts); null unless `inspector` was asked for. */
  readonly inspectorPort: number | null;
  /** Base URL of the local media server (when a media dir was given). */
  mediaUrl: string | null;
  decodeUrl: string | null;
  /** Which ffprobe the decode service probes with: "native", or "wasm" (the embedded default). */
  decoder: string | null;
  model: string;
  adminToken: string;
  relaySecret: string;
  workers: FleetWorker[];
  /** The encoder-only servers' URLs (`encoders`) by the worker they serve. */
  encoderUrls: Record<string, string[]>;
  /** Stops the decode service (videos then fall back to text-prefix routing). */
  stopDecode(): Promise<void>;
  /**
   * Restarts the decode service on the same port: without `--store-dir` in `decodeArgs` its media
   * store starts empty (and without leases). Resolves once it answers.
   */
  restartDecode(): Promise<void>;
  /** Starts one more worker (and its relay) with extra simulator / relay args; resolves once it is synced. */
  addWorker(extraArgs?: string[], relayArgs?: string[]): Promise<FleetWorker>;
  /** SIGKILL a worker process (its relay notices and reports it down). */
  killWorker(i: number): Promise<void>;
  /**
   * Fault injection: SIGKILL worker i and start a new process on the same ports (a new epoch),
   * leaving the ports closed for `downMs` in between (real SGLang takes far longer to load a model).
   */
  restartWorker(i: number, downMs?: number): Promise<void>;
  /** Fault injection: SIGKILL worker i's relay (its index session drops). */
  killRelay(i: number): Promise<void>;
  /** Starts worker i's relay again (after killRelay), with extra relay CLI args (e.g. --kv-endpoint). */
  startRelay(i: number, extraArgs?: string[]): Promise<void>;
  /** SIGSTOP / SIGCONT every relay (they hold their sockets but process nothing). */
  pauseRelays(): void;
  resumeRelays(): void;
  /** SIGSTOP / SIGCONT the decode service (it accepts connections and never answers: "slow"). */
  pauseDecode(): void;
  resumeDecode(): void;
  /**
   * Restarts the edge process on the same port with the same state directory: the routing index
   * objects start again from their SQLite state, with empty memory. Resolves once the edge answers.
   */
  restartEdge(): Promise<void>;
  /** Process-group leaders of the fleet's children, for resource sampling ("edge": the Miniflare host, its workerd in its group). */
  processes(): { name: string; pid: number }[];
  /** Waits until every live worker's relay has synced its blocks with the index. */
  waitForSync(timeoutMs?: number): Promise<void>;
  admin(path: string): Promise<unknown>;
  stop(): Promise<void>;
}

/** The edge host's ready line with its inspector's port (scripts/edge-host.ts). */
// Unanchored at the start: workerd's own output shares the pipe, and an unfinished line of it can precede this one.
const INSPECTOR_REPORT = /edge-host: serving on \S+ \(inspector on port (\d+)\)$/;

// The last lines each child printed, so a startup failure reports why even when logs are off.
const TAIL_LINES = 30;
const outputTails = new WeakMap<ChildProcess, string[]>();
// Children that printed a failed bind (a port they were given was taken).
const bindFailures = new WeakSet<ChildProcess>();

function outputTail(proc: ChildProcess | undefined): string {
  const tail = proc ? outputTails.get(proc) : undefined;
  return tail && tail.length > 0 ? `; its last output:\n${tail.join("\n")}` : "";
}

function pipeLogs(proc: ChildProcess, name: string, log: (l: string) => void, onLine?: (line: string) => void): void {
  const tail: string[] = [];
  outputTails.set(proc, tail);
  for (const stream of [proc.stdout, proc.stderr]) {
    let buf = "";
    stream?.setEncoding("utf8");
    stream?.on("data", (chunk: string) => {
      buf += chunk;
      let i: number;
      while ((i = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        if (!line.trim()) continue;
        tail.push(line);
        if (tail.length > TAIL_LINES) tail.shift();
        if (reportsBindFailure(line)) bindFailures.add(proc);
        onLine?.(line);
        log(`[${name}] ${line}`);
      }
    });
  }
}

/** A health check that gives up: something else holding the port may accept and never answer. */
function probe(url: string): Promise<Response> {
  return fetch(url, { signal: AbortSignal.timeout(2_000) });
}

async function waitFor(check: () => Promise<boolean>, timeoutMs: number, what: string, proc?: ChildProcess): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (proc && proc.exitCode !== null) {
      await outputRead(proc);
      const message = `${what}: process exited with ${proc.exitCode}${outputTail(proc)}`;
      throw bindFailures.has(proc) ? new PortClashError(message) : new Error(message);
    }
    try {
      if (await check()) return;
    } catch {
      // not up yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out waiting for ${what}${outputTail(proc)}`);
}

/** How long an exited child's last output may take to arrive (a grandchild, the edge's workerd, may hold its pipes). */
const OUTPUT_DRAIN_MS = 1_000;

/** Resolves once the exited `proc`'s stdout and stderr have ended, or OUTPUT_DRAIN_MS later: "exit" can come before the last lines. */
async function outputRead(proc: ChildProcess): Promise<void> {
  const deadline = Date.now() + OUTPUT_DRAIN_MS;
  while (Date.now() < deadline && [proc.stdout, proc.stderr].some((s) => s && !s.readableEnded && !s.destroyed)) await new Promise((r) => setTimeout(r, 20));
}

function stopProc(p: ChildProcess | null, signal: NodeJS.Signals = "SIGTERM"): Promise<void> {
  if (!p || p.exitCode !== null || p.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const t = setTimeout(() => {
      try {
        if (p.pid) process.kill(-p.pid, "SIGKILL");
      } catch {
        p.kill("SIGKILL");
      }
    }, 3000);
    p.once("exit", () => {
      clearTimeout(t);
      resolve();
    });
    try {
      if (p.pid) process.kill(-p.pid, signal);
    } catch {
      p.kill(signal);
    }
  });
}

/**
 * What the fleet's children are tied to. Each child runs in its own process group (so a signal
 * reaches the edge's workerd too) and is registered with the reaper (scripts/fleet-reaper.mjs),
 * which kills every registered group once this process's pipe to it closes: on stop(), on a failed
 * start, and when this process dies in any way, SIGKILL included. A process "exit" hook kills the
 * groups directly as well, for the ordinary exits.
 */
class FleetLife {
  readonly procs: ChildProcess[] = [];
  private readonly reaper: ChildProcess;
  private readonly cleanups: (() => Promise<void>)[] = [];

  constructor() {
    this.reaper = spawn(NODE, [join(ROOT, "scripts/fleet-reaper.mjs")], { detached: true, stdio: ["pipe", "ignore", "ignore"] });
    this.reaper.unref();
    (this.reaper.stdin as unknown as { unref?: () => void }).unref?.();
    this.reaper.stdin!.on("error", () => {}); // a dead reaper must not crash the launcher
    process.once("exit", this.killAll);
  }

  track(p: ChildProcess): ChildProcess {
    this.procs.push(p);
    if (p.pid) this.reaper.stdin!.write(`+${p.pid}\n`);
    return p;
  }

  /** Runs on a failed start (after the children are stopped). */
  onAbort(fn: () => Promise<void>): void {
    this.cleanups.push(fn);
  }

  private readonly killAll = (): void => {
    for (const p of this.procs) {
      try {
        if (p.pid && p.exitCode === null) process.kill(-p.pid, "SIGKILL");
      } catch {
        // already gone
      }
    }
  };

  /** Stops every child (SIGTERM to its group, SIGKILL after 3 s), then lets the reaper go. */
  async end(): Promise<void> {
    await Promise.all(this.procs.map((p) => stopProc(p)));
    process.removeListener("exit", this.killAll);
    this.reaper.stdin!.end();
  }

  async abort(): Promise<void> {
    await this.end();
    for (const fn of this.cleanups) await fn().catch(() => {});
  }
}

export async function startFleet(opts: FleetOptions = {}): Promise<Fleet> {
  const life = new FleetLife();
  try {
    return await buildFleet(opts, life);
  } catch (err) {
    // A start that fails half-way (a port taken, a child that exits) leaves nothing running.
    await life.abort();
    throw err;
  }
}

async function buildFleet(opts: FleetOptions, life: FleetLife): Promise<Fleet> {
  const log = opts.log ?? (() => {});
  const n = opts.workers ?? 2;
  const model = opts.model ?? "Qwen/Qwen3-VL-8B-Instruct";
  const family = opts.family ?? "qwen3_vl";
  const template = opts.template ?? "qwen3vl-instruct";
  const pageSize = opts.pageSize ?? 16;
  const relaySecret = opts.relaySecret ?? randomBytes(24).toString("hex");
  const adminToken = opts.adminToken ?? randomBytes(24).toString("hex");
  const pickPort: PortPicker = opts.portPicker ?? (() => freePort());
  // A port the caller chose (PORT for npm start, a test's pick) may be free now and the kernel's
  // next bind(0) answer: never hand it to the decode service or a worker, or the edge cannot bind it
  // and the decode service answers the edge's health check in its place.
  if (opts.edgePort !== undefined) reservePort(opts.edgePort);
  const persistTo = opts.persistTo ?? mkdtempSync(join(tmpdir(), "kvedge-state-"));
  const ownsPersist = opts.persistTo === undefined;
  if (ownsPersist) life.onAbort(async () => rmSync(persistTo, { recursive: true, force: true }));

  const modelDir = opts.modelDir ?? join(ROOT, "test/fixtures/models", family);

  // Local media server: the only place the edge's SSRF allowlist lets it fetch from loopback.
  let mediaServer: Server | null = null;
  let mediaUrl: string | null = null;
  if (opts.mediaDir) {
    const dir = opts.mediaDir;
    mediaServer = createHttpServer((req, res) => {
      const name = decodeURIComponent((req.url ?? "/").split("?")[0]!.slice(1));
      const file = join(dir, name);
      if (!name || name.includes("..") || !existsSync(file) || !statSync(file).isFile()) {
        res.writeHead(404).end();
        return;
      }
      const bytes = readFileSync(file);
      res.writeHead(200, { "content-length": bytes.length, "cache-control": "no-store" }).end(bytes);
    });
    await new Promise<void>((r) => mediaServer!.listen(0, "127.0.0.1", r));
    life.onAbort(() => new Promise<void>((r) => mediaServer!.close(() => r())));
    const a = mediaServer.address();
    mediaUrl = `http://127.0.0.1:${typeof a === "object" && a ? a.port : 0}`;
  }
  const mediaHost = mediaUrl ? new URL(mediaUrl).host : null;

  // Regional decode service (videos).
  let decodeUrl: string | null = null;
  let decodeProc: ChildProcess | null = null;
  let decoder: string | null = null;
  const decodeToken = randomBytes(16).toString("hex");
  // Signed worker URLs into the media store: the key is shared by the edge and the store only.
  const mediaUrlKey = randomBytes(32).toString("hex");
  let decodeArgs: string[] | null = null;
  /** Starts the decode service with `decodeArgs` (its store in a fresh temporary directory unless the args name one). */
  const startDecode = async (): Promise<void> => {
    const dec = spawn(NODE, decodeArgs!, { cwd: ROOT, detached: true, env: { ...process.env, KVEDGE_DECODE_TOKEN: decodeToken, KVEDGE_MEDIA_URL_KEY: mediaUrlKey }, stdio: ["ignore", "pipe", "pipe"] });
    life.track(dec);
    decodeProc = dec;
    pipeLogs(dec, "decode", log);
    await waitFor(async () => (await probe(`${decodeUrl}/healthz`)).status < 500, 30_000, "decode service", dec);
  };
  if (opts.decode ?? opts.mediaDir !== undefined) {
    // Its URL reaches the edge's vars and the workers' args only once it is up.
    await startOnFreshPorts(async () => {
      const decodePort = await pickPort("decode");
      decodeArgs = [join(ROOT, "services/decode/main.ts"), "--host", "127.0.0.1", "--port", String(decodePort), ...(opts.decodeArgs ?? [])];
      if (mediaHost) decodeArgs.push("--allow", mediaHost);
      decodeUrl = `http://127.0.0.1:${decodePort}`;
      await startDecode();
    });
    decoder = ((await (await fetch(`${decodeUrl}/healthz`)).json()) as { decoder?: string }).decoder ?? null;
  }

  const models = JSON.stringify([{ id: model, family, templateId: template, blockSize: pageSize }]);
  // The simulated workers speak plain http on 127.0.0.1: allow it for relay keys (development only).
  // Each worker runs with its own --api-key, derived from this secret and its URL as the edge derives it.
  const workerKeySecret = randomBytes(32).toString("hex");
  const vars: Record<string, string> = { KVEDGE_MODELS: models, RELAY_SECRET: relaySecret, ADMIN_TOKEN: adminToken, KVEDGE_RELAY_ALLOW_HTTP: "1", KVEDGE_WORKER_KEY_SECRET: workerKeySecret };
  // Local development on 127.0.0.1: open API, routing headers shown, no rate limits (production
  // defaults are closed, admin-only headers, limits on; tests that need them pass opts.vars).
  // One developer, one cache namespace (KVEDGE_KV_SHARING=shared): a prompt sent to a worker directly
  // is routable through the edge. Tests of isolation pass "per_tenant", the production default.
  Object.assign(vars, { KVEDGE_ACCESS: "public", KVEDGE_DEBUG_HEADERS: "on", KVEDGE_RATE_LIMIT: "off", KVEDGE_KV_SHARING: "shared" });
  if (mediaHost) vars.KVEDGE_MEDIA = JSON.stringify({ allowlist: [mediaHost] });
  if (decodeUrl) {
    vars.KVEDGE_DECODE_URL = decodeUrl;
    vars.DECODE_TOKEN = decodeToken;
    vars.KVEDGE_MEDIA_URL_KEY = mediaUrlKey;
  }
  if (opts.exactMedia === false) vars.KVEDGE_EXACT_MEDIA = "off";
  Object.assign(vars, opts.vars);
  // The edge: the Worker as `npm run deploy` bundles it, served by Miniflare (scripts/local-edge.ts).
  const localEdge = await prepareLocalEdge({ root: ROOT, persistTo, bindings: vars });
  life.onAbort(async () => localEdge.remove());
  process.once("exit", localEdge.remove);
  // Its port: the caller's, or picked by startEdge; kept by restartEdge.
  let edgePort = opts.edgePort ?? 0;
  let edgeUrl = "";
  // Its inspector binds any free port and reports it (kept by restartEdge): a picked one could be
  // taken first, and Miniflare then never becomes ready rather than failing.
  let inspectorPort: number | null = null;
  const spawnEdge = (): ChildProcess => {
    const p = localEdge.spawn(edgePort, opts.inspector ? (inspectorPort ?? 0) : null);
    life.track(p);
    pipeLogs(p, "edge", log, (line) => {
      const reported = INSPECTOR_REPORT.exec(line);
      const port = reported ? Number(reported[1]) : 0;
      if (port >= 1 && port <= 65535) {
        inspectorPort = port;
        // restartEdge binds it again: no later start may be handed it meanwhile.
        reservePort(port);
      }
    });
    return p;
  };
  let edge: ChildProcess | null = null;
  /** Resolves once the edge process `proc` answers its health check; fails if it exits first. */
  const edgeServing = (proc: ChildProcess, what: string): Promise<void> => waitFor(async () => (await probe(`${edgeUrl}/healthz`)).ok, 60_000, what, proc);
  /** Once the fleet is up and until stop() or restartEdge() stops it, the edge exiting means the fleet has lost it. */
  let watchingEdge = false;
  /** stop() has begun: nothing is started any more. */
  let stopped = false;
  const watchEdge = (p: ChildProcess): void => {
    p.once("exit", (code, signal) => {
      if (!watchingEdge || stopped || p !== edge) return;
      const reason = `the edge process exited on its own (${code ?? signal})`;
      log(`[fleet] ${reason}`);
      opts.onEdgeLost?.(reason);
    });
  };
  /** Starts the edge (on a picked port unless the caller chose one) and resolves with it once it answers. */
  const startEdge = async (): Promise<ChildProcess> => {
    if (opts.edgePort === undefined) edgePort = await pickPort("edge");
    edgeUrl = `http://127.0.0.1:${edgePort}`;
    const proc = spawnEdge();
    edge = proc;
    await edgeServing(proc, "the edge");
    if (opts.inspector) await waitFor(async () => inspectorPort !== null, 30_000, "the edge's inspector port", proc);
    return proc;
  };
  // Nothing knows its URL until it is up (the relays, started after it, are the first), but the
  // caller's port may be known beyond the fleet (npm start's PORT): only a picked port moves.
  const edgeUp = opts.edgePort === undefined ? startOnFreshPorts(startEdge) : startEdge();
  // Awaited once the workers are up (they start meanwhile); if one fails first, it is never awaited.
  edgeUp.catch(() => {});

  const workers: FleetWorker[] = [];
  const encoderUrls: Record<string, string[]> = {};
  // Its URL reaches its worker's args only once it is up.
  const startEncoder = (workerId: string, e: number): Promise<string> => startOnFreshPorts(async () => {
    const port = await pickPort(`${workerId}-e${e + 1}`);
    const args = [
      join(ROOT, "services/sglang-sim/main.ts"),
      "--port", String(port),
      "--encoder-only", "--enable-prefix-mm-cache",
      "--model-name", model, "--family", family, "--template", template, "--model-dir", modelDir,
      ...(opts.lockedDownWorkers !== false ? ["--locked-down-media", ...(decodeUrl ? ["--media-store", decodeUrl] : [])] : []),
    ];
    const credential = `${workerId}:${await workerMediaCredential(await importMediaUrlKey(mediaUrlKey), workerId)}`;
    const proc = spawn(NODE, args, { cwd: ROOT, detached: true, env: { ...process.env, KVEDGE_MEDIA_STORE_CREDENTIAL: credential }, stdio: ["ignore", "pipe", "pipe"] });
    life.track(proc);
    pipeLogs(proc, `${workerId}-e${e + 1}`, log);
    const url = `http://127.0.0.1:${port}`;
    await waitFor(async () => (await probe(`${url}/health`)).ok, 30_000, `encoder ${workerId}-e${e + 1}`, proc);
    return url;
  });
  const dp = opts.dpSize ?? 1;
  /** Worker `id`'s HTTP, KV event and replay ports (with DP, rank r's event ports are these + r). */
  const pickWorkerPorts = async (id: string): Promise<[number, number, number]> => {
    const port = await pickPort(id);
    if (dp === 1) return [port, await pickPort(`${id} kv`), await pickPort(`${id} replay`)];
    const first = await freePortRange(2 * dp, () => pickPort(`${id} kv`));
    return [port, first, first + dp];
  };
  /** Starts worker i on `ports`; resolves once it answers. */
  const startWorkerOn = async (i: number, extraArgs: string[], [port, kvPort, replayPort]: [number, number, number]): Promise<FleetWorker> => {
    const id = `w${i + 1}`;
    const encoders = encoderUrls[id] ?? [];
    const args = [
      join(ROOT, "services/sglang-sim/main.ts"),
      "--port", String(port),
      "--kv-port", String(kvPort),
      "--replay-port", String(replayPort),
      "--page-size", String(pageSize),
      "--capacity-tokens", String(opts.capacityTokens ?? 400_000),
      "--model-name", model,
      "--family", family,
      "--template", template,
      "--model-dir", modelDir,
      // Locked down like a production worker: media only from the store (signed URLs) and data:.
      ...(opts.lockedDownWorkers !== false ? ["--locked-down-media", ...(decodeUrl ? ["--media-store", decodeUrl] : [])] : []),
      "--api-key-env", "KVEDGE_SIM_API_KEY",
      ...(dp > 1 ? ["--dp-size", String(dp), "--enable-dp-attention"] : []),
      ...(fleetRoleOf(opts.shape ?? "unified", i, n) !== "null" ? ["--disaggregation-mode", fleetRoleOf(opts.shape ?? "unified", i, n)] : []),
      ...(encoders.length > 0 ? ["--language-only", "--encoder-urls", encoders.join(","), "--encoder-transfer-backend", "zmq_to_tokenizer"] : []),
      ...(opts.workerArgs?.[i] ?? []),
      ...extraArgs,
    ];
    if (opts.timingPreset) args.push("--timing", opts.timingPreset);
    const url = `http://127.0.0.1:${port}`;
    const apiKey = await deriveWorkerApiKey(workerKeySecret, url);
    // Its media credential: the store serves a signed URL only to the worker it was issued for.
    const mediaCredential = `${id}:${await workerMediaCredential(await importMediaUrlKey(mediaUrlKey), id)}`;
    const proc = spawn(NODE, args, { cwd: ROOT, detached: true, env: { ...process.env, KVEDGE_SIM_API_KEY: apiKey, KVEDGE_MEDIA_STORE_CREDENTIAL: mediaCredential }, stdio: ["ignore", "pipe", "pipe"] });
    life.track(proc);
    pipeLogs(proc, id, log);
    await waitFor(async () => (await probe(`${url}/health`)).ok, 30_000, `worker ${id}`, proc);
    const md = extraArgs.lastIndexOf("--model-dir");
    return { id, url, port, kvPort, replayPort, proc, relay: null, modelDir: md >= 0 ? extraArgs[md + 1]! : modelDir, apiKey };
  };
  /**
   * Starts worker i, its encoders first (once: they outlive its restarts), on fresh ports; or on
   * `ports`, its own, when a test restarts it. Its URL reaches the edge through its relay, started after it.
   */
  const startWorker = async (i: number, extraArgs: string[] = [], ports?: [number, number, number]): Promise<FleetWorker> => {
    const id = `w${i + 1}`;
    if ((opts.encoders ?? 0) > 0 && fleetRoleOf(opts.shape ?? "unified", i, n) !== "decode" && !encoderUrls[id]) {
      const urls: string[] = [];
      for (let e = 0; e < opts.encoders!; e++) urls.push(await startEncoder(id, e));
      encoderUrls[id] = urls;
    }
    if (ports) return startWorkerOn(i, extraArgs, ports);
    return startOnFreshPorts(async () => startWorkerOn(i, extraArgs, await pickWorkerPorts(id)));
  };
  for (let i = 0; i < n; i++) workers.push(await startWorker(i));

  watchEdge(await edgeUp);
  watchingEdge = true;

  const relayArgsOf = workers.map((_, i) => opts.relayArgs?.[i] ?? []);
  // Each relay keeps its view of its worker here, so a restarted relay resumes it (docs/relay.md).
  const relayStateDir = mkdtempSync(join(tmpdir(), "kvedge-relay-state-"));
  // Each relay holds only its own worker's key, issued through the admin API (RELAY_SECRET stays
  // with the edge), bound to the worker's id and URL; handed over in the environment, never argv.
  const relayKeys = new Map<string, string>();
  const relayKeyOf = async (w: FleetWorker): Promise<string> => {
    const known = relayKeys.get(`${w.id} ${w.url}`);
    if (known) return known;
    const r = await fetch(`${edgeUrl}/admin/relay-keys`, {
      method: "POST",
      headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
      // Its DP ranks, and one storage group for the fleet: workers stating one HiCache backend share its view.
      body: JSON.stringify({ model, workerId: w.id, url: w.url, dpSize: opts.dpSize ?? 1, storageGroup: "local-fleet" }),
    });
    if (r.status !== 201) throw new Error(`issuing the relay key of ${w.id}: ${r.status} ${await r.text()}`);
    const { credential } = (await r.json()) as { credential: string };
    relayKeys.set(`${w.id} ${w.url}`, credential);
    return credential;
  };
  const startRelay = async (w: FleetWorker, extraArgs: string[] = []): Promise<ChildProcess> => {
    const key = await relayKeyOf(w);
    const relay = spawn(
      NODE,
      [
        join(ROOT, "services/relay/main.ts"),
        "--worker-url", w.url,
        "--index-url", `ws://127.0.0.1:${edgePort}`,
        "--worker-id", w.id,
        "--model", model,
        "--key-env", "KVEDGE_RELAY_KEY",
        "--model-dir", w.modelDir,
        "--state-file", join(relayStateDir, `${w.id}.json`),
        "--state-interval-ms", "500",
        ...(relayArgsOf[workers.indexOf(w)] ?? []),
        ...extraArgs,
      ],
      { cwd: ROOT, detached: true, env: { ...process.env, KVEDGE_RELAY_KEY: key, KVEDGE_WORKER_API_KEY: w.apiKey }, stdio: ["ignore", "pipe", "pipe"] },
    );
    life.track(relay);
    pipeLogs(relay, `relay-${w.id}`, log);
    return relay;
  };
  if (opts.relays !== false) for (const w of workers) w.relay = await startRelay(w);

  const admin = async (path: string): Promise<unknown> => {
    const r = await fetch(`${edgeUrl}${path}`, { headers: { authorization: `Bearer ${adminToken}` } });
    if (!r.ok) throw new Error(`admin ${path}: ${r.status} ${await r.text()}`);
    return r.json();
  };

  const waitForSync = async (timeoutMs = 30_000): Promise<void> => {
    await waitFor(
      async () => {
        const body = (await admin(`/admin/workers?model=${encodeURIComponent(model)}`)) as { workers: { workerId: string; synced: boolean; status: string }[] };
        const live = workers.filter((w) => w.proc.exitCode === null && w.proc.signalCode === null).map((w) => w.id);
        // A DP worker is synced when every rank's target (`<worker>#<rank>`) is.
        const targets = live.flatMap((id) => ((opts.dpSize ?? 1) > 1 ? Array.from({ length: opts.dpSize! }, (_, r) => `${id}#${r}`) : [id]));
        // A draining worker takes no new request but its view stays exact: synced all the same.
        return targets.every((id) => body.workers.some((x) => x.workerId === id && x.synced && (x.status === "up" || x.status === "draining")));
      },
      timeoutMs,
      "relays to sync",
    );
  };
  if (opts.relays !== false) await waitForSync();

  const workerExtraArgs: string[][] = workers.map(() => []);
  const signalGroup = (p: ChildProcess | null, sig: NodeJS.Signals): void => {
    if (!p?.pid || p.exitCode !== null || p.signalCode !== null) return;
    try {
      process.kill(-p.pid, sig);
    } catch {
      p.kill(sig);
    }
  };

  return {
    edgeUrl,
    inspectorPort,
    mediaUrl,
    decodeUrl,
    decoder,
    model,
    adminToken,
    relaySecret,
    workers,
    encoderUrls,
    admin,
    waitForSync,
    stopDecode: () => stopProc(decodeProc, "SIGKILL"),
    async restartDecode() {
      if (!decodeArgs) throw new Error("the fleet runs no decode service");
      await stopProc(decodeProc, "SIGTERM");
      await startDecode();
    },
    async addWorker(extraArgs: string[] = [], relayArgs: string[] = []) {
      const w = await startWorker(workers.length, extraArgs);
      workers.push(w);
      workerExtraArgs.push(extraArgs);
      relayArgsOf.push(relayArgs);
      if (opts.relays !== false) {
        w.relay = await startRelay(w);
        await waitForSync();
      }
      return w;
    },
    async killWorker(i: number) {
      const w = workers[i]!;
      await stopProc(w.proc, "SIGKILL");
    },
    async restartWorker(i: number, downMs = 1500) {
      const w = workers[i]!;
      await stopProc(w.proc, "SIGKILL");
      await new Promise((r) => setTimeout(r, downMs));
      const fresh = await startWorker(i, workerExtraArgs[i] ?? [], [w.port, w.kvPort, w.replayPort]);
      w.proc = fresh.proc;
    },
    async killRelay(i: number) {
      const w = workers[i]!;
      await stopProc(w.relay, "SIGKILL");
    },
    async startRelay(i: number, extraArgs: string[] = []) {
      const w = workers[i]!;
      await stopProc(w.relay, "SIGKILL");
      w.relay = await startRelay(w, extraArgs);
    },
    pauseRelays() {
      for (const w of workers) signalGroup(w.relay, "SIGSTOP");
    },
    resumeRelays() {
      for (const w of workers) signalGroup(w.relay, "SIGCONT");
    },
    pauseDecode() {
      signalGroup(decodeProc, "SIGSTOP");
    },
    resumeDecode() {
      signalGroup(decodeProc, "SIGCONT");
    },
    async restartEdge() {
      watchingEdge = false;
      await stopProc(edge, "SIGTERM");
      if (stopped) throw new Error("the fleet was stopped during restartEdge");
      edge = spawnEdge();
      watchEdge(edge);
      watchingEdge = true;
      await edgeServing(edge, "the edge (restart)");
    },
    processes() {
      const out: { name: string; pid: number }[] = [];
      const add = (name: string, p: ChildProcess | null) => {
        if (p?.pid && p.exitCode === null && p.signalCode === null) out.push({ name, pid: p.pid });
      };
      add("edge", edge);
      add("decode", decodeProc);
      for (const w of workers) {
        add(w.id, w.proc);
        add(`relay-${w.id}`, w.relay);
      }
      return out;
    },
    async stop() {
      stopped = true;
      watchingEdge = false;
      await life.end();
      if (mediaServer) await new Promise<void>((r) => mediaServer!.close(() => r()));
      if (ownsPersist) rmSync(persistTo, { recursive: true, force: true });
      localEdge.remove();
      rmSync(relayStateDir, { recursive: true, force: true });
      process.removeListener("exit", localEdge.remove);
    },
  };
}
