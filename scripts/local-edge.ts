/**
 * The local fleet's edge: functions/index.ts bundled exactly as `npm run deploy` ships it (`wrangler
 * deploy --dry-run --outdir`), configured from wrangler.toml's top level as wrangler reads it
 * (compatibility date and flags, module rules, vars, SQLite-backed Durable Objects), plus the
 * launcher's bindings, and served by scripts/edge-host.ts (Miniflare, no dev proxy).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
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

/** A bundle with its config and module list (bundleModules). */
interface EdgeBuild extends EdgeConfig {
  modules: EdgeModule[];
}

async function readEdgeConfig(root: string): Promise<EdgeConfig> {
  // Loaded here, not at import: importing the fleet without starting an edge skips wrangler's ~1 s load.
  const { unstable_getMiniflareWorkerOptions, unstable_readConfig } = await import("wrangler");
  const config = unstable_readConfig({ config: join(root, "wrangler.toml") }, { hideWarnings: true });
  return { name: config.name, workerOptions: unstable_getMiniflareWorkerOptions(config).workerOptions as Record<string, unknown> };
}

const ENTRY = "index.js";
const MODULE_TYPES = ["ESModule", "CommonJS", "Text", "Data", "CompiledWasm"] as const;

/** A module of the bundle as Miniflare takes it; `path` relative to the bundle's dir. */
interface EdgeModule {
  type: (typeof MODULE_TYPES)[number];
  path: string;
}

/**
 * The bundle's modules, listed once per bundle: the entry, and each file wrangler wrote beside it
 * (the modules it copied; its source map and README match no rule) that the config's module rules,
 * then Miniflare's defaults, name, typed by the first rule that matches, as Miniflare's module
 * locator types an import. Given the list, Miniflare does not locate the modules itself, which
 * parses the whole 3.6 MB bundle with acorn in every edge process: ~1.2 s of its ~2.5 s of CPU.
 */
async function bundleModules(dir: string, workerOptions: Record<string, unknown>): Promise<EdgeModule[]> {
  const { compileModuleRules, testRegExps } = await import("miniflare");
  const configRules = (workerOptions.modulesRules ?? []) as Parameters<typeof compileModuleRules>[0];
  const rules = compileModuleRules([...configRules, { type: "ESModule", include: ["**/*.mjs"] }, { type: "CommonJS", include: ["**/*.js", "**/*.cjs"] }]);
  const modules: EdgeModule[] = [{ type: "ESModule", path: ENTRY }];
  for (const path of readdirSync(dir, { recursive: true, encoding: "utf8" }).sort()) {
    const rule = path === ENTRY ? undefined : rules.find((r) => testRegExps(r.include, join(dir, path)));
    const type = MODULE_TYPES.find((t) => t === rule?.type);
    if (type) modules.push({ type, path });
  }
  return modules;
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

/** Bundles the Worker into `dir` with its config and module list; `dir` is removed when that fails. */
async function makeEdgeBuild(root: string, dir: string, bundleDir: string): Promise<EdgeBuild> {
  try {
    await bundle(root, bundleDir);
    const config = await readEdgeConfig(root);
    return { ...config, modules: await bundleModules(bundleDir, config.workerOptions) };
  } catch (e) {
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }
}

/** A fresh temp dir holding the bundle (`worker/`) and its config (`config.json`); the caller removes it. */
export async function shareEdgeBuild(root: string): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), "kvedge-edge-build-"));
  const build = await makeEdgeBuild(root, dir, join(dir, "worker"));
  writeFileSync(join(dir, "config.json"), JSON.stringify(build));
  return dir;
}

export async function prepareLocalEdge(opts: LocalEdgeOptions): Promise<LocalEdge> {
  const shared = process.env[EDGE_BUILD_ENV];
  let dir: string;
  let build: EdgeBuild;
  if (shared) {
    dir = join(shared, "worker");
    build = JSON.parse(readFileSync(join(shared, "config.json"), "utf8")) as EdgeBuild;
  } else {
    dir = mkdtempSync(join(tmpdir(), "kvedge-edge-bundle-"));
    build = await makeEdgeBuild(opts.root, dir, dir);
  }
  // The module rules went into the module list.
  const { name, workerOptions: { modulesRules: _rules, ...workerOptions }, modules } = build;
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
      modules: modules.map((m) => ({ type: m.type, path: join(dir, m.path) })),
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
