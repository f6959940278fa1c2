/**
 * The edge's per-request routing work, stage by stage, exactly as the edge runs it (src/edge/chat.ts)
 * plus the exact media layout (src/layout) that media routing adds: validate → prompt → tokenize →
 * layout → block hashes → index pick. Text requests tokenize and hash through the prompt-prefix
 * cache, as the edge does. Shared by the workerd bench worker and the Node profile.
 */
import { parseChatRequest } from "../../src/api/validate.ts";
import { DEFAULT_LIMITS } from "../../src/api/limits.ts";
import { preparePrompt } from "../../src/prompt/index.ts";
import { getQwenTokenizer } from "../../src/prompt/tokenizer/index.ts";
import { localBlockHashes } from "../../src/kv/block-hash.ts";
import { sharedPrefixCache, type PrefixCache } from "../../src/prompt/prefix-cache.ts";
import { localHashToHex, type RelayEvents } from "../../src/kv/relay-protocol.ts";
import { RoutingCore } from "../../src/kv/routing-core.ts";
import { buildRoutingView, deriveContract, type MediaItem, type WorkerContract } from "../../src/layout/index.ts";

export const STAGES = ["validate", "prompt", "tokenize", "layout", "hash", "pick"] as const;

export interface EdgeBenchState {
  core: RoutingCore;
  contract: WorkerContract;
  /** Media metadata cache: URL → content hash + probe (what the decode service would have answered). */
  media: Map<string, MediaItem>;
  blockSize: number;
  indexedBlocks: number;
  /** Some of the indexed chains (local hashes in order), for realistic matching queries. */
  chains: bigint[][];
  /** The edge's prompt-prefix cache for text requests (the isolate's shared one); null = off (A/B runs). */
  prefixCache: PrefixCache | null;
}

export interface PipelineResult {
  tokens: number;
  blocks: number;
  overlap: number;
  workerId: string;
  exact: boolean;
  localHashes: bigint[];
}

export type Clock = () => number;

const FAMILY = "qwen3_vl" as const;
const TEMPLATE = "qwen3vl-instruct" as const;

export function contractFrom(files: { config: unknown; preprocessorConfig: unknown; videoPreprocessorConfig: unknown }): WorkerContract {
  const r = deriveContract(files, { version: "0.5.19", flags: {} });
  if (!r.ok) throw new Error(`${r.reason}: ${r.detail}`);
  return r.contract;
}

/** A seeded 64-bit-ish mixer for synthetic block hashes. */
function mix(x: bigint): bigint {
  x = BigInt.asUintN(64, (x ^ (x >> 33n)) * 0xff51afd7ed558ccdn);
  x = BigInt.asUintN(64, (x ^ (x >> 33n)) * 0xc4ceb9fe1a85ec53n);
  return x ^ (x >> 33n);
}

/** Engine-hash stand-in for a block chain: deterministic in the prefix, decimal int64 like SGLang's. */
export function engineChain(localHashes: readonly bigint[], salt: bigint): string[] {
  const out: string[] = [];
  let h = salt;
  for (const l of localHashes) {
    h = mix(h ^ l);
    out.push(BigInt.asIntN(64, h).toString());
  }
  return out;
}

/**
 * A pool of `workers` synced workers each holding `blocksPerWorker` blocks in chains of 64 (random
 * contents: they occupy the index like real traffic but never match the bench's prompts by accident).
 */
export function createState(contract: WorkerContract, workers: number, blocksPerWorker: number, seed = 1): EdgeBenchState {
  const blockSize = 16;
  // A real clock: time-based state in the core (pending routes, load expiry) must age as in production.
  const core = new RoutingCore({ blockSize, random: () => 0.5, now: () => Date.now() });
  const chains: bigint[][] = [];
  let x = BigInt(seed);
  for (let w = 0; w < workers; w++) {
    const workerId = `w${w + 1}`;
    const hello = core.hello(
      { type: "hello", workerId, url: `http://127.0.0.1:${9000 + w}`, blockSize, epoch: 1, modelName: "Qwen/Qwen3-VL-8B-Instruct", contract: null, kvEvents: true },
      workerId,
    );
    if (!hello.ok) throw new Error(hello.reason);
    const blocks: { h: string; p: string | null; l: string }[] = [];
    for (let c = 0; blocks.length < blocksPerWorker; c++) {
      const locals: bigint[] = [];
      for (let i = 0; i < 64 && blocks.length + locals.length < blocksPerWorker; i++) locals.push(mix((x += 0x9e3779b97f4a7c15n)));
      const engines = engineChain(locals, BigInt(w * 1_000_003 + c));
      if (c < 16 && locals.length === 64) chains.push(locals);
      locals.forEach((l, i) => blocks.push({ h: engines[i]!, p: i === 0 ? null : engines[i - 1]!, l: localHashToHex(l) }));
    }
    const r = core.applyDump(workerId, { type: "dump", epoch: 1, seq: -1, blocks });
    if (!r.ok) throw new Error(r.reason);
  }
  return { core, contract, media: new Map(), blockSize, indexedBlocks: core.index.size, chains, prefixCache: sharedPrefixCache() };
}

