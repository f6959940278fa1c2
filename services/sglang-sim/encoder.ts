/**
 * Encoder disaggregation (EPD) in the simulator: SGLang's `--encoder-only` server and the
 * `--language-only` prefill's calls to it (sgl-project/sglang python/sglang/srt/server_args.py
 * L2481-2510 @9d147fd).
 *  - The router never talks to an encoder. A language-only server posts each request's media to its
 *    `--encoder-urls` itself: per modality, the items spread over a shuffled encoder list, one
 *    `POST /encode` per encoder part with `{mm_items: [<url or data>], modality, req_id, num_parts,
 *    part_idx, prefill_host, embedding_port}` and no `mm_hashes`
 *    (disaggregation/encode_receiver.py `MMReceiverHTTP.encode`, `_assign_items_by_modality` @00126648).
 *  - The encoder loads each item and keys its embedding cache (`--enable-prefix-mm-cache`, LRU of
 *    SGLANG_VLM_CACHE_SIZE_MB) by the item's own hash, `MultimodalDataItem.hash` after
 *    `set_pad_value()`: a hash of the processed pixels, never a caller's (encode_server.py @00d35548).
 *    Here the stand-in is media-hash.ts `contentHash` of the item's bytes, as the simulator's pad values.
 *  - Caller `mm_hashes` key the prefill's radix cache only when the embeddings come back through its
 *    tokenizer (`--encoder-transfer-backend zmq_to_tokenizer`), where they are applied to the items
 *    (managers/tokenizer_manager.py `_tokenize_one_request` @001067ff). With `zmq_to_scheduler` (the
 *    default) or `mooncake` the scheduler builds the items from the received embeddings and the pad
 *    value comes from a hash of the embedding tensor (`get_mm_data` → `precomputed_embeddings`).
 * Simulated: embeddings are not computed or moved; /encode answers each item's embedding hash in its
 * HTTP response instead of pushing tensors over ZMQ to `embedding_port`.
 */
import { createHash, randomInt } from "node:crypto";
import type { Modality } from "../../src/layout/index.ts";
import type { MediaLoader } from "./media-fetch.ts";
import { ByteLru } from "../../src/util/byte-lru.ts";
import { contentHash } from "./media-hash.ts";
import { SglangInternalError, SglangValueError } from "./sglang-errors.ts";

export type EncoderTransferBackend = "zmq_to_scheduler" | "zmq_to_tokenizer" | "mooncake";

/** Items of one /encode call at most (a bound on the simulator's work per request). */
const MAX_ITEMS_PER_CALL = 64;

/** One media item's encoding as the encoder reports it. */
export interface EncodedItem {
  /** The encoder's cache key for the item (hex): its own hash of the content. */
  itemHash: string;
  /** The embedding tensor's hash (hex): what a scheduler-side receiver derives the pad value from. */
  embeddingHash: string;
  cacheHit: boolean;
}

/** The encoder's embedding cache: item hash → embedding (here: its hash), LRU by count. */
export class EncoderCache {
  /** Bounded by count (`capacity`): each entry weighs 1. */
  readonly #entries: ByteLru<string, string>;
  hits = 0;
  misses = 0;
  readonly capacity: number;
  constructor(capacity: number) {
    this.capacity = capacity;
    this.#entries = new ByteLru(capacity);
  }

  encode(bytes: Uint8Array, useCache: boolean): EncodedItem {
    const itemHash = contentHash(bytes).toString(16).padStart(16, "0");
    const cached = useCache ? this.#entries.get(itemHash) : undefined;
    if (cached !== undefined) {
      this.hits++;
      return { itemHash, embeddingHash: cached, cacheHit: true };
    }
    if (useCache) this.misses++;
    // The vision tower is deterministic per content: the same item always gives the same embedding.
    const embeddingHash = createHash("sha256").update("sim-embedding:").update(itemHash).digest("hex").slice(0, 16);
    if (useCache) this.#entries.set(itemHash, embeddingHash, 1);
    return { itemHash, embeddingHash, cacheHit: false };
  }

