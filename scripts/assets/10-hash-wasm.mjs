// Extracts the xxhash3, blake3 and sha256 wasm binaries that hash-wasm embeds as base64, so the
// Worker can import them as precompiled modules (workerd forbids WebAssembly.compile on bytes).
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const NAMES = ["xxhash3", "blake3", "sha256"];

export function fnv1a(bytes) {
  let h = 0x811c9dc5;
  for (let i = 0; i < bytes.length; i++) h = Math.imul(h ^ bytes[i], 0x01000193) >>> 0;
  return h;
}

export async function build() {
  const require = createRequire(import.meta.url);
  const pkgDir = dirname(require.resolve("hash-wasm/package.json"));
  const version = JSON.parse(readFileSync(join(pkgDir, "package.json"), "utf8")).version;
  const src = readFileSync(join(pkgDir, "dist/index.esm.js"), "utf8");
  const out = fileURLToPath(new URL("../../src/generated/wasm/", import.meta.url));
  mkdirSync(out, { recursive: true });
  const modules = [];
  for (const name of NAMES) {
    const re = new RegExp(`var name(\\$\\w+)? = "${name}";\\s*var data\\1 = "([A-Za-z0-9+/=]+)"`);
    const m = re.exec(src);
    if (!m) throw new Error(`hash-wasm ${version}: embedded wasm "${name}" not found; update scripts/assets/10-hash-wasm.mjs`);
    const bytes = Buffer.from(m[2], "base64");
    writeFileSync(join(out, `${name}.wasm`), bytes);
    modules.push({ name, byteLength: bytes.length, fnv1a: fnv1a(bytes) });
  }
  writeFileSync(join(out, "manifest.json"), JSON.stringify({ hashWasmVersion: version, modules }, null, 2) + "\n");
}
