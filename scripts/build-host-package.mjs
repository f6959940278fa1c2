#!/usr/bin/env node
// Builds packages/kvedge-host/dist (run by that package's `prepack`): the relay and the media store
// bundled to plain JavaScript, so a GPU host runs them with Node ≥ 20.6 (no type stripping) from an
// installed tarball. Our own TypeScript is bundled; every npm package stays an import of the
// installed dependency (zeromq is native, @ffmpeg/core is resolved as a file at run time). Fails
// when the package's dependencies are not exactly the bundles' imports at the root's pinned versions.
import { readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const PKG_DIR = join(ROOT, "packages/kvedge-host");
const OUT = join(PKG_DIR, "dist");
// Loaded by path, not by import, so no bundle lists it (services/decode/wasm-core.ts).
const RESOLVED_AT_RUN_TIME = ["@ffmpeg/core"];

const readJson = (p) => JSON.parse(readFileSync(p, "utf8"));

rmSync(OUT, { recursive: true, force: true });
const result = await build({
  absWorkingDir: ROOT,
  entryPoints: {
    "kvedge-relay": "services/relay/main.ts",
    "kvedge-store": "services/decode/main.ts",
    // Started as a worker_thread by the store, next to its bundle (services/decode/probers.ts).
    "wasm-worker": "services/decode/wasm-worker.ts",
  },
  outdir: OUT,
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node20.6",
  packages: "external",
  banner: { js: "#!/usr/bin/env node" },
  metafile: true,
  logLevel: "warning",
});

/** "@scope/name/sub" → "@scope/name"; "name/sub" → "name". */
const packageOf = (spec) => spec.split("/").slice(0, spec.startsWith("@") ? 2 : 1).join("/");
const imported = new Set(RESOLVED_AT_RUN_TIME);
for (const out of Object.values(result.metafile.outputs)) {
  for (const i of out.imports) if (i.external && !i.path.startsWith("node:")) imported.add(packageOf(i.path));
}

const root = readJson(join(ROOT, "package.json"));
const pkg = readJson(join(PKG_DIR, "package.json"));
const problems = [];
if (pkg.version !== root.version) problems.push(`version ${pkg.version} differs from the root's ${root.version}`);
for (const name of imported) {
  const want = root.dependencies?.[name];
  if (!want) problems.push(`${name} is imported but is not a dependency of the root package`);
  else if (pkg.dependencies?.[name] !== want) problems.push(`${name} must be a dependency at the root's version ${want} (has ${pkg.dependencies?.[name] ?? "none"})`);
}
for (const name of Object.keys(pkg.dependencies ?? {})) if (!imported.has(name)) problems.push(`${name} is a dependency but no bundle imports it`);
if (problems.length > 0) {
  rmSync(OUT, { recursive: true, force: true });
  console.error(`packages/kvedge-host/package.json:\n  ${problems.join("\n  ")}`);
  process.exit(1);
}
