/**
 * `startSimulatedWorker`: one simulated SGLang worker (HTTP + KV-event PUB + replay ROUTER) in this
 * process, for tests and the local fleet. Ports may be 0; the bound ones are reported.
 */
import type { Server } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { getQwenTokenizer } from "../../src/prompt/tokenizer/index.ts";
import { initHashing } from "../../src/util/hash.ts";
import { SimEngine } from "./engine.ts";
import type { MediaExpander } from "./generate.ts";
import { createHttpServer } from "./http-server.ts";
import { startPdSide } from "./pd-generate.ts";
import { DpSimEngines, startRankPublishers } from "./dp-engines.ts";
import { loadSimContract, type SimMediaContract } from "./media-contract.ts";
import { createMediaExpander } from "./media-expand.ts";
import { EncoderCache, encodeRemotely, type EncodeRequestItem } from "./encoder.ts";

/** Embeddings an encoder keeps (SGLang bounds its cache by SGLANG_VLM_CACHE_SIZE_MB, 4096; the simulator by count). */
const ENCODER_CACHE_ENTRIES = 4096;
import { createMediaLoader } from "./media-fetch.ts";
import { VideoMetadataProber } from "./media-probe.ts";
import { defaultChatRenderer, type ChatRenderer } from "./openai.ts";
import { parseSimOptions, type SimOptions, type SimOptionsInput } from "./options.ts";
import { PagedRadixCache, type CacheBlock, type KvEvent } from "./radix-cache.ts";
import { HostTier } from "./hicache.ts";
import { resolveTiming } from "./timing.ts";
import { buildOutputVocabulary } from "./token-source.ts";

export interface SimulatedWorker {
  /** Base URL of the HTTP server, e.g. http://127.0.0.1:30001 */
  readonly url: string;
  /** `tcp://host:port` of the KV-event PUB socket (null when events are off). */
  readonly kvEndpoint: string | null;
  /** `tcp://host:port` of the replay ROUTER socket (null when events are off). */
  readonly replayEndpoint: string | null;
  readonly options: SimOptions;
  /** Graceful: stop accepting, abort running requests, publish pending events, close sockets. */
  close(): Promise<void>;
  /** Abrupt (a crash): destroy every connection and socket at once, publish nothing more. */
  kill(): void;
  /** The worker's true current block set, parents before children. */
  cacheDump(): CacheBlock[];
  /** Direct access for tests (rank 0's scheduler). */
  readonly engine: SimEngine;
  /** Every DP rank's scheduler, rank r at index r (one for a worker without --dp-size). */
  readonly rankEngines: readonly SimEngine[];
  /** The media contract the simulator follows (from its model dir and version). */
  readonly media: SimMediaContract;
  /** Which ffprobe scans videos: a native one, or the embedded wasm build. */
  readonly videoDecoder: "native" | "wasm";
}

export interface StartOptions extends SimOptionsInput {
  /** Replaces the simulator's own multimodal expansion (media-expand.ts). */
  mediaExpander?: MediaExpander;
  /** Chat renderer override (defaults to the project's renderChatPrompt). */
  chatRenderer?: ChatRenderer;
}