/**
 * One request's routing work. `lap` (optional) receives the time spent per stage in STAGES order;
 * the settle that frees the load follows the pick at once (the real edge settles after the answer).
 */
export function runPipeline(state: EdgeBenchState, bodyText: string, clock?: Clock, lap?: Float64Array): PipelineResult {
  let t = clock ? clock() : 0;
  const mark = (stage: number): void => {
    if (!clock || !lap) return;
    const now = clock();
    lap[stage] = (lap[stage] ?? 0) + now - t;
    t = now;
  };
  // As the edge: the body's byte size was capped while readBodyText read it.
  const req = parseChatRequest(bodyText, DEFAULT_LIMITS, { sizeChecked: true });
  mark(0);
  const prompt = preparePrompt(req, { family: FAMILY, templateId: TEMPLATE });
  mark(1);
  const tokenizer = getQwenTokenizer(FAMILY);
  if (prompt.mediaParts.length === 0 && state.prefixCache) {
    // Text path exactly like src/edge/chat.ts: tokens and block hashes through the prefix cache.
    const enc = state.prefixCache.encode(tokenizer, prompt.text, state.blockSize, () => mark(2));
    mark(4);
    return pick(state, enc.length, enc.localHashes, true, mark);
  }
  const encode = (s: string): number[] => tokenizer.encode(s);
  const templateTokens = encode(prompt.text);
  mark(2);
  let routingTokens: ArrayLike<number> = templateTokens;
  let exact = true;
  if (prompt.mediaParts.length > 0) {
    const items: MediaItem[] = [];
    for (const p of prompt.mediaParts) {
      const m = state.media.get(p.url);
      if (!m) {
        exact = false;
        break;
      }
      items.push(m);
    }
    const view = exact ? buildRoutingView(state.contract, templateTokens, items, encode) : null;
    if (view && view.ok) routingTokens = view.tokens;
    else {
      // Fallback exactly like src/edge/chat.ts textPrefixPlan: the text before the first media token.
      exact = false;
      const cut = templateTokens.indexOf(tokenizer.specialIds.visionStart);
      routingTokens = cut < 0 ? templateTokens : templateTokens.slice(0, cut);
    }
  }
  mark(3);
  const localHashes = localBlockHashes(routingTokens, state.blockSize);
  mark(4);
  return pick(state, routingTokens.length, localHashes, exact, mark);
}

function pick(state: EdgeBenchState, tokens: number, localHashes: bigint[], exact: boolean, mark: (stage: number) => void): PipelineResult {
  const d = state.core.route({ localHashes, isl: tokens, fallbackReason: exact ? null : "media_layout_unavailable" });
  if (!d) throw new Error("no worker");
  state.core.settle({ receiptId: d.receiptId, promptTokens: tokens, cachedTokens: d.overlapBlocks * state.blockSize, outcome: "ok" });
  mark(5);
  return { tokens, blocks: localHashes.length, overlap: d.overlapBlocks, workerId: d.workerId, exact, localHashes };
}

/** Records the request's blocks as cached on the worker it was routed to (what its KV events would say). */
export function commitBlocks(state: EdgeBenchState, r: PipelineResult): void {
  const engines = engineChain(r.localHashes, 7n);
  const msg: RelayEvents = {
    type: "events",
    epoch: 1,
    seq: 0,
    events: [{ t: "stored", parent: null, blocks: r.localHashes.map((l, i) => ({ h: engines[i]!, l: localHashToHex(l) })) }],
  };
  if (msg.events.length && r.localHashes.length) {
    const out = state.core.applyEvents(r.workerId, msg);
    if (!out.ok) throw new Error(`commit failed: ${out.reason}`);
  }
}

/** Registers a media item in the metadata cache. */
export function registerMedia(state: EdgeBenchState, url: string, item: MediaItem): void {
  state.media.set(url, item);
}
