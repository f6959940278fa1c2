/**
 * Image width/height from the file header, without decoding pixels: PNG, JPEG, WebP (VP8, VP8L,
 * VP8X), GIF, BMP. The sizes are the ones Pillow reports from `Image.open`, which is what SGLang
 * hands to the HF processor.
 *
 * EXIF orientation: SGLang's `load_image` (python/sglang/srt/utils/common.py) calls
 * `Image.open` and never `ImageOps.exif_transpose` (the fix, sgl-project/sglang PR #33449, was
 * still open in 2026-08), so by default the stored size is reported. The JPEG orientation tag is
 * still read and returned; `exifTranspose: true` swaps width/height for orientations 5-8 for a
 * worker build that applies it.
 *
 * `readImageHeader` works on a prefix: it returns null while more bytes are needed (streaming
 * callers keep feeding), and throws a MediaError for unknown formats, corrupt headers, or (with
 * `final`) truncated files.
 */
import { MediaError } from "./errors.ts";

export type ImageFormat = "png" | "jpeg" | "webp" | "gif" | "bmp";

export interface ImageHeader {
  format: ImageFormat;
  /** Size as the worker sees it (after the EXIF swap only when `exifTranspose`). */
  width: number;
  height: number;
  /** Size as stored in the file. */
  storedWidth: number;
  storedHeight: number;
  /** EXIF orientation 1-8 (JPEG only; 1 when absent). */
  orientation: number;
  /** WebP flavour or JPEG SOF marker, for diagnostics. */
  detail?: string;
}

export interface ImageHeaderOptions {
  exifTranspose?: boolean;
  param?: string | null;
}

const u16be = (b: Uint8Array, o: number): number => (b[o]! << 8) | b[o + 1]!;
const u16le = (b: Uint8Array, o: number): number => b[o]! | (b[o + 1]! << 8);
const u24le = (b: Uint8Array, o: number): number => b[o]! | (b[o + 1]! << 8) | (b[o + 2]! << 16);
const u32be = (b: Uint8Array, o: number): number => ((b[o]! << 24) >>> 0) + ((b[o + 1]! << 16) | (b[o + 2]! << 8) | b[o + 3]!);
const i32le = (b: Uint8Array, o: number): number => b[o]! | (b[o + 1]! << 8) | (b[o + 2]! << 16) | (b[o + 3]! << 24);
const ascii = (b: Uint8Array, o: number, n: number): string => String.fromCharCode(...b.subarray(o, o + n));

/** Signals "need more bytes" inside the parsers. */
class NeedMore extends Error {}

function need(b: Uint8Array, n: number): void {
  if (b.length < n) throw new NeedMore();
}

const SIGNATURES: [ImageFormat, number[]][] = [
  ["jpeg", [0xff, 0xd8]],
  ["bmp", [0x42, 0x4d]],
  ["png", [0x89, 0x50, 0x4e, 0x47]],
  ["gif", [0x47, 0x49, 0x46, 0x38]],
  ["webp", [0x52, 0x49, 0x46, 0x46]], // RIFF, then "WEBP" at 8
];

/** The format by signature; null while `b` is still a prefix of some signature (need more bytes). */
export function sniffImageFormat(b: Uint8Array): ImageFormat | "unknown" | null {
  let prefixOfSome = false;
  for (const [fmt, sig] of SIGNATURES) {
    const n = Math.min(sig.length, b.length);
    let match = true;
    for (let i = 0; i < n; i++) if (b[i] !== sig[i]) match = false;
    if (!match) continue;
    if (b.length < sig.length) {
      prefixOfSome = true;
      continue;
    }
    if (fmt !== "webp") return fmt;
    if (b.length < 12) return null;
    return ascii(b, 8, 4) === "WEBP" ? "webp" : "unknown";
  }
  return prefixOfSome || b.length === 0 ? null : "unknown";
}

