/**
 * The sampled checks of the stages built from cached pieces (a `KVEDGE_TURN_CHECK_RATE` share of
 * requests; the caller draws): each computes its stage the full way, without the cache, compares
 * it with what the incremental path gave, and on a difference counts and logs it (../exactness.ts),
 * drops every cache entry whose chain holds a piece the result was built from, and returns the
 * full result for this request. Nothing here runs on an unsampled request.
 */
import { localBlockHashes, namespacedLocalHashWords, type LocalHashes, type NamespaceTag } from "../../blocks/block-hash.ts";
import { expandPrompt } from "../../layout/index.ts";
import type { EncodedPrompt, PrefixCache, PrefixTokenizer } from "../../prompt/prefix-cache.ts";
import { clearTokenizerCaches } from "../../prompt/tokenizer/index.ts";
import { QwenTokenizerImpl } from "../../prompt/tokenizer/tokenizer.ts";
import type { PromptPieces, TurnChainCache } from "../../prompt/turn-chain.ts";
import type { BodyPart } from "../../proxy/generate-body.ts";
import type { GenerateRequestBody } from "../../proxy/sglang-wire.ts";
import { sameBytes } from "../../util/same-bytes.ts";
import { forgetRoutedRuns, type PlainHashes, type RoutingNamespace } from "../cache-salt.ts";
import { countCheck, countMismatch } from "../exactness.ts";
import type { VerifiedMedia } from "../media.ts";
import { forgetRoutedItems, wholeRoutedItems, type ItemCohort, type RoutedItems } from "./routed-items.ts";
import type { ViewHashCache, ViewHashes, ViewInput } from "./view-hashes.ts";

/** What the prompt-prefix cache was asked to encode: the whole prompt's text and where. */
export interface WholePrompt {
  tokenizer: PrefixTokenizer;
  text: string;
  blockSize: number;
  partition: string;
}

/**
 * `encoded` (the prompt-prefix cache's, for `whole`) checked against encoding the whole text and
 * hashing its ids: the ids (the cached pieces' and the partial last block's) and their count are
 * `prompt_ids`, the block hashes `block_hashes`. On a difference the whole encode, as one piece.
 */
export function checkedEncode(encoded: EncodedPrompt, whole: WholePrompt, cache: PrefixCache): EncodedPrompt {
  countCheck("prompt_ids");
  countCheck("block_hashes");
  const ids = encodeWithoutSegments(whole.tokenizer, whole.text, whole.partition);
  const hashes = localBlockHashes(ids, whole.blockSize);
  // The count too: it is what the context fit and the plan's isl read, whatever the pieces hold.
  const kind = encoded.length !== ids.length || !sameRun(encoded.idPieces ?? [encoded.tokens()], ids) ? "prompt_ids" : !sameRun(encoded.hashPieces, hashes) ? "block_hashes" : null;
  if (kind === null) return encoded;
  // The tokenizer's own caches may be what gave the wrong ids (the prefix cache encodes through them): emptied when they still do.
  const tokenizerCaches = kind === "prompt_ids" && whole.tokenizer instanceof QwenTokenizerImpl && !sameRun([whole.tokenizer.encode(whole.text, whole.partition)], ids);
  if (tokenizerCaches) clearTokenizerCaches();
  countMismatch(kind, { tokens: ids.length, cachedTokens: encoded.length, reusedTokens: encoded.reusedTokens, dropped: cache.dropPiecesOf(encoded), tokenizerCaches: tokenizerCaches ? 1 : 0 });
  return { length: ids.length, localHashes: hashes, reusedTokens: 0, hashPieces: [hashes], idPieces: [ids], tokens: () => ids.slice() };
}

/** `text` encoded without the segment cache (a wrong cached segment would agree with itself); another tokenizer: its own encode. */
function encodeWithoutSegments(tokenizer: PrefixTokenizer, text: string, partition: string): number[] {
  return tokenizer instanceof QwenTokenizerImpl ? tokenizer.encodeWithoutSegmentCache(text, partition) : tokenizer.encode(text, partition);
}

/**
 * `hashed` (the view cache's, for `input`) checked against expanding the template's ids whole
 * (`template`: input.pieces joined) and hashing the view (view-hashes.ts whole()): length and every
 * block hash, or the same refusal. On a difference the whole computation's result.
 */
export function checkedViewHashes(hashed: ViewHashes, input: ViewInput, template: readonly number[], cache: ViewHashCache): ViewHashes {
  countCheck("view_hashes");
  const full = wholeView(input, template);
  const same = hashed.ok && full.ok ? hashed.length === full.length && sameRun(hashed.hashPieces, full.localHashes) : !hashed.ok && !full.ok && hashed.reason === full.reason;
  if (same) return hashed;
  countMismatch("view_hashes", { tokens: full.ok ? full.length : 0, cachedTokens: hashed.ok ? hashed.length : 0, reusedTokens: hashed.ok ? hashed.reusedTokens : 0, dropped: hashed.ok ? cache.dropPiecesOf(hashed.hashPieces) : 0 });
  return full;
}

