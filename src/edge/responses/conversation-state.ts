/**
 * The prompt state a stored response keeps so that a continuation (`previous_response_id`) prepares
 * only its new items in any isolate, not just the one that served the earlier turn: the
 * conversation's stable prefix as the turn chain computed it (src/prompt/turn-chain.ts: the rendered
 * text before the last user query, which later turns never change), and that text's token count,
 * local block hashes and the tokens of its partial last block (src/prompt/prefix-cache.ts).
 *
 * Each record holds only its own piece (the text, media and blocks its turn added to its parent's);
 * a continuation assembles the chain root first and seeds the isolate's turn chain and prefix cache
 * with it before running the chat path, which then renders from the last query on and tokenizes and
 * hashes only what follows the stable prefix. Seeded entries are ordinary entries: used only when the
 * request's messages and scope equal theirs (compared as text), and a KVEDGE_TURN_CHECK_RATE share of
 * hits is rendered whole and compared (a mismatch logs, drops the entry and answers with the full render).
 *
 * Only the edge writes this state, from its own renders, into the tenant's own store; nothing of it
 * comes from a client. A piece starts anew (`base`) when the scope (template, tools, kwargs) or the
 * instructions changed, or its stable text does not extend the parent's. Media parts are kept as
 * positions; their URLs and options are read back from the stored messages, so a data URL is kept once.
 */
import { z } from "zod";
import { MessageSchema, type ChatCompletionRequest } from "../../api/openai-schema.ts";
import { checkStrings, tallyMessages, type MessagesTally } from "../../api/validate.ts";
import { localBlockHashesOfParts } from "../../blocks/block-hash.ts";
import type { ChatMessage } from "../../api/responses-schema.ts";
import type { ModelConfig } from "../../config/config.ts";
import type { MediaPart } from "../../prompt/messages.ts";
import { sharedPrefixCache, SPLIT_TOKEN, splitIsSafe, splitSpanIds, type PrefixCache } from "../../prompt/prefix-cache.ts";
import { getQwenTokenizer } from "../../prompt/tokenizer/index.ts";
import { scanBodyLayout, sharedTurnChain, type BodyLayout, type StablePrefix, type TurnChainCache } from "../../prompt/turn-chain.ts";
import { textAt } from "../../util/text-at.ts";
import { mediaOptionsAt } from "./stored-media.ts";

const count = z.number().int().min(0);
/** [kind, index, kindIndex, messageIndex, partIndex] of a media part; url and options come from the message. */
const MediaRefSchema = z.tuple([z.enum(["image", "video", "audio"]), count, count, count, count]);

export const PromptPieceSchema = z.object({
  /** True: `text` is the whole stable text; false: it follows the parent record's. */
  base: z.boolean(),
  /** The turn chain's scope (template, family, tools, kwargs); base pieces only (the rest inherit it). */
  scope: z.string().optional(),
  /** The request's `instructions` (its leading system message); base pieces only. */
  instructions: z.string().nullable().optional(),
  /** Chat messages the stable prefix covers (the instructions' system message included). */
  messages: count,
  text: z.string(),
  media: z.array(MediaRefSchema),
  dropped: z.array(z.object({ messageIndex: count, partIndex: count, type: z.string().nullable() })),
  /** Image and video items of the whole stable prefix. */
  images: count,
  videos: count,
  /** Tokens of the stable text; null for a prefix with media (the media path encodes its prompt whole). */
  tokens: z
    .object({
      blockSize: z.number().int().min(1),
      /** Tokens of the whole stable text. */
      count,
      /** Local hashes of the full blocks this piece adds, little-endian u64s in base64. */
      hashes: z.string(),
      /** Tokens after the last full block of the whole stable text. */
      tailIds: z.array(count),
    })
    .nullable(),
});
export type PromptPiece = z.infer<typeof PromptPieceSchema>;

type MediaRef = z.infer<typeof MediaRefSchema>;
type ValidatedMessage = ChatCompletionRequest["messages"][number];