/** Names a few formats we recognise but do not read, for a clearer error. */
function otherFormatName(b: Uint8Array): string | null {
  if (b.length >= 4 && (ascii(b, 0, 4) === "II*\0" || ascii(b, 0, 4) === "MM\0*")) return "TIFF";
  if (b.length >= 12 && ascii(b, 4, 4) === "ftyp") {
    const brand = ascii(b, 8, 4);
    if (/^avi[fs]$/.test(brand)) return "AVIF";
    if (/^(heic|heix|mif1|msf1|hevc)$/.test(brand)) return "HEIF";
    return `ISO-BMFF (${brand})`;
  }
  if (b.length >= 4 && b[0] === 0 && b[1] === 0 && b[2] === 1 && b[3] === 0) return "ICO";
  return null;
}

function corrupt(format: string, why: string, param: string | null): MediaError {
  return new MediaError("corrupt", `Corrupt ${format} header: ${why}.`, param);
}

/**
 * The most pixels Pillow's `Image.open` accepts: above 2 × `Image.MAX_IMAGE_PIXELS` (1024³ // 4 // 3)
 * it raises DecompressionBombError (PIL/Image.py `_decompression_bomb_check`), so a worker's
 * `load_image` cannot open the image. Refused here from the header alone: a 100-byte file can claim
 * 60 000 × 60 000 pixels.
 */
export const MAX_IMAGE_PIXELS = 2 * Math.floor((1024 * 1024 * 1024) / 4 / 3);

function dims(w: number, h: number, format: string, param: string | null): void {
  if (!(w > 0 && h > 0)) throw corrupt(format, `size ${w}x${h}`, param);
  if (w * h > MAX_IMAGE_PIXELS) {
    throw new MediaError("too_many_pixels", `The ${format} image is ${w}x${h} (${w * h} pixels); the worker's image decoder opens at most ${MAX_IMAGE_PIXELS} pixels.`, param);
  }
}

function readPng(b: Uint8Array, param: string | null): Omit<ImageHeader, "width" | "height" | "orientation"> {
  need(b, 24);
  if (b[0] !== 0x89 || ascii(b, 1, 7) !== "PNG\r\n\x1a\n") throw corrupt("PNG", "bad signature", param);
  if (ascii(b, 12, 4) !== "IHDR" || u32be(b, 8) !== 13) throw corrupt("PNG", "first chunk is not IHDR", param);
  const w = u32be(b, 16);
  const h = u32be(b, 20);
  dims(w, h, "PNG", param);
  return { format: "png", storedWidth: w, storedHeight: h };
}

function readGif(b: Uint8Array, param: string | null): Omit<ImageHeader, "width" | "height" | "orientation"> {
  need(b, 13);
  const v = ascii(b, 0, 6);
  if (v !== "GIF87a" && v !== "GIF89a") throw corrupt("GIF", "bad version", param);
  let w = u16le(b, 6);
  let h = u16le(b, 8);
  // Pillow grows the size when the first frame extends past the logical screen; read its descriptor.
  let o = 13;
  if (b[10]! & 0x80) o += 3 * (1 << ((b[10]! & 7) + 1));
  for (;;) {
    need(b, o + 1);
    const t = b[o]!;
    if (t === 0x21) {
      need(b, o + 2);
      o += 2;
      for (;;) {
        need(b, o + 1);
        const n = b[o]!;
        o += 1 + n;
        if (n === 0) break;
      }
    } else if (t === 0x2c) {
      need(b, o + 9);
      const x1 = u16le(b, o + 1) + u16le(b, o + 5);
      const y1 = u16le(b, o + 3) + u16le(b, o + 7);
      w = Math.max(w, x1);
      h = Math.max(h, y1);
      break;
    } else if (t === 0x3b) {
      break; // trailer without frames: Pillow keeps the screen size
    } else {
      throw corrupt("GIF", `unexpected block 0x${t.toString(16)}`, param);
    }
  }
  dims(w, h, "GIF", param);
  return { format: "gif", storedWidth: w, storedHeight: h };
}