export async function startSimulatedWorker(input: StartOptions = {}): Promise<SimulatedWorker> {
  const { mediaExpander, chatRenderer, ...rest } = input;
  const opts = parseSimOptions(rest);
  await initHashing();
  const timing = resolveTiming(opts.timingPreset, opts.timing);
  const tokenizer = getQwenTokenizer(opts.family);
  const vocab = buildOutputVocabulary(tokenizer);
  const renderer = chatRenderer ?? defaultChatRenderer;
  const log = opts.verbose ? (line: string) => process.stderr.write(`sglang-sim: ${line}\n`) : () => {};
  const media = await loadSimContract(opts);
  const videoProber = await VideoMetadataProber.create({ decoder: opts.media.decoder, ffprobePath: opts.media.ffprobePath, timeoutMs: opts.media.videoTimeoutMs });
  const loader = createMediaLoader(opts.media);
  // A language-only server gets each item's embedding from its encoders (encoder.ts).
  const remoteEncode =
    opts.languageOnly && opts.encoderUrls.length > 0
      ? { encode: (items: EncodeRequestItem[]) => encodeRemotely(items, opts.encoderUrls, opts.media.videoTimeoutMs), callerHashes: opts.encoderTransferBackend === "zmq_to_tokenizer" }
      : undefined;
  const expander =
    mediaExpander ?? createMediaExpander({ contract: media.contract, loader, videoProber, log, ...(remoteEncode ? { remoteEncode } : {}) });
  const encoder = opts.encoderOnly ? { cache: new EncoderCache(ENCODER_CACHE_ENTRIES), loader, useCache: opts.enablePrefixMmCache } : null;

  // One publisher, cache and scheduler per DP rank (dp-engines.ts); rank 0's are the worker's own.
  // An encoder has no radix cache and publishes no KV events.
  const publishers = opts.kvEvents && !opts.encoderOnly
    ? await startRankPublishers(
        { host: opts.host, port: opts.kvPort, replayPort: opts.replayPort, topic: opts.topic, bufferSteps: opts.bufferSteps, hwm: opts.hwm },
        opts.dpRank,
        opts.dpSize,
      )
    : [];
  const publisher = publishers[0] ?? null;
  // A PD side (--disaggregation-mode): the prefill's bootstrap server, the decode's KV wait (pd-generate.ts).
  const pd = await startPdSide(opts);
  const rankEngines = Array.from({ length: opts.dpSize }, (_, rank) => {
    const pub = publishers[rank] ?? null;
    const record = (e: KvEvent) => pub?.record(e);
    const hostTier = opts.hicache ? new HostTier({ pageSize: opts.pageSize, capacityTokens: Math.floor(opts.hicache.ratio * opts.capacityTokens), ...opts.hicache }, record) : null;
    const rankCache = new PagedRadixCache(opts.pageSize, hostTier ? hostTier.observe : record, { bigram: opts.eagle });
    return new SimEngine({
      cache: rankCache,
      hostTier,
      capacityTokens: opts.capacityTokens,
      contextLength: opts.contextLength,
      tokenizer,
      vocab,
      timing,
      naturalOutputTokens: opts.naturalOutputTokens,
      outputSeed: opts.outputSeed,
      streamInterval: opts.streamInterval,
      onStepEnd: () => pub?.flush(),
      ...pd?.engineHooks,
    });
  });
  const engine = rankEngines[0]!;
  const cache = engine.cache;
  const scheduler = new DpSimEngines(rankEngines);

  const maxReqInputLen = Math.min(opts.contextLength - 1, opts.capacityTokens - 1);
  let serving = true;
  const wildcard = opts.host === "0.0.0.0" || opts.host === "::" || opts.host === "*";
  const server: Server = createHttpServer({
    opts,
    timing,
    engine: scheduler,
    rankCaches: rankEngines.map((e) => e.cache),
    kv: publisher ? { host: wildcard ? "*" : opts.host, port: publisher.port, replayPort: publisher.replayPort } : null,
    modelDir: media.modelDir,
    pd,
    encoder,
    maxReqInputLen,
    isServing: () => serving,
    openai: {
      engine: scheduler,
      dpSize: opts.dpSize,
      tokenizer,
      contextLength: opts.contextLength,
      maxReqInputLen,
      dpRank: opts.dpRank,
      unknownSamplingKeyStatus: opts.unknownSamplingKeyStatus,
      incrementalStreaming: opts.incrementalStreamingOutput,
      mediaExpander: expander,
      log,
      family: opts.family,
      template: opts.template,
      renderer,
      enableCacheReport: opts.enableCacheReport,
    },
  });
  const sockets = new Set<Socket>();
  server.on("connection", (s: Socket) => {
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
  });
  try {
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(opts.port, opts.host, () => {
        server.off("error", reject);
        resolve();
      });
    });
  } catch (err) {
    for (const p of publishers) p.kill();
    await videoProber.close();
    throw err;
  }
  const addr = server.address() as AddressInfo;
  const urlHost = wildcard ? "127.0.0.1" : addr.family === "IPv6" ? `[${addr.address}]` : addr.address;
  const url = `http://${urlHost}:${addr.port}`;
  const kvHost = wildcard ? "127.0.0.1" : opts.host;
  log(`listening on ${url}${publisher ? `, kv events tcp://${kvHost}:${publisher.port}, replay tcp://${kvHost}:${publisher.replayPort}` : ""}`);

  let closed = false;
  return {
    url,
    kvEndpoint: publisher ? `tcp://${kvHost}:${publisher.port}` : null,
    replayEndpoint: publisher ? `tcp://${kvHost}:${publisher.replayPort}` : null,
    options: opts,
    engine,
    rankEngines,
    media,
    videoDecoder: videoProber.decoder,
    cacheDump: () => cache.dump(),
    async close() {
      if (closed) return;
      closed = true;
      serving = false;
      scheduler.abortAll();
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeIdleConnections();
        setTimeout(() => {
          for (const s of sockets) s.destroy();
        }, 1_000).unref();
      });
      await Promise.all(publishers.map((p) => p.close()));
      await videoProber.close();
      await pd?.close();
    },
    kill() {
      if (closed) return;
      closed = true;
      serving = false;
      for (const p of publishers) p.kill();
      for (const s of sockets) s.destroy();
      server.close();
      // In-flight requests die with their sockets; stop their timers from touching the cache.
      scheduler.abortAll();
      pd?.kill();
      void videoProber.close();
    },
  };
}
