/**
 * workerd forbids WebAssembly.compile(bytes); hash-wasm calls exactly that on its embedded
 * binaries. We bundle the same binaries as precompiled modules (scripts/assets/10-hash-wasm.mjs)
 * and answer compile() for exactly those bytes, recognised by length + FNV-1a. Anything else still
 * goes to the original, which workerd refuses. Import this module before anything uses hash-wasm.
 */
import blake3Module from "../src/generated/wasm/blake3.wasm";
import sha256Module from "../src/generated/wasm/sha256.wasm";
import xxhash3Module from "../src/generated/wasm/xxhash3.wasm";
import manifest from "../src/generated/wasm/manifest.json";

const modules: Record<string, WebAssembly.Module> = { xxhash3: xxhash3Module, blake3: blake3Module, sha256: sha256Module };

function fnv1a(bytes: Uint8Array): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < bytes.length; i++) h = Math.imul(h ^ bytes[i]!, 0x01000193) >>> 0;
  return h;
}

const byKey = new Map<string, WebAssembly.Module>();
for (const m of manifest.modules) {
  const mod = modules[m.name];
  if (mod) byKey.set(`${m.byteLength}:${m.fnv1a}`, mod);
}

const wasm = WebAssembly as unknown as { compile(source: BufferSource): Promise<WebAssembly.Module> };
if (!(wasm.compile as { __kvedge?: boolean }).__kvedge) {
  const originalCompile = wasm.compile.bind(wasm);
  const patched = async (source: BufferSource): Promise<WebAssembly.Module> => {
    const bytes = ArrayBuffer.isView(source)
      ? new Uint8Array(source.buffer, source.byteOffset, source.byteLength)
      : new Uint8Array(source);
    return byKey.get(`${bytes.length}:${fnv1a(bytes)}`) ?? originalCompile(source);
  };
  (patched as { __kvedge?: boolean }).__kvedge = true;
  wasm.compile = patched;
}