function readBmp(b: Uint8Array, param: string | null): Omit<ImageHeader, "width" | "height" | "orientation"> {
  need(b, 18);
  const dib = b[14]! | (b[15]! << 8) | (b[16]! << 16) | (b[17]! << 24);
  let w: number;
  let h: number;
  if (dib === 12) {
    need(b, 22);
    w = u16le(b, 18);
    h = u16le(b, 20);
  } else if (dib >= 16 && dib <= 124) {
    need(b, 26);
    w = i32le(b, 18);
    h = Math.abs(i32le(b, 22)); // negative height = top-down rows, same size
  } else {
    throw corrupt("BMP", `unsupported DIB header size ${dib}`, param);
  }
  dims(w, h, "BMP", param);
  return { format: "bmp", storedWidth: w, storedHeight: h };
}

function readWebp(b: Uint8Array, param: string | null): Omit<ImageHeader, "width" | "height" | "orientation"> {
  need(b, 16);
  const fourcc = ascii(b, 12, 4);
  if (fourcc === "VP8 ") {
    need(b, 30);
    if (b[23] !== 0x9d || b[24] !== 0x01 || b[25] !== 0x2a) throw corrupt("WebP", "VP8 start code missing", param);
    const w = u16le(b, 26) & 0x3fff;
    const h = u16le(b, 28) & 0x3fff;
    dims(w, h, "WebP", param);
    return { format: "webp", storedWidth: w, storedHeight: h, detail: "VP8" };
  }
  if (fourcc === "VP8L") {
    need(b, 25);
    if (b[20] !== 0x2f) throw corrupt("WebP", "VP8L signature missing", param);
    const bits = (b[21]! | (b[22]! << 8) | (b[23]! << 16) | (b[24]! << 24)) >>> 0;
    const w = (bits & 0x3fff) + 1;
    const h = ((bits >>> 14) & 0x3fff) + 1;
    dims(w, h, "WebP", param);
    return { format: "webp", storedWidth: w, storedHeight: h, detail: "VP8L" };
  }
  if (fourcc === "VP8X") {
    need(b, 30);
    const w = u24le(b, 24) + 1;
    const h = u24le(b, 27) + 1;
    dims(w, h, "WebP", param);
    return { format: "webp", storedWidth: w, storedHeight: h, detail: "VP8X" };
  }
  throw corrupt("WebP", `unknown chunk ${JSON.stringify(fourcc)}`, param);
}

const SOF = new Set([0xc0, 0xc1, 0xc2, 0xc3, 0xc5, 0xc6, 0xc7, 0xc9, 0xca, 0xcb, 0xcd, 0xce, 0xcf]);

/** EXIF orientation from an APP1 payload ("Exif\0\0" + TIFF), or null when absent or unreadable. */
export function exifOrientation(app1: Uint8Array): number | null {
  if (app1.length < 14 || ascii(app1, 0, 6) !== "Exif\0\0") return null;
  const t = app1.subarray(6);
  const le = t[0] === 0x49 && t[1] === 0x49;
  if (!le && !(t[0] === 0x4d && t[1] === 0x4d)) return null;
  const r16 = (o: number): number => (le ? u16le(t, o) : u16be(t, o));
  const r32 = (o: number): number => (le ? (t[o]! | (t[o + 1]! << 8) | (t[o + 2]! << 16) | (t[o + 3]! << 24)) >>> 0 : u32be(t, o));
  if (r16(2) !== 42) return null;
  const ifd = r32(4);
  if (ifd + 2 > t.length) return null;
  const n = r16(ifd);
  for (let i = 0; i < n; i++) {
    const e = ifd + 2 + i * 12;
    if (e + 12 > t.length) return null;
    if (r16(e) === 0x0112) {
      const type = r16(e + 2);
      const v = type === 3 ? r16(e + 8) : type === 4 ? r32(e + 8) : null;
      return v !== null && v >= 1 && v <= 8 ? v : null;
    }
  }
  return null;
}