function wholeView(input: ViewInput, template: readonly number[]): ViewHashes {
  const ex = expandPrompt(template, input.items, input.ids, input.encode);
  if (!ex.ok) return ex;
  if (ex.tokens.length > input.maxTokens) return { ok: false, reason: "too_many_tokens", detail: `the routed view is over ${input.maxTokens} tokens (${ex.tokens.length} so far)` };
  const hashes = localBlockHashes(ex.tokens, input.blockSize);
  return { ok: true, length: ex.tokens.length, localHashes: hashes, hashPieces: [hashes], reusedTokens: 0 };
}

const utf8 = new TextEncoder();

/**
 * `parts` (generateBodyParts of `body`: cached escaping, the client's literals) checked byte for
 * byte against JSON.stringify of the body with `text` first. On a difference that JSON text, and
 * the turn chain's entries holding `pieces` are dropped.
 */
export function checkedBodyParts(parts: BodyPart[], body: GenerateRequestBody, pieces: PromptPieces | null, chain: TurnChainCache): BodyPart[] {
  countCheck("generate_body");
  const { text, ...rest } = body;
  const whole = JSON.stringify({ text, ...rest });
  const expected = utf8.encode(whole);
  if (sameByteRun(parts.map((p) => (typeof p === "string" ? utf8.encode(p) : p)), expected)) return parts;
  countMismatch("generate_body", { bytes: expected.length, pieces: pieces?.ids.length ?? 0, dropped: pieces ? chain.dropHolding(pieces.ids) : 0 });
  return [whole];
}

/**
 * `routed` (routedHashes of `plain` in `ns`: words kept per cached hash piece) checked against
 * namespacing the whole plain hashes. On a difference those words, and every kept run is forgotten.
 */
export function checkedRoutedHashes(routed: LocalHashes, ns: RoutingNamespace, plain: PlainHashes): LocalHashes {
  countCheck("routed_hashes");
  const whole = namespacedLocalHashWords(plain.localHashes, ns.cacheSalt === null ? null : ns.tag);
  if (sameRun([routed], whole)) return routed;
  forgetRoutedRuns();
  countMismatch("routed_hashes", { blocks: whole.length, pieces: plain.hashPieces?.length ?? 1 });
  return whole;
}

/**
 * `kept` (routeItems of `media`: earlier turns' items and routed forms from the memo) checked
 * against identifying and laying out every item again (wholeRoutedItems): each item (modality,
 * namespaced hash, probe) and its routed form (pieces, mm hash, pad value, or the same refusal),
 * and the same unresolved item. On a difference the whole result, and the memo's entries of every
 * differing item are dropped (all of them when the unresolved item differs).
 */
export function checkedRoutedItems(kept: RoutedItems, media: readonly VerifiedMedia[], cohort: ItemCohort, itemTag: NamespaceTag): RoutedItems {
  countCheck("routed_items");
  const whole = wholeRoutedItems(media, cohort, itemTag);
  let wrong: VerifiedMedia[];
  if (!samePlain(kept.unresolved, whole.unresolved) || kept.items.length !== whole.items.length || kept.routed.length !== whole.routed.length) wrong = [...media];
  else {
    wrong = [];
    for (let i = 0; i < whole.items.length; i++) if (!samePlain(kept.items[i], whole.items[i]) || !samePlain(kept.routed[i], whole.routed[i])) wrong.push(media[i]!);
  }
  if (wrong.length === 0) return kept;
  countMismatch("routed_items", { items: media.length, wrong: wrong.length, dropped: forgetRoutedItems(wrong, cohort.digest, itemTag) });
  return whole;
}

/** Whether two values of plain data (primitives, bigints, arrays, objects of such) are the same, field by field. */
function samePlain(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null || Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a);
  if (ka.length !== Object.keys(b).length) return false;
  for (const k of ka) if (!Object.hasOwn(b, k) || !samePlain((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k])) return false;
  return true;
}

/** sameRun for bytes, each piece compared natively where the runtime can (a body is 100s of kB). */
function sameByteRun(pieces: readonly Uint8Array[], whole: Uint8Array): boolean {
  let at = 0;
  for (const p of pieces) {
    if (at + p.length > whole.length || !sameBytes(p, whole.subarray(at, at + p.length))) return false;
    at += p.length;
  }
  return at === whole.length;
}

/** Whether the pieces, one after another, are `whole`. */
function sameRun<T>(pieces: readonly ArrayLike<T>[], whole: ArrayLike<T>): boolean {
  let at = 0;
  for (const p of pieces) {
    if (at + p.length > whole.length) return false;
    for (let i = 0; i < p.length; i++) if (p[i] !== whole[at + i]) return false;
    at += p.length;
  }
  return at === whole.length;
}
