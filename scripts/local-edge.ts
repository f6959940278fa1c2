/**
 * The local fleet's edge: functions/index.ts bundled exactly as `npm run deploy` ships it (`wrangler
 * deploy --dry-run --outdir`), configured from wrangler.toml's top level as wrangler reads it
 * (compatibility date and flags, module rules, vars, SQLite-backed Durable Objects), plus the
 * launcher's bindings, and served by scripts/edge-host.ts (Miniflare, no dev proxy).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
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
  /** Removes the bundle (a shared one stays: its maker removes it). */
  remove(): void;
}

/**
 * Names the Worker bundled and configured earlier by shareEdgeBuild (the e2e projects' global setup
 * makes one per run, test/e2e/helpers/edge-bundle-setup.ts): fleets serve it, the same bytes and
 * config each would make, without a wrangler run and load (~5 s of CPU) each, and leave it in place.
 */
export const EDGE_BUILD_ENV = "KVEDGE_EDGE_BUILD_DIR";

/** wrangler.toml's top level as wrangler reads it: the Worker's name and its Miniflare options (plain JSON). */
interface EdgeConfig {
  name: string | undefined;
  workerOptions: Record<string, unknown>;
}

async function readEdgeConfig(root: string): Promise<EdgeConfig> {
  // Loaded here, not at import: importing the fleet without starting an edge skips wrangler's ~1 s load.
  const { unstable_getMiniflareWorkerOptions, unstable_readConfig } = await import("wrangler");
  const config = unstable_readConfig({ config: join(root, "wrangler.toml") }, { hideWarnings: true });
  return { name: config.name, workerOptions: unstable_getMiniflareWorkerOptions(config).workerOptions as Record<string, unknown> };
}

/** Bundles the Worker into `dir` (wrangler prints why when it fails). */
async function bundle(root: string, dir: string): Promise<void> {
  const wrangler = spawn(process.execPath, [join(root, "node_modules/wrangler/bin/wrangler.js"), "deploy", "--dry-run", "--outdir", dir, "--env", ""], {
    cwd: root,
    env: { ...process.env, WRANGLER_SEND_METRICS: "false", WRANGLER_LOG: "warn", NO_COLOR: "1" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  for (const s of [wrangler.stdout, wrangler.stderr]) s.on("data", (d: Buffer) => (output = (output + d.toString()).slice(-4000)));
  const code = await new Promise<number | null>((resolve) => wrangler.once("exit", resolve));
  if (code !== 0) throw new Error(`bundling the edge Worker (wrangler deploy --dry-run) failed with ${code}:\n${output}`);
}

/** A fresh temp dir holding the bundle (`worker/`) and its config (`config.json`); the caller removes it. */
export async function shareEdgeBuild(root: string): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), "kvedge-edge-build-"));
  try {
    await bundle(root, join(dir, "worker"));
    writeFileSync(join(dir, "config.json"), JSON.stringify(await readEdgeConfig(root)));
  } catch (e) {
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }
  return dir;
}

export async function prepareLocalEdge(opts: LocalEdgeOptions): Promise<LocalEdge> {
  const shared = process.env[EDGE_BUILD_ENV];
  let dir: string;
  let config: EdgeConfig;
  if (shared) {
    dir = join(shared, "worker");
    config = JSON.parse(readFileSync(join(shared, "config.json"), "utf8")) as EdgeConfig;
  } else {
    config = await readEdgeConfig(opts.root);
    dir = mkdtempSync(join(tmpdir(), "kvedge-edge-bundle-"));
    await bundle(opts.root, dir).catch((e: unknown) => {
      rmSync(dir, { recursive: true, force: true });
      throw e;
    });
  }
  const { name, workerOptions } = config;
  const hostOptions = (port: number, inspectorPort: number | null): EdgeHostOptions => ({
    host: "127.0.0.1",
    port,
    ...(inspectorPort !== null ? { inspectorPort } : {}),
    persistRoot: join(opts.persistTo, "v3"),
    worker: {
      ...workerOptions,
      // The name keys the Durable Objects' storage (`<name>-<class>`), as under wrangler dev.
      name,
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
    remove: () => {
      if (!shared) rmSync(dir, { recursive: true, force: true });
    },
  };
}