function readJpeg(b: Uint8Array, param: string | null): Omit<ImageHeader, "width" | "height"> {
  need(b, 4);
  let o = 2;
  let size: { w: number; h: number; marker: number } | null = null;
  let orientation: number | null = null;
  // Pillow reads markers up to the first SOS; the last SOF seen before it gives the size.
  for (;;) {
    need(b, o + 2);
    if (b[o] !== 0xff) throw corrupt("JPEG", `expected a marker at byte ${o}`, param);
    let m = b[o + 1]!;
    while (m === 0xff) {
      o++;
      need(b, o + 2);
      m = b[o + 1]!;
    }
    o += 2;
    if (m === 0xd8 || m === 0x01 || (m >= 0xd0 && m <= 0xd7)) continue; // no length
    if (m === 0xd9) throw corrupt("JPEG", "end of image before any frame", param);
    need(b, o + 2);
    const len = u16be(b, o);
    if (len < 2) throw corrupt("JPEG", `segment length ${len}`, param);
    if (m === 0xda) {
      if (!size) throw corrupt("JPEG", "scan before frame header", param);
      break;
    }
    need(b, o + len);
    if (SOF.has(m)) {
      if (len < 8) throw corrupt("JPEG", "short frame header", param);
      size = { h: u16be(b, o + 3), w: u16be(b, o + 5), marker: m };
    } else if (m === 0xe1 && orientation === null) {
      orientation = exifOrientation(b.subarray(o + 2, o + len));
    }
    o += len;
  }
  if (size.h === 0) throw new MediaError("unsupported_format", "JPEG with the height in a DNL marker is not supported.", param);
  dims(size.w, size.h, "JPEG", param);
  return { format: "jpeg", storedWidth: size.w, storedHeight: size.h, orientation: orientation ?? 1, detail: `SOF${(size.marker - 0xc0).toString(16)}` };
}

/**
 * Parses the header from a prefix of the file. Returns null when more bytes are needed and
 * `final` is false; throws MediaError("truncated") when they are needed and `final` is true.
 */
export function readImageHeader(bytes: Uint8Array, final: boolean, opts: ImageHeaderOptions = {}): ImageHeader | null {
  const param = opts.param ?? null;
  const fmt = sniffImageFormat(bytes);
  if (fmt === null) {
    if (!final) return null;
    throw new MediaError("truncated", bytes.length === 0 ? "Image is empty." : "Truncated image: too short to identify.", param);
  }
  if (fmt === "unknown") {
    const other = otherFormatName(bytes);
    if (other) throw new MediaError("unsupported_format", `${other} images are not supported (PNG, JPEG, WebP, GIF, BMP).`, param);
    throw new MediaError("unknown_format", "Unknown image format (PNG, JPEG, WebP, GIF, BMP are supported).", param);
  }
  try {
    const h =
      fmt === "png" ? readPng(bytes, param)
      : fmt === "jpeg" ? readJpeg(bytes, param)
      : fmt === "webp" ? readWebp(bytes, param)
      : fmt === "gif" ? readGif(bytes, param)
      : readBmp(bytes, param);
    const orientation = "orientation" in h ? (h.orientation as number) : 1;
    const swap = opts.exifTranspose === true && orientation >= 5;
    return {
      ...h,
      orientation,
      width: swap ? h.storedHeight : h.storedWidth,
      height: swap ? h.storedWidth : h.storedHeight,
    };
  } catch (e) {
    if (e instanceof NeedMore) {
      if (!final) return null;
      throw new MediaError("truncated", `Truncated ${fmt.toUpperCase()} image: the header is incomplete.`, param);
    }
    throw e;
  }
}
