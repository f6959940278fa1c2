// The bundled edge Worker served by workerd itself, configured as production runs it: the Worker
// on its own HTTP socket, its Durable Objects (SQLite storage on disk), and outbound fetches
// straight to the network. Miniflare puts two dev-only Workers in the path of every request (an
// entry Worker in front and an outbound interceptor behind, each a JS hop that pipes the bodies),
// which the benchmarks would otherwise count as the edge's overhead. The benchmarks also run the
// Durable Objects in a second workerd process (indexRpcPort / remoteIndex below), so each
// process's CPU is one side's.
import { spawn } from "node:child_process";
import { copyFileSync, mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";

const require = createRequire(import.meta.url);

/** A Cap'n Proto text string literal. */
const str = (s) => JSON.stringify(String(s));

/**
 * The main module of the edge process when the routing index runs in a process of its own: the
 * bundle's fetch handler with `env.ROUTING_INDEX` answered by the index process's objects. A stub's
 * method call is one JS RPC call on the `INDEX_RPC` service binding, an external service whose
 * Cap'n Proto connection workerd opens once for the process and reopens after a disconnect
 * (ExternalHttpService::getOutgoingCapnp, cloudflare/workerd src/workerd/server/server.c++ at
 * b8474d1c): one capnp call per method call, as a Durable Object stub's call over the runtime's
 * channel. A workerdDebugPort client cannot stand in for that across requests: connect() and
 * getActor() register their connection with the calling request's IoContext (addObject,
 * src/workerd/server/workerd-debug-port-client.c++ at 6a6df7f2), so another request's use throws
 * "Cannot perform I/O on behalf of a different request" (IoContext::checkFarGet), and a client per
 * stub costs a TCP connect and a capnp bootstrap per index call. The local namespace (same class
 * and uniqueKey as the index process's) only derives the object ids. `env.RATE_LIMITER` goes the
 * same way when the Worker has a `LIMITER_RPC` binding (the rate-limited edge: each take one capnp
 * call to the index process's RateLimiter object, as a remote Durable Object's). The env wrapper
 * is made once per env, so the Worker's config cache (keyed by env) still holds.
 */
const SPLIT_ENTRY = `import edge from "./index.mjs";
export * from "./index.mjs";
const wrapped = new WeakMap();
function remoteNamespace(ids, rpc) {
  const stub = (id) => {
    const key = id.toString();
    return new Proxy({}, { get: (_, method) => (method === "then" ? undefined : (...args) => rpc.call(key, method, args)) });
  };
  return { idFromName: (name) => ids.idFromName(name), get: (id) => stub(id), getByName: (name) => stub(ids.idFromName(name)) };
}
export default {
  fetch(request, env, ctx) {
    let e = wrapped.get(env);
    if (!e) {
      e = { ...env, ROUTING_INDEX: remoteNamespace(env.ROUTING_INDEX, env.INDEX_RPC) };
      if (env.LIMITER_RPC) e.RATE_LIMITER = remoteNamespace(env.RATE_LIMITER, env.LIMITER_RPC);
      wrapped.set(env, e);
    }
    return edge.fetch(request, e, ctx);
  },
};
`;

/**
 * The main module of the index process of a split: the bundle, plus the entrypoints its RPC sockets
 * (loopback only) serve, which hand each call to the named routing-index object (IndexGateway) or
 * rate-limiter object (RateLimiterGateway) in this process. An object result of that inner call
 * carries a Symbol.dispose; returned as is, the edge would hold a call pipeline for it until its
 * request ends (src/workerd/api/worker-rpc.c++ at 407e074c), which a Durable Object's plain result
 * does not cost, so the gateway drops it.
 */
const INDEX_GATEWAY = `import { WorkerEntrypoint } from "cloudflare:workers";
export * from "./index.mjs";
export { default } from "./index.mjs";
async function forward(ns, id, method, args) {
  const result = await ns.get(ns.idFromString(id))[method](...args);
  if (result !== null && typeof result === "object" && Object.hasOwn(result, Symbol.dispose)) delete result[Symbol.dispose];
  return result;
}
export class RateLimiterGateway extends WorkerEntrypoint {
  call(id, method, args) {
    return forward(this.env.RATE_LIMITER, id, method, args);
  }
}
export class IndexGateway extends WorkerEntrypoint {
  call(id, method, args) {
    return forward(this.env.ROUTING_INDEX, id, method, args);
  }
  /** The proxy floor's stand-in for a route or settle call (bench/edge/proxy-floor.mjs): the transport alone. */
  floorPing(n) {
    return n;
  }
}
`;

/** The Cap'n Proto CONNECT hosts of the index process's RPC sockets (any fixed names both ends share). */
const CAPNP_HOST = "kvedge-index-rpc";
const LIMITER_CAPNP_HOST = "kvedge-rate-limiter-rpc";

/**
 * Starts `workerd serve` on `dir` (the bundle: index.mjs plus its *.wasm modules) with text
 * bindings `vars`, on 127.0.0.1:`port`. Returns the child process. `indexRpcPort`: this process
 * serves its routing-index objects by JS RPC there (the index process of a split). `remoteIndex`:
 * the RPC address of the process whose routing-index objects this one uses (the edge process of a
 * split). `proxyFloor` ({ port, upstream }, with remoteIndex): the bench's proxy-floor Worker
 * (bench/edge/proxy-floor.mjs) in this process too, on 127.0.0.1:`port`, forwarding to `upstream`
 * and calling the same index RPC service. `limiterRpcPort`: this process serves its rate-limiter
 * objects by JS RPC there (the index process). `rateLimitedEdge` ({ port, remoteLimiter, rateLimit },
 * with remoteIndex): a second edge Worker (the same bundle, its own isolate) on 127.0.0.1:`port`
 * with `KVEDGE_RATE_LIMIT` = `rateLimit`, whose RateLimiter objects are those served at
 * `remoteLimiter` (a Cap'n Proto connection of its own, one call per take); the proxy floor can
 * reach them too (its `?rl=1`).
 */
export function serveWorkerd({ dir, vars, port, compatibilityDate, compatibilityFlags = [], storageDir, inspectorPort, v8Flags = [], indexRpcPort, limiterRpcPort, remoteIndex, proxyFloor, rateLimitedEdge, configName = "workerd.capnp" }) {
  mkdirSync(storageDir, { recursive: true });
  const modules = [`(name = "index.mjs", esModule = embed "index.mjs")`];
  if (remoteIndex) {
    writeFileSync(join(dir, "split-entry.mjs"), SPLIT_ENTRY);
    modules.unshift(`(name = "split-entry.mjs", esModule = embed "split-entry.mjs")`);
  }
  if (indexRpcPort) {
    writeFileSync(join(dir, "index-gateway.mjs"), INDEX_GATEWAY);
    modules.unshift(`(name = "index-gateway.mjs", esModule = embed "index-gateway.mjs")`);
  }
  for (const f of readdirSync(dir).filter((f) => f.endsWith(".wasm")).sort()) modules.push(`(name = ${str(f)}, wasm = embed ${str(f)})`);
  const bindings = Object.entries(vars).map(([k, v]) => `(name = ${str(k)}, text = ${str(v)})`);
  bindings.push(`(name = "ROUTING_INDEX", durableObjectNamespace = "RoutingIndex")`, `(name = "RATE_LIMITER", durableObjectNamespace = "RateLimiter")`);
  const services = [`(name = "edge", worker = .edge)`, `(name = "internet", network = (allow = ["public", "private", "local"]))`, `(name = "do-storage", disk = (path = ${str(storageDir)}, writable = true))`];
  const sockets = [`(name = "http", address = ${str(`127.0.0.1:${port}`)}, http = (), service = "edge")`];
  if (remoteIndex) {
    services.push(`(name = "routing-index", external = (address = ${str(remoteIndex)}, http = (capnpConnectHost = ${str(CAPNP_HOST)})))`);
    bindings.push(`(name = "INDEX_RPC", service = "routing-index")`);
  }
  // The rate-limited edge's and the floor's namespace bindings name the edge Worker's classes: they
  // only derive object ids (the same uniqueKey as the index process's), the objects are remote.
  const limiterBindings = [`(name = "LIMITER_RPC", service = "rate-limiter")`, `(name = "RATE_LIMITER", durableObjectNamespace = (className = "RateLimiter", serviceName = "edge"))`];
  let limitedWorker = "";
  if (rateLimitedEdge) {
    if (!remoteIndex) throw new Error("serveWorkerd: rateLimitedEdge needs remoteIndex (its index calls go to the index process)");
    services.push(`(name = "rate-limiter", external = (address = ${str(rateLimitedEdge.remoteLimiter)}, http = (capnpConnectHost = ${str(LIMITER_CAPNP_HOST)})))`, `(name = "edge-rate-limited", worker = .edgeRateLimited)`);
    sockets.push(`(name = "edge-rate-limited", address = ${str(`127.0.0.1:${rateLimitedEdge.port}`)}, http = (), service = "edge-rate-limited")`);
    const limitedBindings = [
      ...Object.entries({ ...vars, KVEDGE_RATE_LIMIT: rateLimitedEdge.rateLimit }).map(([k, v]) => `(name = ${str(k)}, text = ${str(v)})`),
      `(name = "ROUTING_INDEX", durableObjectNamespace = (className = "RoutingIndex", serviceName = "edge"))`,
      `(name = "INDEX_RPC", service = "routing-index")`,
      ...limiterBindings,
    ];
    limitedWorker = `const edgeRateLimited :Workerd.Worker = (
  modules = [${modules.join(", ")}],
  compatibilityDate = ${str(compatibilityDate)},
  compatibilityFlags = [${compatibilityFlags.map(str).join(", ")}],
  bindings = [${limitedBindings.join(", ")}],
  globalOutbound = "internet",
);
`;
  }
  let floorWorker = "";
  if (proxyFloor) {
    if (!remoteIndex) throw new Error("serveWorkerd: proxyFloor needs remoteIndex (its RPCs go to the index process)");
    copyFileSync(join(import.meta.dirname, "../edge/proxy-floor.mjs"), join(dir, "proxy-floor.mjs"));
    services.push(`(name = "proxy-floor", worker = .proxyFloor)`);
    sockets.push(`(name = "proxy-floor", address = ${str(`127.0.0.1:${proxyFloor.port}`)}, http = (), service = "proxy-floor")`);
    floorWorker = `const proxyFloor :Workerd.Worker = (
  modules = [(name = "proxy-floor.mjs", esModule = embed "proxy-floor.mjs")],
  compatibilityDate = ${str(compatibilityDate)},
  compatibilityFlags = [${compatibilityFlags.map(str).join(", ")}],
  bindings = [(name = "INDEX_RPC", service = "routing-index"), (name = "UPSTREAM", text = ${str(proxyFloor.upstream)})${rateLimitedEdge ? `, ${limiterBindings.join(", ")}, (name = "KVEDGE_RATE_LIMIT", text = ${str(rateLimitedEdge.rateLimit)})` : ""}],
  globalOutbound = "internet",
);
`;
  }
  if (indexRpcPort) sockets.push(`(name = "index-rpc", address = ${str(`127.0.0.1:${indexRpcPort}`)}, http = (capnpConnectHost = ${str(CAPNP_HOST)}), service = (name = "edge", entrypoint = "IndexGateway"))`);
  if (limiterRpcPort) sockets.push(`(name = "limiter-rpc", address = ${str(`127.0.0.1:${limiterRpcPort}`)}, http = (capnpConnectHost = ${str(LIMITER_CAPNP_HOST)}), service = (name = "edge", entrypoint = "RateLimiterGateway"))`);
  const config = `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [
    ${services.join(",\n    ")},
  ],
  sockets = [${sockets.join(", ")}],
  v8Flags = [${v8Flags.map(str).join(", ")}],
);
const edge :Workerd.Worker = (
  modules = [${modules.join(", ")}],
  compatibilityDate = ${str(compatibilityDate)},
  compatibilityFlags = [${compatibilityFlags.map(str).join(", ")}],
  bindings = [${bindings.join(", ")}],
  durableObjectNamespaces = [
    (className = "RoutingIndex", uniqueKey = "kvedge-bench-routing-index", enableSql = true),
    (className = "RateLimiter", uniqueKey = "kvedge-bench-rate-limiter", enableSql = true),
  ],
  durableObjectStorage = (localDisk = "do-storage"),
  globalOutbound = "internet",
);
${floorWorker}${limitedWorker}`;
  const file = join(dir, configName);
  writeFileSync(file, config);
  const bin = require.resolve("workerd/bin/workerd");
  const args = ["serve", file, "--experimental", ...(inspectorPort ? [`--inspector-addr=127.0.0.1:${inspectorPort}`] : [])];
  return spawn(bin, args, { cwd: dir, detached: true, stdio: ["ignore", "ignore", "pipe"] });
}
