// The bundled edge Worker served by workerd itself, configured as production runs it: the Worker
// on its own HTTP socket, its Durable Objects (SQLite storage on disk), and outbound fetches
// straight to the network. Miniflare puts two dev-only Workers in the path of every request (an
// entry Worker in front and an outbound interceptor behind, each a JS hop that pipes the bodies),
// which the benchmarks would otherwise count as the edge's overhead. The benchmarks also run the
// Durable Objects in a second workerd process (debugPort / remoteIndex below), so each process's CPU
// is one side's.
import { spawn } from "node:child_process";
import { mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";

const require = createRequire(import.meta.url);

/** A Cap'n Proto text string literal. */
const str = (s) => JSON.stringify(String(s));

/**
 * The main module of the edge process when the routing index runs in a process of its own: the
 * bundle's fetch handler with `env.ROUTING_INDEX` answered by the index process's objects. Each stub
 * is reached through workerd's debug-port RPC (`workerdDebugPort` binding, workerd.capnp: connect →
 * getActor(service, class, id) → the same JS RPC methods), one connection per stub, since a
 * connection is an I/O object of the request that opened it. The local namespace (same class and
 * uniqueKey as the index process's) only derives the object ids. The env wrapper is made once per
 * env, so the Worker's config cache (keyed by env) still holds.
 */
const SPLIT_ENTRY = `import edge from "./index.mjs";
export * from "./index.mjs";
const wrapped = new WeakMap();
function remoteIndex(env) {
  const ids = env.ROUTING_INDEX;
  const stub = (id) => {
    const actor = (async () => (await env.INDEX_DEBUG_PORT.connect(env.INDEX_DEBUG_ADDRESS)).getActor("edge", "RoutingIndex", id.toString()))();
    return new Proxy({}, { get: (_, method) => (method === "then" ? undefined : (...args) => actor.then((a) => a[method](...args))) });
  };
  return { idFromName: (name) => ids.idFromName(name), get: (id) => stub(id), getByName: (name) => stub(ids.idFromName(name)) };
}
export default {
  fetch(request, env, ctx) {
    let e = wrapped.get(env);
    if (!e) wrapped.set(env, (e = { ...env, ROUTING_INDEX: remoteIndex(env) }));
    return edge.fetch(request, e, ctx);
  },
};
`;

/**
 * Starts `workerd serve` on `dir` (the bundle: index.mjs plus its *.wasm modules) with text
 * bindings `vars`, on 127.0.0.1:`port`. Returns the child process. `debugPort`: this process
 * accepts debug-port RPC there (the index process of a split). `remoteIndex`: the debug-port
 * address of the process whose routing-index objects this one uses (the edge process of a split).
 */
export function serveWorkerd({ dir, vars, port, compatibilityDate, compatibilityFlags = [], storageDir, inspectorPort, v8Flags = [], debugPort, remoteIndex, configName = "workerd.capnp" }) {
  mkdirSync(storageDir, { recursive: true });
  const modules = [`(name = "index.mjs", esModule = embed "index.mjs")`];
  if (remoteIndex) {
    writeFileSync(join(dir, "split-entry.mjs"), SPLIT_ENTRY);
    modules.unshift(`(name = "split-entry.mjs", esModule = embed "split-entry.mjs")`);
  }
  for (const f of readdirSync(dir).filter((f) => f.endsWith(".wasm")).sort()) modules.push(`(name = ${str(f)}, wasm = embed ${str(f)})`);
  const bindings = Object.entries(vars).map(([k, v]) => `(name = ${str(k)}, text = ${str(v)})`);
  bindings.push(`(name = "ROUTING_INDEX", durableObjectNamespace = "RoutingIndex")`, `(name = "RATE_LIMITER", durableObjectNamespace = "RateLimiter")`);
  if (remoteIndex) bindings.push(`(name = "INDEX_DEBUG_PORT", workerdDebugPort = void)`, `(name = "INDEX_DEBUG_ADDRESS", text = ${str(remoteIndex)})`);
  const config = `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [
    (name = "edge", worker = .edge),
    (name = "internet", network = (allow = ["public", "private", "local"])),
    (name = "do-storage", disk = (path = ${str(storageDir)}, writable = true)),
  ],
  sockets = [(name = "http", address = ${str(`127.0.0.1:${port}`)}, http = (), service = "edge")],
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
`;
  const file = join(dir, configName);
  writeFileSync(file, config);
  const bin = require.resolve("workerd/bin/workerd");
  const args = ["serve", file, "--experimental", ...(inspectorPort ? [`--inspector-addr=127.0.0.1:${inspectorPort}`] : []), ...(debugPort ? [`--debug-port=127.0.0.1:${debugPort}`] : [])];
  return spawn(bin, args, { cwd: dir, detached: true, stdio: ["ignore", "ignore", "pipe"] });
}
