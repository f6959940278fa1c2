/**
 * Media identity: streamed image hashing with header sizes, and the mm-hash identity record
 * (same bytes under two URLs → same hash; one byte, frame count, fps bit or contract → different).
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MediaTooLargeError } from "../../../src/media/errors.ts";
import { identifyImage } from "../../../src/media/image-identity.ts";
import { identityRecordBytes, mediaIdentityHash, type IdentityInput } from "../../../src/media/identity-record.ts";
import { SafeFetcher } from "../../../src/media/safe-fetch.ts";
import { createHash } from "node:crypto";
import { initHashing } from "../../../src/util/hash.ts";
import { ffmpegToFile } from "../../helpers/wasm-media.ts";

/** node:crypto as the independent SHA-256 (the code under test uses hash-wasm). */
const sha256Hex = (b: Uint8Array): string => createHash("sha256").update(b).digest("hex");

let jpeg: Uint8Array = new Uint8Array(0);
let server: http.Server;
let port = 0;

beforeAll(async () => {
  await initHashing();
  const dir = mkdtempSync(path.join(tmpdir(), "kvedge-ident-"));
  const f = path.join(dir, "a.jpg");
  jpeg = new Uint8Array(await ffmpegToFile(["-f", "lavfi", "-i", "testsrc=size=321x203", "-frames:v", "1"], f));
  rmSync(dir, { recursive: true, force: true });
  server = http.createServer((req, res) => {
    if (req.url === "/a.jpg" || req.url === "/copy/of/a.jpg?x=1") {
      // dribble the body in small writes so the reader sees many chunks
      res.writeHead(200, { "content-type": "image/jpeg" });
      for (let i = 0; i < jpeg.length; i += 777) res.write(jpeg.subarray(i, i + 777));
      res.end();
    } else {
      res.writeHead(404);
      res.end();
    }
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  port = (server.address() as AddressInfo).port;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});

function chunked(bytes: Uint8Array, size: number): ReadableStream<Uint8Array> {
  let o = 0;
  return new ReadableStream({
    pull(c) {
      if (o >= bytes.length) return c.close();
      c.enqueue(bytes.slice(o, o + size));
      o += size;
    },
  });
}

describe("identifyImage", () => {
  it("hashes the raw bytes (SHA-256), keeps them, and reads the size, streamed in any chunking", async () => {
    const whole = await identifyImage(jpeg);
    expect(whole.contentDigest).toBe(sha256Hex(jpeg));
    expect(whole.bytes).toEqual(jpeg);
    expect([whole.header.width, whole.header.height]).toEqual([321, 203]);
    for (const size of [1, 7, 4096, 1 << 20]) {
      const s = await identifyImage(chunked(jpeg, size));
      expect(s).toEqual(whole);
    }
  });

  it("caps bytes, streamed or whole", async () => {
    await expect(identifyImage(chunked(jpeg, 100), { maxBytes: jpeg.length - 1 })).rejects.toBeInstanceOf(MediaTooLargeError);
    await expect(identifyImage(jpeg, { maxBytes: jpeg.length - 1 })).rejects.toBeInstanceOf(MediaTooLargeError);
    await expect(identifyImage(chunked(jpeg, 100), { maxBytes: jpeg.length })).resolves.toBeTruthy();
  });

  it("refuses a stream whose header never resolves within the header cap", async () => {
    const junk = new Uint8Array(10_000);
    junk.set([0xff, 0xd8]);
    for (let i = 2; i + 4 < junk.length; i += 4) junk.set([0xff, 0xe2, 0x00, 0x02], i); // empty APP2 segments forever
    await expect(identifyImage(chunked(junk, 512), { maxHeaderBytes: 2048 })).rejects.toMatchObject({ reason: "corrupt" });
    await expect(identifyImage(chunked(junk.subarray(0, 998), 64))).rejects.toMatchObject({ reason: "truncated" });
  });
});

describe("identity record (mm hash)", () => {
  const contract = "a".repeat(64);
  const base: IdentityInput = {
    contentDigest: "0123456789abcdef".repeat(4),
    metadata: { modality: "video", width: 1280, height: 720, totalFrames: 300, avgFps: 30000 / 1001 },
    contractDigest: contract,
  };

  it("is 16 lower-case hex digits over a pinned record layout", () => {
    const h = mediaIdentityHash(base);
    expect(h).toMatch(/^[0-9a-f]{16}$/);
    expect(h).toBe(sha256Hex(identityRecordBytes(base)).slice(0, 16));
    const rec = identityRecordBytes(base);
    const magic = "kvedge/mm-identity/v2";
    expect(new DataView(rec.buffer).getBigUint64(0, true)).toBe(BigInt(magic.length));
    expect(new TextDecoder().decode(rec.subarray(8, 8 + magic.length))).toBe(magic);
    // field 6 carries the fps as IEEE-754 bits
    const f6 = rec.length - (1 + 8 + 64) - (1 + 8 + 8);
    expect(rec[f6]).toBe(6);
    expect(new DataView(rec.buffer).getFloat64(f6 + 9, true)).toBe(30000 / 1001);
  });

  it("changes with every input it covers", () => {
    const h = mediaIdentityHash(base);
    const v = base.metadata as Extract<IdentityInput["metadata"], { modality: "video" }>;
    const variants: IdentityInput[] = [
      { ...base, contentDigest: "0123456789abcdef".repeat(3) + "0123456789abcdee" },
      { ...base, metadata: { ...v, totalFrames: 301 } },
      { ...base, metadata: { ...v, avgFps: 29.97002997002997 + 3.6e-15 } }, // next double up
      { ...base, metadata: { ...v, avgFps: 29.97003 } }, // torchcodec ≤ 0.10 printf rounding
      { ...base, metadata: { ...v, width: 1281 } },
      { ...base, metadata: { ...v, height: 721 } },
      { ...base, contractDigest: "b" + contract.slice(1) },
      { ...base, metadata: { modality: "image", width: 1280, height: 720 } },
    ];
    const hashes = new Set(variants.map(mediaIdentityHash));
    expect(hashes.size).toBe(variants.length);
    expect(hashes.has(h)).toBe(false);
    expect(29.97002997002997 + 3.6e-15).not.toBe(29.97002997002997);
  });

  it("same bytes under two URLs share the hash; one changed byte does not", async () => {
    const f = new SafeFetcher({ allowlist: [`127.0.0.1:${port}`] });
    const idOf = async (url: string): Promise<string> => {
      const r = await f.open(url);
      const img = await identifyImage(r.body);
      return mediaIdentityHash({
        contentDigest: img.contentDigest,
        metadata: { modality: "image", width: img.header.width, height: img.header.height },
        contractDigest: contract,
      });
    };
    const a = await idOf(`http://127.0.0.1:${port}/a.jpg`);
    const b = await idOf(`http://127.0.0.1:${port}/copy/of/a.jpg?x=1`);
    expect(a).toBe(b);
    const changed = new Uint8Array(jpeg);
    changed[changed.length - 3]! ^= 1; // a byte in the entropy-coded data: same header, same size
    const img = await identifyImage(changed);
    expect([img.header.width, img.header.height]).toEqual([321, 203]);
    const c = mediaIdentityHash({ contentDigest: img.contentDigest, metadata: { modality: "image", width: 321, height: 203 }, contractDigest: contract });
    expect(c).not.toBe(a);
  });

  it("validates its inputs", () => {
    expect(() => mediaIdentityHash({ ...base, contentDigest: "XYZ" })).toThrow(TypeError);
    expect(() => mediaIdentityHash({ ...base, contractDigest: "" })).toThrow(TypeError);
    expect(() => mediaIdentityHash({ ...base, metadata: { modality: "image", width: -1, height: 2 } })).toThrow(TypeError);
    expect(() => mediaIdentityHash({ ...base, metadata: { modality: "video", width: 1, height: 2, totalFrames: 3, avgFps: Number.NaN } })).toThrow(TypeError);
  });
});
