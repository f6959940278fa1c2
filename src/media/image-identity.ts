/**
 * Identity of one image at the edge: read the bytes once with a cap, hash them with SHA-256 and
 * read width/height from the header on the way. The bytes are kept (the edge forwards exactly
 * these bytes inline, never the URL they came from).
 */
import { createStreamingSha256 } from "../util/hash.ts";
import { MediaError, MediaTooLargeError } from "./errors.ts";
import { readImageHeader, type ImageHeader } from "./image-header.ts";

export interface ImageIdentity {
  /** SHA-256 of the raw bytes, 64 lower-case hex digits. */
  contentDigest: string;
  byteLength: number;
  /** The bytes hashed (what the worker must receive). */
  bytes: Uint8Array;
  header: ImageHeader;
}

export interface ImageIdentityOptions {
  maxBytes?: number;
  /** Most bytes kept while looking for the header (JPEG APPn segments can be large). */
  maxHeaderBytes?: number;
  exifTranspose?: boolean;
  param?: string | null;
}

const DEFAULT_MAX_BYTES = 20 * 1024 * 1024;
const DEFAULT_MAX_HEADER_BYTES = 4 * 1024 * 1024;

export async function identifyImage(source: ReadableStream<Uint8Array> | Uint8Array, opts: ImageIdentityOptions = {}): Promise<ImageIdentity> {
  const maxBytes = opts.maxBytes ?? DEFAULT_MAX_BYTES;
  const maxHeader = Math.min(opts.maxHeaderBytes ?? DEFAULT_MAX_HEADER_BYTES, maxBytes);
  const param = opts.param ?? null;
  const headerOpts = { exifTranspose: opts.exifTranspose ?? false, param };
  const hasher = await createStreamingSha256();

  if (source instanceof Uint8Array) {
    if (source.length > maxBytes) throw new MediaTooLargeError(maxBytes, param);
    hasher.update(source);
    const header = readImageHeader(source, true, headerOpts)!;
    return { contentDigest: hasher.digest("hex"), byteLength: source.length, bytes: source, header };
  }

  let total = 0;
  let header: ImageHeader | null = null;
  const chunks: Uint8Array[] = [];
  // Header prefix in a doubling buffer: parsing is retried per chunk without quadratic copying.
  let buf = new Uint8Array(0);
  let used = 0;
  const reader = source.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      total += value.byteLength;
      if (total > maxBytes) throw new MediaTooLargeError(maxBytes, param);
      hasher.update(value);
      chunks.push(value);
      if (header === null) {
        if (used + value.length > buf.length) {
          const grown = new Uint8Array(Math.max(used + value.length, buf.length * 2, 4096));
          grown.set(buf.subarray(0, used));
          buf = grown;
        }
        buf.set(value, used);
        used += value.length;
        header = readImageHeader(buf.subarray(0, used), false, headerOpts);
        if (header !== null) buf = new Uint8Array(0);
        else if (used > maxHeader) throw new MediaError("corrupt", `No image size within the first ${maxHeader} bytes.`, param);
      }
    }
  } catch (e) {
    await reader.cancel().catch(() => {});
    throw e;
  }
  header ??= readImageHeader(buf.subarray(0, used), true, headerOpts)!;
  const bytes = new Uint8Array(total);
  let o = 0;
  for (const c of chunks) {
    bytes.set(c, o);
    o += c.byteLength;
  }
  return { contentDigest: hasher.digest("hex"), byteLength: total, bytes, header };
}
