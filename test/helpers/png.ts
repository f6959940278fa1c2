/**
 * Tiny valid PNGs without any encoder: stored (uncompressed) deflate via node:zlib, any size, with
 * optional ancillary chunks. An ancillary `tEXt` chunk changes the bytes (and their SHA-256) but
 * not the image or its header size, which is what tests of "same URL, different bytes" need.
 */
import { crc32, deflateSync } from "node:zlib";

function chunk(type: string, data: Uint8Array): Buffer {
  const len = Buffer.alloc(4);
  len.writeUInt32BE(data.length);
  const td = Buffer.concat([Buffer.from(type, "latin1"), data]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(td) >>> 0);
  return Buffer.concat([len, td, crc]);
}

export function makePng(width: number, height: number, opts: { seed?: number; text?: string; padBytes?: number } = {}): Uint8Array {
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr[8] = 8; // bit depth
  ihdr[9] = 2; // RGB
  const rows = Buffer.alloc((width * 3 + 1) * height);
  let x = (opts.seed ?? 1) >>> 0 || 1;
  for (let i = 0; i < rows.length; i++) {
    if (i % (width * 3 + 1) === 0) continue; // filter byte 0
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    rows[i] = x & 0xff;
  }
  const parts = [Buffer.from([137, 80, 78, 71, 13, 10, 26, 10]), chunk("IHDR", ihdr)];
  if (opts.text !== undefined) parts.push(chunk("tEXt", Buffer.from(`Comment\0${opts.text}`, "latin1")));
  if (opts.padBytes) parts.push(chunk("zpAd", new Uint8Array(opts.padBytes))); // private ancillary chunk: bulk
  parts.push(chunk("IDAT", deflateSync(rows, { level: 1 })), chunk("IEND", new Uint8Array(0)));
  return new Uint8Array(Buffer.concat(parts));
}