/** A conversation's assembled state: what seeds the caches. */
export interface ConversationState {
  scope: string;
  instructions: string | null;
  messages: number;
  text: string;
  media: MediaRef[];
  dropped: PromptPiece["dropped"];
  images: number;
  videos: number;
  tokens: { blockSize: number; count: number; hashes: bigint[]; tailIds: number[] } | null;
}

function hashesToBase64(hashes: readonly bigint[]): string {
  const bytes = new Uint8Array(8 * hashes.length);
  const view = new DataView(bytes.buffer);
  hashes.forEach((h, i) => view.setBigUint64(8 * i, h, true));
  let bin = "";
  for (let i = 0; i < bytes.length; i += 0x8000) bin += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(bin);
}

function hashesFromBase64(text: string): bigint[] | null {
  let bin: string;
  try {
    bin = atob(text);
  } catch {
    return null;
  }
  if (bin.length % 8 !== 0) return null;
  const view = new DataView(new ArrayBuffer(bin.length));
  for (let i = 0; i < bin.length; i++) view.setUint8(i, bin.charCodeAt(i));
  const out = new Array<bigint>(bin.length / 8);
  for (let i = 0; i < out.length; i++) out[i] = view.getBigUint64(8 * i, true);
  return out;
}

/** The state after the pieces of a chain of records (root first); null when the last piece cannot be assembled. */
export function assembleState(pieces: readonly (PromptPiece | null)[]): ConversationState | null {
  let state: ConversationState | null = null;
  for (const piece of pieces) {
    if (piece === null) {
      state = null;
      continue;
    }
    if (piece.base) {
      if (piece.scope === undefined) return null;
      state = { scope: piece.scope, instructions: piece.instructions ?? null, messages: 0, text: "", media: [], dropped: [], images: 0, videos: 0, tokens: null };
    } else if (state === null) continue;
    const hashes = piece.tokens ? hashesFromBase64(piece.tokens.hashes) : null;
    const before = piece.base ? null : state.tokens;
    if (piece.tokens && hashes && (before === null ? piece.base : before.blockSize === piece.tokens.blockSize)) {
      const all = before ? before.hashes : [];
      for (const h of hashes) all.push(h);
      state.tokens = { blockSize: piece.tokens.blockSize, count: piece.tokens.count, hashes: all, tailIds: piece.tokens.tailIds };
    } else state.tokens = null;
    state.messages = piece.messages;
    state.text += piece.text;
    state.media.push(...piece.media);
    state.dropped.push(...piece.dropped);
    state.images = piece.images;
    state.videos = piece.videos;
  }
  return state;
}

/** SPLIT_TOKEN's id per tokenizer family, or null where the split is not safe (the prefix cache is bypassed there too). */
const splitIds = new Map<string, number | null>();

function splitIdOf(family: ModelConfig["family"]): number | null {
  let id = splitIds.get(family);
  if (id === undefined) {
    const tok = getQwenTokenizer(family);
    const ids = tok.encode(SPLIT_TOKEN, "");
    id = splitIsSafe(tok.addedTokens, SPLIT_TOKEN) && ids.length === 1 ? ids[0]! : null;
    splitIds.set(family, id);
  }
  return id;
}

/** A text prompt's tokens as the prefix cache gave them: its id pieces and local block hash pieces (EncodedPrompt). */
export interface PromptTokens {
  idPieces: readonly (readonly number[])[];
  hashPieces: readonly (readonly bigint[])[];
}

/** Blocks [first, end) of hashes kept in consecutive pieces; null when the pieces hold fewer. */
function blocksOf(pieces: readonly (readonly bigint[])[], first: number, end: number): bigint[] | null {
  const out: bigint[] = [];
  let at = 0;
  for (const p of pieces) {
    for (let i = Math.max(0, first - at); i < p.length && at + i < end; i++) out.push(p[i]!);
    at += p.length;
    if (at >= end) break;
  }
  return out.length === end - first ? out : null;
}

