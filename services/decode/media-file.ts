/**
 * Streams media bytes into a temp file while hashing them (SHA-256, the store's content address),
 * with a byte cap and an idle timeout (no bytes for `idleMs` aborts the transfer). Chunks are
 * written in batches of up to 4 MiB (one writev each) to keep syscalls and thread-pool round trips
 * few without holding a large file in memory.
 */
import { createHash } from "node:crypto";
import { open } from "node:fs/promises";
import { MediaError, MediaTooLargeError } from "../../src/media/errors.ts";

export interface SpooledMedia {
  path: string;
  /** SHA-256 of the bytes, 64 lower-case hex digits. */
  contentDigest: string;
  byteLength: number;
}

export interface SpoolOptions {
  /** No chunk for this long: the transfer is abandoned (timeout). */
  idleMs?: number;
  /** Aborts the transfer (the caller went away, or a deadline passed). */
  signal?: AbortSignal;
}

const BATCH_BYTES = 4 << 20;

export async function spoolToFile(source: AsyncIterable<Uint8Array>, path: string, maxBytes: number, opts: SpoolOptions = {}): Promise<SpooledMedia> {
  const hasher = createHash("sha256");
  const fh = await open(path, "w");
  let n = 0;
  let batch: Uint8Array[] = [];
  let batchBytes = 0;
  const flush = async (): Promise<void> => {
    if (batch.length) await fh.writev(batch);
    batch = [];
    batchBytes = 0;
  };
  const it = source[Symbol.asyncIterator]();
  try {
    for (;;) {
      const next = await withIdle(it.next(), opts.idleMs, opts.signal);
      if (next.done) break;
      const chunk = next.value;
      n += chunk.byteLength;
      if (n > maxBytes) throw new MediaTooLargeError(maxBytes);
      hasher.update(chunk);
      batch.push(chunk);
      batchBytes += chunk.byteLength;
      if (batchBytes >= BATCH_BYTES || batch.length >= 512) await flush();
    }
    await flush();
  } catch (e) {
    // Not awaited: cancelling a stalled source can itself stall; the caller aborts the transfer.
    void it.return?.().catch(() => {});
    throw e;
  } finally {
    await fh.close();
  }
  return { path, contentDigest: hasher.digest("hex"), byteLength: n };
}

function withIdle<T>(p: Promise<T>, idleMs: number | undefined, signal: AbortSignal | undefined): Promise<T> {
  if (idleMs === undefined && signal === undefined) return p;
  return new Promise<T>((resolve, reject) => {
    if (signal?.aborted) return reject(abortReason(signal));
    const onAbort = (): void => {
      cleanup();
      reject(abortReason(signal!));
    };
    const timer = idleMs === undefined ? null : setTimeout(() => {
      cleanup();
      reject(new MediaError("timeout", `No media bytes for ${idleMs} ms.`));
    }, idleMs);
    const cleanup = (): void => {
      if (timer) clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
    p.then(
      (v) => {
        cleanup();
        resolve(v);
      },
      (e: unknown) => {
        cleanup();
        reject(e);
      },
    );
  });
}

function abortReason(signal: AbortSignal): Error {
  return signal.reason instanceof Error ? signal.reason : new MediaError("timeout", "Media transfer cancelled.");
}
