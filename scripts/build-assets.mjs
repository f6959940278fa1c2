#!/usr/bin/env node
// Runs every generator in scripts/assets/ (sorted by name). Each writes into src/generated/,
// which is gitignored: the outputs are derived from pinned npm packages, so the same bytes appear
// in tests, `wrangler dev` and `wrangler deploy`.
import { readdirSync } from "node:fs";
import { fileURLToPath, pathToFileURL } from "node:url";
import { join } from "node:path";

const dir = fileURLToPath(new URL("./assets/", import.meta.url));
for (const name of readdirSync(dir).filter((f) => f.endsWith(".mjs")).sort()) {
  const mod = await import(pathToFileURL(join(dir, name)).href);
  const started = Date.now();
  await mod.build();
  if (process.env.KVEDGE_VERBOSE) console.log(`assets: ${name} in ${Date.now() - started} ms`);
}
