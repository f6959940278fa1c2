// Builds bench/edge/worker.ts with esbuild (as wrangler would: browser platform, workerd
// conditions, *.wasm as precompiled modules) and runs it in workerd through the Miniflare API.
import { build } from "esbuild";
import { Miniflare } from "miniflare";
import { mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), "../..");
const OUT_DIR = join(ROOT, "bench/results/tmp/edge-worker");

/** Bundles `entry` as wrangler would (browser platform, workerd conditions, *.wasm copied beside). */
export async function bundleForWorkerd(entry, outfile, external = ["cloudflare:*"]) {
  mkdirSync(dirname(outfile), { recursive: true });
  await build({
    entryPoints: [entry],
    outfile,
    bundle: true,
    format: "esm",
    platform: "browser",
    conditions: ["workerd", "worker", "browser"],
    target: "es2022",
    loader: { ".wasm": "copy" },
    assetNames: "[name]",
    external,
    logLevel: "error",
  });
  return outfile;
}

let built = null;
async function bundle() {
  built ??= bundleForWorkerd(join(ROOT, "bench/edge/worker.ts"), join(OUT_DIR, "worker.mjs"));
  return built;
}

export async function startBenchWorker() {
  const scriptPath = await bundle();
  const mf = new Miniflare({
    modules: true,
    scriptPath,
    modulesRoot: OUT_DIR,
    modulesRules: [{ type: "CompiledWasm", include: ["**/*.wasm"] }],
    compatibilityDate: "2026-07-30",
    cf: false,
  });
  await mf.ready;
  const call = async (path, init) => {
    const r = await mf.dispatchFetch(`http://bench${path}`, init);
    const text = await r.text();
    if (!r.ok) throw new Error(`${path}: ${r.status} ${text.slice(0, 400)}`);
    return JSON.parse(text);
  };
  /** Wall time of one dispatch as seen from Node (ms) plus its JSON answer. */
  const timed = async (path, body) => {
    const t = performance.now();
    const r = await mf.dispatchFetch(`http://bench${path}`, { method: "POST", body });
    const text = await r.text();
    const ms = performance.now() - t;
    if (!r.ok) throw new Error(`${path}: ${r.status} ${text.slice(0, 400)}`);
    return { ms, res: JSON.parse(text) };
  };
  return { mf, call, timed, dispose: () => mf.dispose() };
}