/**
 * This turn's piece: the stable prefix the turn chain holds for the request (`stable`) after the
 * parent's state, with the tokens and block hashes of the text the piece adds (it starts and ends
 * where the tokenizer splits: before a message's `<|im_start|>`). They are read from `prompt`, the
 * request's prompt tokens (the prompt starts with the stable prefix), and encoded and hashed only
 * where those are absent or do not line up (in the caller's `partition` of the tokenizer's segment cache).
 */
export function nextPiece(parent: ConversationState | null, stable: StablePrefix, instructions: string | null, model: ModelConfig, partition: string, prompt: PromptTokens | null = null): PromptPiece {
  const extend = parent !== null && parent.scope === stable.scope && parent.instructions === instructions && stable.messages >= parent.messages && textAt(stable.text, parent.text);
  const from = extend ? parent.messages : 0;
  const text = extend ? stable.text.slice(parent.text.length) : stable.text;
  const media = stable.media.filter((p) => p.messageIndex >= from).map((p): MediaRef => [p.kind, p.index, p.kindIndex, p.messageIndex, p.partIndex]);
  const dropped = stable.dropped.filter((d) => d.messageIndex >= from).map((d) => ({ messageIndex: d.messageIndex, partIndex: d.partIndex, type: d.type }));
  let tokens: PromptPiece["tokens"] = null;
  const before = extend ? parent.tokens : { blockSize: model.blockSize, count: 0, hashes: [], tailIds: [] };
  if (stable.media.length === 0 && before !== null && before.blockSize === model.blockSize) {
    const splitId = prompt ? splitIdOf(model.family) : null;
    const read = prompt && splitId !== null ? splitSpanIds(prompt.idPieces, before.count, text, splitId) : null;
    const ids = read ?? getQwenTokenizer(model.family).encode(text, partition);
    const run = before.tailIds.length + ids.length;
    const full = Math.floor(run / model.blockSize) * model.blockSize;
    const joined = before.tailIds.concat(ids);
    // Local block hashes hash each block alone: the piece's blocks are the prompt's at the same places.
    const [firstBlock, endBlock] = [Math.floor(before.count / model.blockSize), Math.floor((before.count + ids.length) / model.blockSize)];
    const hashes = (read && blocksOf(prompt!.hashPieces, firstBlock, endBlock)) ?? localBlockHashesOfParts([joined.slice(0, full)], model.blockSize);
    tokens = { blockSize: model.blockSize, count: before.count + ids.length, hashes: hashesToBase64(hashes), tailIds: joined.slice(full) };
  }
  return {
    base: !extend,
    ...(extend ? {} : { scope: stable.scope, instructions }),
    messages: stable.messages,
    text,
    media,
    dropped,
    images: stable.images,
    videos: stable.videos,
    tokens,
  };
}

/** The media part a reference names, read back from the request's messages; null when it is not there. */
function mediaPartOf(ref: MediaRef, messages: readonly ChatMessage[]): MediaPart | null {
  const [kind, index, kindIndex, messageIndex, partIndex] = ref;
  const options = mediaOptionsAt(messages[messageIndex], partIndex, kind);
  return options === null ? null : { kind, url: options["url"] as string, index, kindIndex, messageIndex, partIndex, options };
}

/** The leading system message the Responses request's `instructions` become (responses-schema.ts toChatRequest). */
function leadOf(instructions: string | null): ChatMessage[] {
  return instructions ? [{ role: "system", content: instructions }] : [];
}

/**
 * The stored messages as the chat parse validates them (the same schema and string checks) with
 * their tally at `spans` of `chatBody`, so the continuation parses only its new items; null when
 * any is refused (the parse then reads them and answers the error).
 */
function validatedMessages(messages: readonly ChatMessage[], chatBody: string, spans: readonly [number, number][]): { messages: ValidatedMessage[]; tally: MessagesTally } | null {
  try {
    checkStrings(messages);
  } catch {
    return null;
  }
  const out: ValidatedMessage[] = [];
  for (const m of messages) {
    const v = MessageSchema.safeParse(m);
    if (!v.success) return null;
    out.push(v.data);
  }
  return { messages: out, tally: tallyMessages(chatBody, spans, out) };
}