  stats(): { hits: number; misses: number; entries: number } {
    return { hits: this.hits, misses: this.misses, entries: this.#entries.size };
  }
}

const MODALITIES: Record<string, Modality> = { IMAGE: "image", VIDEO: "video" };

/** The encoder's `POST /encode`: loads and encodes the part's items; a bad body is a 400 (SglangValueError). */
export async function handleEncode(raw: unknown, deps: { cache: EncoderCache; loader: MediaLoader; useCache: boolean }): Promise<Record<string, unknown>> {
  const b = (typeof raw === "object" && raw !== null ? raw : {}) as Record<string, unknown>;
  const modality = typeof b["modality"] === "string" ? MODALITIES[b["modality"]] : undefined;
  const items = b["mm_items"];
  if (!modality) throw new SglangValueError("modality must be IMAGE or VIDEO (the simulator encodes no audio)");
  if (!Array.isArray(items) || items.length === 0 || items.length > MAX_ITEMS_PER_CALL || !items.every((x) => typeof x === "string" && x.length > 0))
    throw new SglangValueError(`mm_items must be 1…${MAX_ITEMS_PER_CALL} media URLs or data strings`);
  const encoded: EncodedItem[] = [];
  for (const source of items as string[]) encoded.push(deps.cache.encode(await deps.loader.load(modality, source), deps.useCache));
  return { req_id: b["req_id"] ?? null, part_idx: b["part_idx"] ?? 0, num_parts: b["num_parts"] ?? 1, items: encoded.map((e) => ({ item_hash: e.itemHash, embedding_hash: e.embeddingHash, cache_hit: e.cacheHit })) };
}

/** One media item a language-only prefill sends out, in its request's item order. */
export interface EncodeRequestItem {
  modality: Modality;
  source: string;
}

/**
 * The language-only side: spreads the items of each modality over a shuffled encoder list (base
 * share each, the remainder to the first in the shuffle), posts one /encode per part and returns
 * each item's encoding in the input order. Any encoder failure fails the request (SGLang aborts it
 * rather than run vision locally once dispatched).
 */
export async function encodeRemotely(items: EncodeRequestItem[], encoderUrls: readonly string[], timeoutMs: number): Promise<EncodedItem[]> {
  const order = encoderUrls.map((_, i) => i);
  for (let i = order.length - 1; i > 0; i--) {
    const j = randomInt(i + 1);
    [order[i], order[j]] = [order[j]!, order[i]!];
  }
  const out = new Array<EncodedItem>(items.length);
  const parts: { url: string; modality: Modality; indices: number[] }[] = [];
  for (const modality of ["image", "video"] as const) {
    const indices = items.flatMap((it, i) => (it.modality === modality ? [i] : []));
    const base = Math.floor(indices.length / order.length);
    const extra = indices.length % order.length;
    let at = 0;
    order.forEach((enc, k) => {
      const n = base + (k < extra ? 1 : 0);
      if (n > 0) parts.push({ url: encoderUrls[enc]!, modality, indices: indices.slice(at, at + n) });
      at += n;
    });
  }
  const reqId = randomInt(2 ** 47).toString(16);
  await Promise.all(
    parts.map(async (p, partIdx) => {
      const res = await fetch(`${p.url}/encode`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ mm_items: p.indices.map((i) => items[i]!.source), modality: p.modality.toUpperCase(), req_id: `${reqId}_local_part_${partIdx}`, num_parts: parts.length, part_idx: partIdx }),
        signal: AbortSignal.timeout(timeoutMs),
      }).catch((err: unknown) => {
        throw new SglangInternalError(`encoder ${p.url} unreachable: ${(err as Error).message}`);
      });
      const body = (await res.json().catch(() => null)) as { items?: { item_hash: string; embedding_hash: string; cache_hit: boolean }[] } | null;
      if (!res.ok || !body?.items || body.items.length !== p.indices.length) throw new SglangInternalError(`encoder ${p.url} answered HTTP ${res.status}`);
      p.indices.forEach((i, k) => {
        const e = body.items![k]!;
        out[i] = { itemHash: e.item_hash, embeddingHash: e.embedding_hash, cacheHit: e.cache_hit };
      });
    }),
  );
  return out;
}
