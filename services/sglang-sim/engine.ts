/**
 * The simulated scheduler: FIFO admission against the KV pool (radix tree + tokens reserved by
 * running requests, LRU eviction to make room), one prefill at a time, per-token decode, and the
 * two cache writes SGLang makes: the prompt right after prefill (cache_unfinished_req, so
 * concurrent requests can share it) and prompt + output when the request ends (cache_finished_req).
 */
import type { QwenTokenizer } from "../../src/prompt/tokenizer/index.ts";
import type { MatchResult, PagedRadixCache, RadixNode } from "./radix-cache.ts";
import type { HostTier } from "./hicache.ts";
import type { SamplingParams } from "./sampling-params.ts";
import { SglangValueError } from "./sglang-errors.ts";
import { decodeStepMs, encoderMs, prefillMs, type MediaCostItem, type Timing } from "./timing.ts";
import { OutputStream, outputSeed, type OutputVocabulary } from "./token-source.ts";

export type FinishReason =
  | { type: "stop"; matched: number | string }
  | { type: "length"; length: number }
  | { type: "abort"; message: string; status_code: number | null; err_type: string | null };

/** What a request looks like at one point in time (a stream frame or the final answer). */
export interface RequestSnapshot {
  rid: string;
  promptTokens: number;
  cachedTokens: number;
  outputIds: number[];
  /** Detokenized output with special tokens hidden and a matched stop string trimmed. */
  text: string;
  finishReason: FinishReason | null;
  /** Seconds since the request was received; set on the final snapshot only. */
  e2eLatency: number | null;
  /** The DP rank that served it (dp-engines.ts); absent: a single scheduler. */
  dpRank?: number;
}

export interface SubmitInput {
  rid: string;
  inputIds: number[];
  sampling: SamplingParams;
  /** GenerateReqInput.cache_salt: the radix-cache namespace (null/absent: none). */
  cacheSalt?: string | null;
  /** Called for every frame a streaming client should see (not while a stop string may be forming). */
  onFrame?: (s: RequestSnapshot) => void;
  /** Scripted answer tokens (scripted-output.ts); null = the seeded pseudo-random words. */
  script?: number[] | null;
  /** GenerateReqInput.routed_dp_rank: the DP rank to run on (dp-engines.ts); absent: the controller picks. */
  routedDpRank?: number | null;
  /** The prompt's media items: their vision-encoder time joins the prefill (timing.ts encoderMs). */
  media?: readonly MediaCostItem[];
}

export interface EngineConfig {
  cache: PagedRadixCache;
  capacityTokens: number;
  contextLength: number;
  tokenizer: QwenTokenizer;
  vocab: OutputVocabulary;
  timing: Timing;
  naturalOutputTokens: { min: number; max: number };
  outputSeed: "prompt" | "rid";
  /** `--stream-interval` (a request's sampling_params.stream_interval wins). */
  streamInterval: number;
  /** End of a scheduler step: publish the KV events it produced as one batch. */
  onStepEnd: () => void;
  /** A request's prompt KV is computed (a PD prefill hands it to its decode peer then: disaggregation.ts). */
  onPrefilled?: (rid: string, cachedTokens: number, promptTokens: number) => void;
  /** A PD decode's request whose prompt KV came from its prefill peer: the peer's cached tokens (taken once); else null. */
  transferredCached?: (rid: string) => number | null;
  /** HiCache's host-memory tier (`--enable-hierarchical-cache`, hicache.ts); absent: GPU only. */
  hostTier?: HostTier | null;
}

interface LiveRequest {
  input: SubmitInput;
  /** A PD decode request: its prompt KV came from the prefill peer, which had this many tokens cached. */
  transferredCached: number | null;
  receivedAt: number;
  abort: AbortController;
  abortMessage: string;
  cachedTokens: number;
  /** Time to load this request's host-memory pages back to the GPU (HiCache), before its prefill. */
  loadBackMs: number;
  lockedNode: RadixNode | null;
  /** Tokens of the KV pool this request holds outside the tree. */
  reserved: number;
  /** This request's share of the decode batch's context (0 until it decodes). */
  decodeContext: number;
  plannedOutput: number;
  /** Longest stop string: a new match can start at most this far before the new token. */
  maxStopLength: number;
  stream: OutputStream;
  done: (s: RequestSnapshot) => void;
}

