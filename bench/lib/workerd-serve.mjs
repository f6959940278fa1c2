// The bundled edge Worker served by workerd itself, configured as production runs it: the Worker
// on its own HTTP socket, its Durable Objects (SQLite storage on disk), and outbound fetches
// straight to the network. Miniflare puts two dev-only Workers in the path of every request (an
// entry Worker in front and an outbound interceptor behind, each a JS hop that pipes the bodies),
// which the benchmarks would otherwise count as the edge's overhead.
import { spawn } from "node:child_process";
import { mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";

const require = createRequire(import.meta.url);

/** A Cap'n Proto text string literal. */
const str = (s) => JSON.stringify(String(s));

/**
 * Starts `workerd serve` on `dir` (the bundle: index.mjs plus its *.wasm modules) with text
 * bindings `vars`, on 127.0.0.1:`port`. Returns the child process.
 */
export function serveWorkerd({ dir, vars, port, compatibilityDate, compatibilityFlags = [], storageDir, inspectorPort, v8Flags = [] }) {
  mkdirSync(storageDir, { recursive: true });
  const modules = [`(name = "index.mjs", esModule = embed "index.mjs")`];
  for (const f of readdirSync(dir).filter((f) => f.endsWith(".wasm")).sort()) modules.push(`(name = ${str(f)}, wasm = embed ${str(f)})`);
  const bindings = Object.entries(vars).map(([k, v]) => `(name = ${str(k)}, text = ${str(v)})`);
  bindings.push(`(name = "ROUTING_INDEX", durableObjectNamespace = "RoutingIndex")`, `(name = "RATE_LIMITER", durableObjectNamespace = "RateLimiter")`);
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
  const file = join(dir, "workerd.capnp");
  writeFileSync(file, config);
  const bin = require.resolve("workerd/bin/workerd");
  const args = ["serve", file, "--experimental", ...(inspectorPort ? [`--inspector-addr=127.0.0.1:${inspectorPort}`] : [])];
  return spawn(bin, args, { cwd: dir, detached: true, stdio: ["ignore", "ignore", "pipe"] });
}
