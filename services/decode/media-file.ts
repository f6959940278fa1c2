/**
 * Streams media bytes into a temp file while hashing them (xxh3-64, seed 0), with a byte cap.
 * Chunks are written in batches of up to 4 MiB (one writev each) to keep syscalls and thread-pool
 * round trips few without holding a large file in memory.
 */
import { open } from "node:fs/promises";
import { createStreamingXxh3 } from "../../src/util/hash.ts";
import { MediaTooLargeError } from "../../src/media/errors.ts";

export interface SpooledMedia {
  path: string;
  contentHash: string;
  byteLength: number;
}

const BATCH_BYTES = 4 << 20;

export async function spoolToFile(source: AsyncIterable<Uint8Array>, path: string, maxBytes: number): Promise<SpooledMedia> {
  const hasher = await createStreamingXxh3(0n);
  const fh = await open(path, "w");
  let n = 0;
  let batch: Uint8Array[] = [];
  let batchBytes = 0;
  const flush = async (): Promise<void> => {
    if (batch.length) await fh.writev(batch);
    batch = [];
    batchBytes = 0;
  };
  try {
    for await (const chunk of source) {
      n += chunk.byteLength;
      if (n > maxBytes) throw new MediaTooLargeError(maxBytes);
      hasher.update(chunk);
      batch.push(chunk);
      batchBytes += chunk.byteLength;
      if (batchBytes >= BATCH_BYTES || batch.length >= 512) await flush();
    }
    await flush();
  } finally {
    await fh.close();
  }
  return { path, contentHash: hasher.digest("hex"), byteLength: n };
}