class Aborted extends Error {}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.reject(new Aborted());
  return new Promise((resolve, reject) => {
    const onAbort = (): void => {
      clearTimeout(t);
      reject(new Aborted());
    };
    const t = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

function yieldTurn(signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => setImmediate(() => (signal.aborted ? reject(new Aborted()) : resolve())));
}

export class SimEngine {
  private readonly cfg: EngineConfig;
  private readonly waiting: LiveRequest[] = [];
  private readonly running = new Set<LiveRequest>();
  private readonly byRid = new Map<string, LiveRequest>();
  private reservedTotal = 0;
  private prefillLane: Promise<void> = Promise.resolve();
  /** Prefills queued or running on the lane (calibrated timing: decode steps wait while any is, as SGLang runs a new prefill batch before the next decode step). */
  private prefillsPending = 0;
  /** KV tokens the running decode batch attends to (prompt + output so far, summed). */
  private decodeContext = 0;
  private lastGenThroughput = 0;

  constructor(cfg: EngineConfig) {
    this.cfg = cfg;
  }

  get cache(): PagedRadixCache {
    return this.cfg.cache;
  }

  get runningCount(): number {
    return this.running.size;
  }

  get waitingCount(): number {
    return this.waiting.length;
  }

  get idle(): boolean {
    return this.running.size === 0 && this.waiting.length === 0;
  }

  get freeTokens(): number {
    return this.cfg.capacityTokens - this.cfg.cache.totalTokens - this.reservedTotal;
  }

  get throughput(): number {
    return this.lastGenThroughput;
  }

  /** Queues a request; resolves with its final snapshot (also for aborts). */
  submit(input: SubmitInput): Promise<RequestSnapshot> {
    if (this.byRid.has(input.rid)) throw new SglangValueError("Duplicate request ID detected");
    const seedMaterial = this.cfg.outputSeed === "rid" ? input.rid : input.inputIds;
    const stream = new OutputStream(
      this.cfg.vocab,
      outputSeed(seedMaterial, input.sampling.samplingSeed),
      this.cfg.naturalOutputTokens,
      input.script ?? null,
    );
    return new Promise<RequestSnapshot>((resolve) => {
      const transferredCached = this.cfg.transferredCached?.(input.rid) ?? null;
      const req: LiveRequest = {
        input,
        transferredCached,
        receivedAt: performance.now(),
        abort: new AbortController(),
        abortMessage: "Abort in waiting queue",
        cachedTokens: 0,
        loadBackMs: 0,
        lockedNode: null,
        reserved: 0,
        decodeContext: 0,
        plannedOutput: this.plannedOutput(input, stream),
        maxStopLength: Math.max(0, ...input.sampling.stop.map((x) => x.length)),
        stream,
        done: resolve,
      };
      this.byRid.set(input.rid, req);
      this.waiting.push(req);
      this.tryAdmit();
    });
  }

  /** /abort_request: rids are matched by prefix, as SGLang's scheduler does. */
  abort(rid: string, all: boolean): number {
    let n = 0;
    for (const req of this.byRid.values()) {
      if (all || (rid.length > 0 && req.input.rid.startsWith(rid))) {
        req.abort.abort();
        n++;
      }
    }
    if (n > 0) this.tryAdmit();
    return n;
  }

  /** Aborts everything (shutdown). */
  abortAll(): void {
    this.abort("", true);
  }

  /** flush_cache: succeeds only when idle. */
  flushCache(): boolean {
    if (!this.idle) return false;
    this.cfg.cache.reset();
    this.cfg.onStepEnd();
    return true;
  }

  private plannedOutput(input: SubmitInput, stream: OutputStream): number {
    const s = input.sampling;
    const hardCap = Math.max(
      0,
      Math.min(1 << 30, this.cfg.contextLength - input.inputIds.length - 1, this.cfg.capacityTokens - input.inputIds.length),
    );
    const limit = s.maxNewTokens === null ? hardCap : Math.min(s.maxNewTokens, hardCap);
    // Without ignore_eos the answer ends after its natural length + the EOS token.
    return s.ignoreEos ? limit : Math.min(limit, Math.max(stream.naturalLength, s.minNewTokens) + 1);
  }

  private tryAdmit(): void {
    const cache = this.cfg.cache;
    while (this.waiting.length > 0) {
      const req = this.waiting[0]!;
      if (req.abort.signal.aborted) {
        this.waiting.shift();
        this.finish(req, { type: "abort", message: req.abortMessage, status_code: null, err_type: null }, [], "", false);
        continue;
      }
      const ids = req.input.inputIds;
      // At least one prompt token is always computed (it produces the first logits).
      let match = cache.matchPrefix(ids, req.input.cacheSalt ?? null, Math.max(0, ids.length - 1));
      const loaded = this.loadBack(ids, req.input.cacheSalt ?? null, match);
      if (loaded) match = loaded.match;
      cache.incLockRef(match.node);
      const need = ids.length - match.length + req.plannedOutput;
      if (need > this.freeTokens) cache.evict(need - this.freeTokens);
      if (need > this.freeTokens) {
        cache.decLockRef(match.node);
        if (this.running.size > 0) break; // wait for running requests to free their tokens
        this.waiting.shift();
        this.finish(
          req,
          { type: "abort", message: "Request does not fit in the KV cache.", status_code: 400, err_type: "BadRequestError" },
          [],
          "",
          false,
        );
        continue;
      }
      this.waiting.shift();
      req.cachedTokens = req.transferredCached ?? match.length;
      req.loadBackMs = loaded?.ms ?? 0;
      req.lockedNode = match.node;
      req.reserved = need;
      this.reservedTotal += need;
      this.running.add(req);
      void this.run(req);
    }
    this.cfg.onStepEnd();
  }

  private async run(req: LiveRequest): Promise<void> {
    const { inputIds, sampling, onFrame } = req.input;
    const signal = req.abort.signal;
    const outputIds: number[] = [];
    let text = "";
    req.abortMessage = "Abort before prefill";
    try {
      const uncached = inputIds.length - req.cachedTokens;
      const timing = this.cfg.timing;
      this.prefillsPending++;
      // A PD decode request computes no prefill: its KV arrived from the prefill peer.
      const prefill = req.transferredCached !== null ? Promise.resolve() : this.prefillLane.then(() => sleep(req.loadBackMs + prefillMs(timing, uncached, req.cachedTokens) + encoderMs(timing, req.input.media ?? [], req.cachedTokens), signal));
      this.prefillLane = prefill.catch(() => {});
      try {
        await prefill;
      } finally {
        this.prefillsPending--;
      }

      // cache_unfinished_req: the prompt becomes matchable for others right after prefill.
      // A PD decode keeps no radix tree (SGLang forces ChunkCache there): nothing inserted, no events.
      if (req.transferredCached === null) this.cacheTokens(req, inputIds);
      this.release(req, inputIds.length - (inputIds.length % this.cfg.cache.pageSize) - req.cachedTokens);
      this.cfg.onStepEnd();
      if (req.transferredCached === null) this.cfg.onPrefilled?.(req.input.rid, req.cachedTokens, inputIds.length);
      req.abortMessage = "Abort in running batch";

      const decodeStart = performance.now();
      let deadline = decodeStart;
      if (req.plannedOutput === 0) {
        this.finish(req, { type: "length", length: 0 }, outputIds, text, true);
        return;
      }
      req.decodeContext = inputIds.length;
      this.decodeContext += req.decodeContext;
      for (;;) {
        if (timing.calibration && this.prefillsPending > 0) {
          // SGLang schedules a waiting prefill before the next decode step: the batch stalls meanwhile.
          await this.prefillLane;
          deadline = performance.now();
        }
        // Sleep to a running deadline so timer lateness does not accumulate over many tokens.
        const stepMs = decodeStepMs(timing, this.running.size, this.decodeContext);
        deadline += stepMs;
        const wait = deadline - performance.now();
        if (wait >= 1) await sleep(wait, signal);
        else if (outputIds.length % 64 === 0) await yieldTurn(signal);

        const allowStop = outputIds.length >= sampling.minNewTokens;
        const token = req.stream.next(allowStop && !sampling.ignoreEos);
        outputIds.push(token);
        req.decodeContext++;
        this.decodeContext++;
        // Random output tokens are whole ASCII words, so decoding token by token equals decoding the
        // whole run; a scripted answer may split a character across tokens, so it is decoded whole.
        const prevLength = text.length;
        const before = text;
        const hidden = (t: number) => sampling.skipSpecialTokens && this.cfg.vocab.specialIds.has(t);
        // Like SGLang's detokenizer, an incomplete UTF-8 sequence at the end is held back (no U+FFFD).
        if (req.stream.scripted) text = this.cfg.tokenizer.decode(outputIds.filter((t) => !hidden(t))).replace(/\uFFFD+$/u, "");
        else if (!hidden(token)) text += this.cfg.tokenizer.decode([token]);
        this.lastGenThroughput = outputIds.length / Math.max(1e-3, (performance.now() - decodeStart) / 1000);

        // detokenizer_manager.py trim_matched_stop: a stop token's own text is cut unless no_stop_trim.
        const stopText = sampling.noStopTrim ? text : before;
        if (allowStop && !sampling.ignoreEos && this.cfg.vocab.specialIds.has(token)) {
          this.finish(req, { type: "stop", matched: token }, outputIds, stopText, true);
          return;
        }
        if (allowStop && sampling.stopTokenIds.includes(token)) {
          this.finish(req, { type: "stop", matched: token }, outputIds, stopText, true);
          return;
        }
        if (allowStop && sampling.stop.length > 0) {
          const hit = earliestStop(text, sampling.stop, Math.max(0, prevLength - req.maxStopLength));
          if (hit) {
            const trimmed = sampling.noStopTrim ? text : text.slice(0, hit.index);
            this.finish(req, { type: "stop", matched: hit.stop }, outputIds, trimmed, true);
            return;
          }
        }
        if (outputIds.length >= req.plannedOutput) {
          this.finish(req, { type: "length", length: req.plannedOutput }, outputIds, text, true);
          return;
        }
        // scheduler_output_processor_mixin.py (sgl-project/sglang @5294b03) stream_output: with an
        // interval k > 1 a frame goes out at output lengths 1, k + 1, 2k + 1, …; the finishing one always.
        const every = sampling.streamInterval ?? this.cfg.streamInterval;
        const due = every > 1 ? outputIds.length % every === 1 : true;
        if (onFrame && due && !tailMayStartStop(text, sampling.stop)) onFrame(this.snapshot(req, outputIds, text, null));
      }
    } catch (err) {
      const prefilled = req.abortMessage === "Abort in running batch";
      if (err instanceof Aborted) {
        this.finish(req, { type: "abort", message: req.abortMessage, status_code: null, err_type: null }, outputIds, text, prefilled);
      } else {
        // A simulator bug must not leave the request hanging: end it as SGLang ends a failed request.
        process.stderr.write(`sglang-sim: request ${req.input.rid} failed: ${(err as Error)?.stack ?? String(err)}\n`);
        const reason = { type: "abort" as const, message: "Internal simulator error.", status_code: 500, err_type: "InternalServerError" };
        this.finish(req, reason, outputIds, text, prefilled);
      }
    }
  }

  /**
   * HiCache load-back: the pages right after the GPU match that host memory holds go back into the
   * GPU tree (their BlockStored(GPU) events included), making room first as SGLang does. Null when
   * there is nothing to load or no room for it.
   */
  private loadBack(ids: readonly number[], salt: string | null, match: MatchResult): { match: MatchResult; ms: number } | null {
    const host = this.cfg.hostTier;
    const cache = this.cfg.cache;
    const hit = host ? host.lookup(ids, salt, match.length, Math.max(0, ids.length - 1)) : null;
    const tokens = hit ? hit.hostTokens + hit.storageTokens : 0;
    if (!host || !hit || tokens === 0) return null;
    cache.incLockRef(match.node);
    if (tokens > this.freeTokens) cache.evict(tokens - this.freeTokens);
    cache.decLockRef(match.node);
    if (tokens > this.freeTokens) return null;
    const { node } = cache.insert(ids.slice(0, match.length + tokens), salt);
    return { match: { length: match.length + tokens, node }, ms: host.loadBackMs(hit) };
  }

  /** Inserts `tokens` into the tree and moves this request's lock to the node that now covers them. */
  private cacheTokens(req: LiveRequest, tokens: readonly number[]): void {
    const cache = this.cfg.cache;
    const { node } = cache.insert(tokens, req.input.cacheSalt ?? null);
    cache.incLockRef(node);
    if (req.lockedNode) cache.decLockRef(req.lockedNode);
    req.lockedNode = node;
  }

  /** Returns part of a request's pool reservation (its pages moved into the tree or were freed). */
  private release(req: LiveRequest, tokens: number): void {
    const n = Math.min(req.reserved, Math.max(0, tokens));
    req.reserved -= n;
    this.reservedTotal -= n;
  }

  private finish(
    req: LiveRequest,
    reason: FinishReason,
    outputIds: number[],
    text: string,
    prefilled: boolean,
  ): void {
    if (req.lockedNode) {
      if (prefilled && req.transferredCached === null) {
        // cache_finished_req: prompt + output whose KV exists (the last sampled token has none yet).
        const kvTokens = req.input.inputIds.concat(outputIds.slice(0, Math.max(0, outputIds.length - 1)));
        this.cacheTokens(req, kvTokens);
      }
      this.cfg.cache.decLockRef(req.lockedNode);
      req.lockedNode = null;
    }
    this.reservedTotal -= req.reserved;
    req.reserved = 0;
    this.decodeContext -= req.decodeContext;
    req.decodeContext = 0;
    this.running.delete(req);
    this.byRid.delete(req.input.rid);
    const snap = this.snapshot(req, outputIds, text, reason);
    snap.e2eLatency = (performance.now() - req.receivedAt) / 1000;
    req.done(snap);
    if (this.waiting.length > 0) queueMicrotask(() => this.tryAdmit());
    else this.cfg.onStepEnd();
  }

  private snapshot(req: LiveRequest, outputIds: number[], text: string, reason: FinishReason | null): RequestSnapshot {
    return {
      rid: req.input.rid,
      promptTokens: req.input.inputIds.length,
      cachedTokens: req.cachedTokens,
      outputIds: outputIds.slice(),
      text,
      finishReason: reason,
      e2eLatency: null,
    };
  }
}

/** Earliest stop-string match starting at or after `from` (earlier text was checked before). */
function earliestStop(text: string, stops: readonly string[], from: number): { index: number; stop: string } | null {
  let best: { index: number; stop: string } | null = null;
  for (const s of stops) {
    const i = text.indexOf(s, from);
    if (i >= 0 && (best === null || i < best.index)) best = { index: i, stop: s };
  }
  return best;
}

/** True while the text ends with a proper prefix of a stop string (SGLang withholds that frame). */
function tailMayStartStop(text: string, stops: readonly string[]): boolean {
  for (const s of stops) {
    for (let k = Math.min(s.length - 1, text.length); k > 0; k--) {
      if (text.endsWith(s.slice(0, k))) return true;
    }
  }
  return false;
}
