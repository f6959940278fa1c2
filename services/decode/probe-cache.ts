/**
 * Probes of media bytes, by content digest: one probe per digest at a time (callers of the same
 * bytes share it), results cached, and failures that were the media's own fault remembered for
 * FAILED_PROBE_TTL_MS. Probes run in the probe slots (joinable-slots.ts), shared fairly by clients.
 * Results, failures and flights are kept per client label (cache-partition.ts): another label's
 * call of the same bytes probes them again.
 */
import { unlink } from "node:fs/promises";
import { MediaError } from "../../src/media/errors.ts";
import type { ProbeResult } from "../../src/media/probe-result.ts";
import type { Caller } from "./caller.ts";
import { partitioned } from "./cache-partition.ts";
import { ByteLru } from "../../src/util/byte-lru.ts";
import { CancellableFlight } from "./concurrency.ts";
import type { ScanResult } from "./ffprobe-scan.ts";
import type { JoinableSlots } from "./joinable-slots.ts";
import { spoolToFile } from "./media-file.ts";
import type { Prober } from "./probers.ts";
import type { CacheOutcome, DecodeServiceStats } from "./stats.ts";

/** How long a failed probe's answer is reused for the same bytes. */
export const FAILED_PROBE_TTL_MS = 10 * 60_000;

export interface ProbeCacheDeps {
  prober: Prober;
  slots: JoinableSlots;
  stats: DecodeServiceStats;
  /** A fresh path in the service's temp directory. */
  tempPath: () => string;
  cacheEntries: number;
  /** Largest media the wasm decoder probes (options.ts). */
  wasmMaxMediaBytes: number;
  /** Largest raw-bytes body, and how long it may deliver nothing. */
  maxBodyBytes: number;
  idleTimeoutMs: number;
}

export interface Probed {
  result: ProbeResult;
  cache: CacheOutcome;
}

export class ProbeCache {
  /** Bounded by count (`cacheEntries`), as failedByDigest: each entry weighs 1. */
  private readonly byDigest: ByteLru<string, ProbeResult>;
  /**
   * Probes that failed on the media (unreadable, too many packets, no frames), by digest: the same
   * bytes sent again are refused at once instead of probed again (a few KB of hostile container
   * could otherwise buy a probe's whole time limit on every request).
   */
  private readonly failedByDigest: ByteLru<string, { error: Error; until: number }>;
  private readonly flight = new CancellableFlight<ProbeResult>();

  private readonly deps: ProbeCacheDeps;

  constructor(deps: ProbeCacheDeps) {
    this.deps = deps;
    this.byDigest = new ByteLru(deps.cacheEntries);
    this.failedByDigest = new ByteLru(deps.cacheEntries);
  }

  /** Is the probe of these bytes cached for `client` (so its call of probeFile reads no file)? */
  has(digest: string, client: string | null): boolean {
    return this.byDigest.get(partitioned(client, digest)) !== undefined;
  }

  /**
   * Probe of a file, deduplicated and cached by digest within the caller's label. A probe still waiting for a slot is dropped
   * when every caller of it has gone. `ownedFile`: a temporary file of this call, removed when the
   * probe that reads it ends (not when its caller leaves: another caller may share that probe).
   */
  async probeFile(digest: string, byteLength: number, file: string, caller: Caller, ownedFile = false): Promise<Probed> {
    const { prober, slots, stats } = this.deps;
    const drop = (): void => void (ownedFile && unlink(file).catch(() => {}));
    const key = partitioned(caller.client, digest);
    const cached = this.byDigest.get(key);
    if (cached) {
      stats.cacheHits++;
      drop();
      return { result: cached, cache: "hit" };
    }
    const failed = this.failedByDigest.get(key);
    if (failed && failed.until > Date.now()) {
      stats.failuresReused++;
      drop();
      throw failed.error;
    }
    if (prober.kind === "wasm" && byteLength > this.deps.wasmMaxMediaBytes) {
      drop();
      throw new MediaError("unprobeable_media", `Media above ${this.deps.wasmMaxMediaBytes} bytes is not probed by the wasm decoder (memory cap).`);
    }
    const { promise, shared } = this.flight.do(key, async (flightSignal, commit) => {
      const scan = await slots
        .run(key, caller.client, flightSignal, () => {
          // A started probe runs to its end: later callers share it even if every caller leaves.
          commit();
          stats.probes++;
          return prober.probe(file);
        })
        .catch((e: unknown) => {
          // The media's own fault: remembered for its bytes. Not a timeout, which can be this
          // service's load as much as the media (a hostile container fails fast under the memory cap).
          if (e instanceof MediaError) this.failedByDigest.set(key, { error: e, until: Date.now() + FAILED_PROBE_TTL_MS }, 1);
          throw e;
        })
        .finally(drop);
      const r = probeResultOf(digest, byteLength, scan, prober.kind);
      this.byDigest.set(key, r, 1);
      return r;
    }, caller.signal);
    if (shared) {
      stats.shared++;
      // The probe reads the first caller's file, not this one; still waiting, it may start in this caller's share.
      drop();
      slots.join(key, caller.client, caller.signal);
    }
    return { result: await promise, cache: shared ? "shared" : "miss" };
  }

  /** Probe of raw request bytes (spooled to a temp file, not stored). */
  async probeBytes(body: AsyncIterable<Uint8Array>, caller: Caller): Promise<Probed> {
    const file = this.deps.tempPath();
    let s;
    try {
      s = await spoolToFile(body, file, this.deps.maxBodyBytes, { idleMs: this.deps.idleTimeoutMs, signal: caller.signal });
    } catch (e) {
      await unlink(file).catch(() => {});
      throw e;
    }
    return this.probeFile(s.contentDigest, s.byteLength, file, caller, true);
  }
}

function probeResultOf(contentDigest: string, byteLength: number, scan: ScanResult, decoder: Prober["kind"]): ProbeResult {
  const { stream, meta } = scan;
  const fps = meta.averageFps;
  const decordFps = stream.avgFrameRate && stream.avgFrameRate.den !== 0 ? stream.avgFrameRate.num / stream.avgFrameRate.den : null;
  return {
    contentDigest,
    byteLength,
    totalFrames: meta.numFrames,
    avgFps: fps !== null && Number.isFinite(fps) && fps > 0 ? fps : null,
    width: stream.width,
    height: stream.height,
    durationSec: Math.max(0, meta.durationSec),
    beginSec: meta.beginSec,
    codec: stream.codec,
    decoder,
    decord: { totalFrames: meta.allPackets, avgFps: decordFps },
  };
}
