// The real edge for the benchmarks: functions/index.ts bundled as wrangler bundles it (esbuild,
// workerd conditions, *.wasm as precompiled modules) and served by workerd itself (workerd-serve.mjs) with the
// real Durable Objects, next to one simulated SGLang worker (services/sglang-sim, `instant` timing so
// the GPU costs nothing), its relay (services/relay, real KV events over the real relay socket), a
// local media server (the only loopback host the edge's SSRF allowlist admits) and, when asked, the
// regional decode service (services/decode). Every part is the shipped code; nothing is copied.
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { rmSync } from "node:fs";
import { createServer } from "node:http";
import { join } from "node:path";
import { bundleForWorkerd, ROOT } from "./workerd.mjs";
import { serveWorkerd } from "./workerd-serve.mjs";
import { importMediaUrlKey, workerMediaCredential } from "../../src/media/signed-url.ts";
import { PortClashError, freePort, reportsBindFailure, startOnFreshPorts } from "../../scripts/fleet-ports.ts";

const OUT_DIR = join(ROOT, "bench/results/tmp/edge-real");
/**
 * The rate-limited edge's `KVEDGE_RATE_LIMIT`: the chat bucket at the schema's largest rate and
 * burst (src/config/config.ts RateLimitsSchema), so no bench request is refused; the work per
 * request (one take, the x-ratelimit headers) is the default's, which no rate changes. No token quota
 * (none by default).
 */
const RATE_LIMIT_NEVER_REFUSES = JSON.stringify({ requestsPerMinute: 10_000_000, burst: 1_000_000 });
const NODE = process.execPath;

function bundleEdge() {
  return bundleForWorkerd(join(ROOT, "functions/index.ts"), join(OUT_DIR, "index.mjs"), ["cloudflare:*", "node:*"]);
}

