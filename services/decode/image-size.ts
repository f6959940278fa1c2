/** An image file's size and format, read from its header. */
import { open } from "node:fs/promises";
import { MediaError } from "../../src/media/errors.ts";
import { readImageHeader } from "../../src/media/image-header.ts";
import type { StoreResult } from "../../src/media/store-result.ts";

/** Image headers sit at the start (JPEG APPn segments can push them back a few MiB). */
const MAX_HEADER_BYTES = 4 << 20;

export async function imageSizeOf(file: string, size: number): Promise<NonNullable<StoreResult["image"]>> {
  const n = Math.min(size, MAX_HEADER_BYTES);
  const fh = await open(file, "r");
  try {
    const buf = new Uint8Array(n);
    await fh.read(buf, 0, n, 0);
    const h = readImageHeader(buf, true, { param: "url" });
    if (!h) throw new MediaError("corrupt", `No image size within the first ${n} bytes.`, "url");
    return { width: h.width, height: h.height, format: h.format };
  } finally {
    await fh.close();
  }
}
