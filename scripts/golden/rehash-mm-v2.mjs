// One-off migration of the whole-request golden set to the v2 media identity (issue 12: mm hashes
// from SHA-256, src/media/identity-record.ts), without the device run the generator needs: only
// kvedge's own derived fields change (items' contentHash, mmHash, padValue; the pad runs inside
// input_ids; mm_hashes; block_hashes; media.videos[].contentHash). Upstream's ids, runs and grids
// are untouched. Independent of src/: the record is re-implemented here, exactly as
// gen_whole_request.py now writes it, and before anything is rewritten every item's stored v1 hash
// is re-derived from the same inputs (proving the inputs are read right).
// Run: node scripts/golden/rehash-mm-v2.mjs [test/fixtures/whole-request]
import { createHash } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { xxhash3 } from "hash-wasm";

const dir = process.argv[2] ?? "test/fixtures/whole-request";
const file = join(dir, "whole_request.json");
const g = JSON.parse(readFileSync(file, "utf8"));

const u64 = (v) => {
  const b = Buffer.alloc(8);
  b.writeBigUInt64LE(BigInt(v));
  return b;
};
const lp = (b) => Buffer.concat([u64(b.length), b]);
const field = (tag, b) => Buffer.concat([Buffer.from([tag]), lp(b)]);
const f64 = (x) => {
  const b = Buffer.alloc(8);
  b.writeDoubleLE(x);
  return b;
};
function record(version, modality, contentField, meta, digest) {
  const parts = [lp(Buffer.from(`kvedge/mm-identity/${version}`)), field(1, Buffer.from(modality)), field(2, contentField), field(3, u64(meta.width)), field(4, u64(meta.height))];
  if (modality === "video") parts.push(field(5, u64(meta.totalFrames)), field(6, f64(meta.avgFps)));
  parts.push(field(7, Buffer.from(digest)));
  return Buffer.concat(parts);
}
const sha = (b) => createHash("sha256").update(b).digest();
const pad = (hex) => Number(1_000_000n + (BigInt("0x" + hex) % (1n << 30n)));

const bytesOf = new Map();
const mediaBytes = (item) => {
  const entry = item.modality === "image" ? g.media.images[item.media] : g.media.videos[item.media];
  if (!entry) throw new Error(`no media ${item.media}`);
  if (!bytesOf.has(entry.file)) bytesOf.set(entry.file, readFileSync(join(dir, "media", entry.file)));
  return bytesOf.get(entry.file);
};

let items = 0;
let cases = 0;
for (const c of g.cases) {
  if (!c.items?.length) continue;
  const digest = g.source.digests[c.family];
  const ids = c.input_ids;
  const renamed = new Map();
  for (const it of c.items) {
    const bytes = mediaBytes(it);
    // Check: the stored v1 values follow from these inputs.
    const v1content = await xxhash3(bytes, 0, 0);
    if (v1content !== it.contentHash) throw new Error(`${c.id}: v1 content hash ${v1content} ≠ ${it.contentHash}`);
    const v1 = await xxhash3(record("v1", it.modality, u64(BigInt("0x" + it.contentHash)), it.meta, digest), 0, 0);
    if (v1 !== it.mmHash) throw new Error(`${c.id}: v1 mm hash ${v1} ≠ ${it.mmHash}`);
    const content = sha(bytes);
    const mmHash = sha(record("v2", it.modality, content, it.meta, digest)).subarray(0, 8).toString("hex");
    const oldPad = it.padValue;
    const newPad = pad(mmHash);
    if (ids) {
      for (const [s, e] of it.runs) {
        for (let i = s; i < e; i++) {
          if (ids[i] !== oldPad) throw new Error(`${c.id}: id ${i} is ${ids[i]}, not the item's pad ${oldPad}`);
          ids[i] = newPad;
        }
      }
    }
    renamed.set(it.mmHash, mmHash);
    it.contentHash = content.toString("hex");
    it.mmHash = mmHash;
    it.padValue = newPad;
    items++;
  }
  if (c.mm_hashes) c.mm_hashes = c.mm_hashes.map((h) => renamed.get(h) ?? (() => { throw new Error(`${c.id}: unknown mm hash ${h}`); })());
  if (ids && c.block_hashes) {
    const out = [];
    for (let k = 0; k + 16 <= ids.length; k += 16) {
      const buf = Buffer.alloc(64);
      for (let i = 0; i < 16; i++) buf.writeUInt32LE(ids[k + i], i * 4);
      out.push(BigInt("0x" + (await xxhash3(buf, 1337, 0))).toString());
    }
    if (out.length !== c.block_hashes.length) throw new Error(`${c.id}: block count changed`);
    c.block_hashes = out;
  }
  cases++;
}
for (const v of Object.values(g.media.videos)) v.contentHash = sha(readFileSync(join(dir, "media", v.file))).toString("hex");
g.source.identity = "kvedge/mm-identity/v2 (SHA-256), scripts/golden/rehash-mm-v2.mjs";
writeFileSync(file, JSON.stringify(g)); // compact, as the generator writes it
console.log(`rehashed ${items} items in ${cases} cases`);