async function waitFor(check, ms, what, proc) {
  const end = Date.now() + ms;
  let tail = "";
  proc?.stderr?.on("data", (d) => (tail = (tail + d).slice(-2000)));
  while (Date.now() < end) {
    if (proc && proc.exitCode !== null) {
      // What it printed last may still be in its pipe when the exit is seen.
      if (!proc.stderr.readableEnded) await Promise.race([new Promise((r) => proc.stderr.once("end", r)), new Promise((r) => setTimeout(r, 1000))]);
      // A port handed out can be taken before the process binds it: the fleet starts again on fresh ones.
      const Failure = reportsBindFailure(tail) ? PortClashError : Error;
      throw new Failure(`${what} exited (${proc.exitCode}): ${tail}`);
    }
    try {
      if (await check()) return;
    } catch {}
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out waiting for ${what}: ${tail}`);
}

function child(args, env = {}) {
  const p = spawn(NODE, args, { cwd: ROOT, detached: true, env: { ...process.env, ...env }, stdio: ["ignore", "ignore", "pipe"] });
  p.stderr.setEncoding("utf8");
  return p;
}

function kill(p) {
  if (!p || p.exitCode !== null || p.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const t = setTimeout(() => {
      try {
        process.kill(-p.pid, "SIGKILL");
      } catch {}
      resolve();
    }, 3000);
    p.once("exit", () => {
      clearTimeout(t);
      resolve();
    });
    try {
      process.kill(-p.pid, "SIGTERM");
    } catch {
      resolve();
    }
  });
}

/**
 * Starts the fleet. `media`: { path: Buffer } served with an ETag (and `mediaCacheControl` as its
 * Cache-Control when given, e.g. "max-age=3600" for an origin that states freshness); `decode`: start the decode service
 * (wasm ffmpeg) for videos; `inspectorPort`: open workerd's inspector there; `v8Flags`: workerd's V8 flags
 * (profiling: --perf-basic-prof); `splitIndex`: run the routing index in its own workerd process (the relay
 * connects there; the edge reaches it by RPC); `workerArgs`: more flags for the simulated worker (after its own,
 * so they override: e.g. ["--decode-ms-per-token", "1"] paces a streamed answer's frames); `proxyFloor` (with splitIndex):
 * serve the bench's proxy-floor Worker (bench/edge/proxy-floor.mjs) in the edge's process, forwarding to the
 * worker; `rateLimitedEdge` (with splitIndex): a second edge Worker in the edge's process with rate
 * limiting on (production's default buckets, at RATE_LIMIT_NEVER_REFUSES), its RateLimiter objects
 * in the index process (bench/lib/workerd-serve.mjs). Returns { edgeUrl, workerUrl, floorUrl and
 * limitedUrl (or null), edgePid, indexPid, admin(path), stop() }.
 */
export function startEdgeFleet(options = {}) {
  return startOnFreshPorts(() => startEdgeFleetOnce(options));
}

async function startEdgeFleetOnce({ model = "Qwen/Qwen3-VL-8B-Instruct", family = "qwen3_vl", template = "qwen3vl-instruct", media = {}, decode = false, limits = null, inspectorPort = undefined, v8Flags = [], splitIndex = false, workerArgs = [], proxyFloor = false, rateLimitedEdge = false, mediaCacheControl = null } = {}) {
  const scriptPath = await bundleEdge();
  const procs = [];
  const servers = [];
  const cleanup = [];
  // A suite that throws never reaches stop(): the fleet's detached process groups end with this process.
  const killOnExit = () => {
    for (const p of procs)
      if (p.exitCode === null && p.signalCode === null)
        try {
          process.kill(-p.pid, "SIGKILL");
        } catch {}
  };
  process.once("exit", killOnExit);
  const stop = async () => {
    process.off("exit", killOnExit);
    await Promise.all(procs.map(kill));
    for (const s of servers) s.close();
    for (const f of cleanup) f();
  };
  try {
    // Media server: conditional GETs answered with 304 (the decode service revalidates its cache).
    const mediaServer = createServer((req, res) => {
      const body = media[new URL(req.url, "http://x").pathname];
      if (!body) return res.writeHead(404).end();
      const etag = `"${body.length}-${body[body.length >> 1]}"`;
      const freshness = mediaCacheControl ? { "cache-control": mediaCacheControl } : {};
      if (req.headers["if-none-match"] === etag) return res.writeHead(304, { etag, ...freshness }).end();
      res.writeHead(200, { "content-type": "application/octet-stream", "content-length": body.length, etag, ...freshness });
      res.end(req.method === "HEAD" ? undefined : body);
    });
    servers.push(mediaServer);
    await new Promise((r) => mediaServer.listen(0, "127.0.0.1", r));
    const mediaUrl = `http://127.0.0.1:${mediaServer.address().port}`;

    const relaySecret = randomBytes(24).toString("hex");
    const adminToken = randomBytes(24).toString("hex");
    const bindings = {
      KVEDGE_MODELS: JSON.stringify([{ id: model, family, templateId: template, blockSize: 16 }]),
      RELAY_SECRET: relaySecret,
      ADMIN_TOKEN: adminToken,
      KVEDGE_MEDIA: JSON.stringify({ allowlist: [new URL(mediaUrl).host] }),
      // As the local fleet: plain-http workers on loopback may hold relay keys, the API is open and
      // unthrottled (the bench sends hundreds of requests). Routing headers stay admin-only, as in
      // production; the bench's edge requests carry the admin token.
      KVEDGE_RELAY_ALLOW_HTTP: "1",
      KVEDGE_ACCESS: "public",
      KVEDGE_RATE_LIMIT: "off",
      // The simulated worker runs without --api-key, so the bench's direct requests (the baseline
      // the edge's overhead is measured against) need none; the edge then sends no credential either.
      KVEDGE_WORKER_AUTH: "none",
    };
    if (limits) bindings.KVEDGE_LIMITS = JSON.stringify(limits);
    let mediaStoreCredential = null;
    if (decode) {
      const port = await freePort();
      const token = randomBytes(16).toString("hex");
      const urlKey = randomBytes(32).toString("hex");
      const dec = child([join(ROOT, "services/decode/main.ts"), "--host", "127.0.0.1", "--port", String(port), "--allow", new URL(mediaUrl).host], { KVEDGE_DECODE_TOKEN: token, KVEDGE_MEDIA_URL_KEY: urlKey });
      procs.push(dec);
      await waitFor(async () => (await fetch(`http://127.0.0.1:${port}/healthz`)).ok, 60_000, "decode service", dec);
      bindings.KVEDGE_DECODE_URL = `http://127.0.0.1:${port}`;
      bindings.DECODE_TOKEN = token;
      bindings.KVEDGE_MEDIA_URL_KEY = urlKey;
      // The store serves a signed URL only to the worker it names (w1, as registered below).
      mediaStoreCredential = `w1:${await workerMediaCredential(await importMediaUrlKey(urlKey), "w1")}`;
    }

    // workerd serves the bundle as production runs it (bench/lib/workerd-serve.mjs): no Miniflare
    // entry Worker in front of it, no outbound interceptor behind it.
    const edgePort = await freePort();
    const storageDir = join(OUT_DIR, `do-storage-${process.pid}-${edgePort}`);
    cleanup.push(() => rmSync(storageDir, { recursive: true, force: true }));
    const serveOptions = { dir: OUT_DIR, vars: bindings, compatibilityDate: "2026-07-30", compatibilityFlags: ["enable_request_signal"], storageDir };
    // splitIndex: the routing index's objects in a second workerd process (the same bundle, its own
    // socket for the relay, a JS RPC socket for the edge), so /proc accounts the two apart.
    let index = null;
    if (splitIndex) {
      const [indexPort, indexRpcPort, limiterRpcPort] = [await freePort(), await freePort(), rateLimitedEdge ? await freePort() : undefined];
      index = serveWorkerd({ ...serveOptions, port: indexPort, indexRpcPort, limiterRpcPort, v8Flags, configName: "workerd-index.capnp" });
      index.stderr.setEncoding("utf8");
      procs.push(index);
      index.url = `http://127.0.0.1:${indexPort}`;
      index.rpcAddress = `127.0.0.1:${indexRpcPort}`;
      index.limiterAddress = limiterRpcPort ? `127.0.0.1:${limiterRpcPort}` : undefined;
      await waitFor(async () => (await fetch(`${index.url}/healthz`)).ok, 60_000, "workerd (routing index)", index);
    }
    // The worker's port is taken before the edge process starts: the proxy floor's config names it.
    const [port, kvPort, replayPort] = [await freePort(), await freePort(), await freePort()];
    const workerUrl = `http://127.0.0.1:${port}`;
    if (proxyFloor && !index) throw new Error("startEdgeFleet: proxyFloor needs splitIndex");
    const floorPort = proxyFloor ? await freePort() : null;
    if (rateLimitedEdge && !index) throw new Error("startEdgeFleet: rateLimitedEdge needs splitIndex");
    const limitedPort = rateLimitedEdge ? await freePort() : null;
    const wd = serveWorkerd({
      ...serveOptions,
      port: edgePort,
      inspectorPort,
      v8Flags,
      remoteIndex: index?.rpcAddress,
      proxyFloor: floorPort ? { port: floorPort, upstream: workerUrl } : undefined,
      rateLimitedEdge: limitedPort ? { port: limitedPort, remoteLimiter: index.limiterAddress, rateLimit: RATE_LIMIT_NEVER_REFUSES } : undefined,
      storageDir: index ? `${storageDir}-edge` : storageDir,
    });
    if (index) cleanup.push(() => rmSync(`${storageDir}-edge`, { recursive: true, force: true }));
    wd.stderr.setEncoding("utf8");
    procs.push(wd);
    const edgeUrl = `http://127.0.0.1:${edgePort}`;
    await waitFor(async () => (await fetch(`${edgeUrl}/healthz`)).ok, 60_000, "workerd", wd);
    const limitedUrl = limitedPort ? `http://127.0.0.1:${limitedPort}` : null;
    if (limitedUrl) await waitFor(async () => (await fetch(`${limitedUrl}/healthz`)).ok, 60_000, "workerd (rate-limited edge)", wd);

    const modelDir = join(ROOT, "test/fixtures/models", family);
    const worker = child([
      join(ROOT, "services/sglang-sim/main.ts"),
      ...["--port", port, "--kv-port", kvPort, "--replay-port", replayPort, "--page-size", 16, "--capacity-tokens", 2_000_000].map(String),
      ...["--model-name", model, "--family", family, "--template", template, "--model-dir", modelDir, "--timing", "instant", "--context-length", "262144"],
      ...(decode ? ["--media-store", bindings.KVEDGE_DECODE_URL] : []),
      ...workerArgs,
    ], mediaStoreCredential ? { KVEDGE_MEDIA_STORE_CREDENTIAL: mediaStoreCredential } : {});
    procs.push(worker);
    await waitFor(async () => (await fetch(`${workerUrl}/health`)).ok, 60_000, "simulated worker", worker);
    const admin = async (path, init = {}) => {
      const r = await fetch(`${edgeUrl}${path}`, { ...init, headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" } });
      if (!r.ok) throw new Error(`admin ${path}: ${r.status} ${await r.text()}`);
      return r.json();
    };
    // The relay's own key, issued through the admin API (RELAY_SECRET stays with the edge), in its environment.
    const { credential } = await admin("/admin/relay-keys", { method: "POST", body: JSON.stringify({ model, workerId: "w1", url: workerUrl }) });
    const relay = child(
      [join(ROOT, "services/relay/main.ts"), "--worker-url", workerUrl, "--index-url", `ws://127.0.0.1:${new URL(index?.url ?? edgeUrl).port}`, "--worker-id", "w1", "--model", model, "--key-env", "KVEDGE_RELAY_KEY", "--model-dir", modelDir, "--log-level", "warn"],
      { KVEDGE_RELAY_KEY: credential },
    );
    procs.push(relay);
    await waitFor(
      async () => (await admin(`/admin/workers?model=${encodeURIComponent(model)}`)).workers.some((w) => w.workerId === "w1" && w.synced && w.status === "up"),
      60_000,
      "relay sync",
      relay,
    );
    return { edgeUrl, workerUrl, floorUrl: floorPort ? `http://127.0.0.1:${floorPort}` : null, limitedUrl, mediaUrl, adminToken, admin, stop, edgePid: wd.pid, indexPid: index?.pid ?? null, workerPid: worker.pid, relayPid: relay.pid };
  } catch (e) {
    await stop();
    throw e;
  }
}
