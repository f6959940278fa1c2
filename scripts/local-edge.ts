/**
 * The local fleet's edge: functions/index.ts bundled exactly as `npm run deploy` ships it (`wrangler
 * deploy --dry-run --outdir`), configured from wrangler.toml's top level as wrangler reads it
 * (compatibility date and flags, module rules, vars, SQLite-backed Durable Objects), plus the
 * launcher's bindings, and served by scripts/edge-host.ts (Miniflare, no dev proxy).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { EdgeHostOptions } from "./edge-host.ts";

export interface LocalEdgeOptions {
  root: string;
  /** wrangler dev's `--persist-to`: Durable Object state lives in `<persistTo>/v3`, as under wrangler dev. */
  persistTo: string;
  /** Text bindings over wrangler.toml's vars (secrets included: they reach the host on stdin only). */
  bindings: Record<string, string>;
}

export interface LocalEdge {
  /**
   * Starts one edge process (its own process group) serving the bundle on `port`, with the V8
   * inspector on `inspectorPort` (0: any free port, which it prints) unless null; stop it by
   * signalling the group.
   */
  spawn(port: number, inspectorPort: number | null): ChildProcess;
  /** Removes the bundle. */
  remove(): void;
}

/** Bundles the Worker into a fresh temp dir (wrangler prints why when it fails). */
async function bundle(root: string): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), "kvedge-edge-bundle-"));
  const wrangler = spawn(process.execPath, [join(root, "node_modules/wrangler/bin/wrangler.js"), "deploy", "--dry-run", "--outdir", dir, "--env", ""], {
    cwd: root,
    env: { ...process.env, WRANGLER_SEND_METRICS: "false", WRANGLER_LOG: "warn", NO_COLOR: "1" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  for (const s of [wrangler.stdout, wrangler.stderr]) s.on("data", (d: Buffer) => (output = (output + d.toString()).slice(-4000)));
  const code = await new Promise<number | null>((resolve) => wrangler.once("exit", resolve));
  if (code !== 0) {
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`bundling the edge Worker (wrangler deploy --dry-run) failed with ${code}:\n${output}`);
  }
  return dir;
}

export async function prepareLocalEdge(opts: LocalEdgeOptions): Promise<LocalEdge> {
  // Loaded here, not at import: importing the fleet without starting an edge skips wrangler's ~1 s load.
  const { unstable_getMiniflareWorkerOptions, unstable_readConfig } = await import("wrangler");
  const config = unstable_readConfig({ config: join(opts.root, "wrangler.toml") }, { hideWarnings: true });
  const { workerOptions } = unstable_getMiniflareWorkerOptions(config);
  const dir = await bundle(opts.root);
  const hostOptions = (port: number, inspectorPort: number | null): EdgeHostOptions => ({
    host: "127.0.0.1",
    port,
    ...(inspectorPort !== null ? { inspectorPort } : {}),
    persistRoot: join(opts.persistTo, "v3"),
    worker: {
      ...workerOptions,
      // The name keys the Durable Objects' storage (`<name>-<class>`), as under wrangler dev.
      name: config.name,
      bindings: { ...(workerOptions.bindings as Record<string, unknown>), ...opts.bindings },
      modules: true,
      scriptPath: join(dir, "index.js"),
      modulesRoot: dir,
    },
  });
  return {
    spawn(port, inspectorPort) {
      const p = spawn(process.execPath, [join(opts.root, "scripts/edge-host.ts")], { cwd: opts.root, detached: true, stdio: ["pipe", "pipe", "pipe"] });
      p.stdin!.on("error", () => {}); // a host that dies at once is reported by its exit, not an EPIPE
      p.stdin!.end(JSON.stringify(hostOptions(port, inspectorPort)));
      return p;
    },
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}