export interface HydrateOptions {
  /** Share of seeds whose tokens are also encoded whole and compared first (the edge passes KVEDGE_TURN_CHECK_RATE). */
  checkRate: number;
  random?: () => number;
  /** Called with what a sampled check found different (default: a console.warn event). */
  onMismatch?: (detail: { tokens: number; blocks: number }) => void;
  turnChain?: TurnChainCache;
  prefixCache?: PrefixCache;
  /** scanBodyLayout(chatBody), when the caller has it (it hands the same scan to the chat parse). */
  layout?: BodyLayout | null;
  /** The caller's partition of the prompt caches (cache-salt.ts edgeCachePartition): the seeds are its own. */
  partition: string;
}

/** True when the stored tokens are the tokenizer's own for the stored text (the sampled check). */
function tokensHold(text: string, tokens: NonNullable<ConversationState["tokens"]>, model: ModelConfig, partition: string): boolean {
  const ids = getQwenTokenizer(model.family).encode(text, partition);
  const full = tokens.hashes.length * tokens.blockSize;
  if (ids.length !== tokens.count || ids.length - full !== tokens.tailIds.length || tokens.tailIds.some((t, i) => ids[full + i] !== t)) return false;
  const hashes = localBlockHashesOfParts([ids], tokens.blockSize);
  return hashes.length === tokens.hashes.length && hashes.every((h, i) => h === tokens.hashes[i]);
}

/**
 * Seeds the isolate's turn chain and prefix cache with `state`, the state of the conversation whose
 * messages are `history` (without instructions), continued by the chat body `chatBody` (its JSON
 * text: the instructions' system message, then `history`, then the new input). Nothing is seeded for
 * another model's template or block size; whether a request uses the entries is decided by the
 * caches (exact text comparison), and a `checkRate` share of the stored rendered text (the turn
 * chain's check on a hit) and of the stored tokens (encoded whole here before seeding) is compared
 * with the full path's.
 */
export function hydrate(state: ConversationState, history: readonly ChatMessage[], chatBody: string, model: ModelConfig, opts: HydrateOptions): void {
  if (!state.scope.startsWith(`${model.family}\u0000${model.templateId}\u0000`)) return;
  const messages = [...leadOf(state.instructions), ...history];
  if (state.messages > messages.length) return;
  const media: MediaPart[] = [];
  for (const ref of state.media) {
    const part = mediaPartOf(ref, messages);
    if (part === null) return;
    media.push(part);
  }
  // The JSON text these messages have in the chat body, read from it (not written again; the chain keeps a copy).
  const layout = opts.layout !== undefined ? opts.layout : scanBodyLayout(chatBody);
  if (!layout || layout.messages.length < state.messages) return;
  const spans = layout.messages.slice(0, state.messages);
  const raw = state.messages === 0 ? "" : chatBody.slice(layout.messagesOpen, spans[state.messages - 1]![1]);
  const turnChain = opts.turnChain ?? sharedTurnChain();
  // Already held: this isolate served the conversation, and its prefix cache holds a longer prefix than the stored one.
  const prefix = { scope: state.scope, messages: state.messages, text: state.text, media, dropped: state.dropped, images: state.images, videos: state.videos };
  const partition = opts.partition;
  if (!turnChain.seed(prefix, raw, partition, () => validatedMessages(messages.slice(0, state.messages), chatBody, spans))) return;
  const tokens = state.tokens;
  if (!tokens || tokens.blockSize !== model.blockSize) return;
  if (opts.checkRate > 0 && (opts.random ?? Math.random)() < opts.checkRate && !tokensHold(state.text, tokens, model, partition)) {
    const detail = { tokens: tokens.count, blocks: tokens.hashes.length };
    if (opts.onMismatch) opts.onMismatch(detail);
    else console.warn(JSON.stringify({ event: "stored_prefix_mismatch", ...detail }));
    return;
  }
  (opts.prefixCache ?? sharedPrefixCache()).seed(getQwenTokenizer(model.family), model.blockSize, { text: state.text, count: tokens.count, hashes: tokens.hashes, tailIds: tokens.tailIds }, partition);
}
