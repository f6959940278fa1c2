/**
 * Turn chain: the rendered prompt of a conversation's earlier turns, kept per isolate and keyed by
 * the raw JSON text of its messages, so the next turn preprocesses and renders only the messages
 * after its last user query.
 *
 * Which earlier text is stable. In the three Qwen-VL templates a message's rendering depends on
 * itself, the roles of its neighbours (tool results are grouped into one user block), the running
 * image/video counters (printed with add_vision_id), the tools and kwargs (the scope below), and, in
 * the thinking template, on whether it comes after the last user query (`ns.last_query_index`:
 * assistant turns after it keep their reasoning, earlier ones lose it). Appending messages can only
 * move the last query later. So the text before the last query's block never changes when the
 * conversation grows, and the last query (a user message, not a `<tool_response>` wrapper) closes
 * its own block whatever follows it.
 *
 * How the rest is rendered exactly. The template runs on [X, ...messages from the query on], where
 * X is one stand-in user message and the text X renders to (header + its block, measured once by
 * rendering [X] alone) is cut off. Where the counts matter (not template.ts itemCountsIrrelevant),
 * X holds as many image and video items as the template counted in the skipped messages (only
 * roles it numbers, template.ts countsItemsOf), so the counters carry on; elsewhere it holds none.
 * The query's own block is a user block, so nothing before it is read by what follows (roles of
 * neighbours: the query is a user; last_query_index: found at or after the query). A store
 * computes the stable prefix the same way from a full render (full text minus the tail) and checks
 * that the full text ends with that tail, so stored text is the full path's own.
 *
 * Keys. The scope (template, family, and the raw text of tools, tool_choice, chat_template_kwargs
 * and reasoning_effort) and a message prefix's raw JSON text decide the rendering of that prefix
 * (parsing, validation and preprocessing are functions of them). An entry is found by an xxh3 of
 * the scope, the prefix's message count and length and a window of its text, and used only when
 * its scope and its whole raw text equal the request's (compared, never trusted to the hash).
 * Entries extend the one they were built from (each keeps only its own raw and rendered piece), so
 * turns of one conversation share memory; a piece's JSON escaping (sent in the /generate body) and
 * its validated messages' long strings are views of those two texts, not copies. A piece with
 * non-ASCII text also keeps its escaping's UTF-8 once a later turn sends it (PromptPieces.bodyParts):
 * ~1 B per character more, so that no turn encodes the history again. Bounded by estimated bytes, LRU.
 *
 * Partitions. A hit saves the parse and render of a conversation's history, so it would tell a
 * caller that someone sent those messages. The scope therefore starts with the request's partition
 * id (src/edge/cache-salt.ts edgeCachePartition: the tenant's, "" for the common one), and so do
 * the layout hints' keys and the stand-in memo's: no entry serves another partition. A stable
 * prefix handed out (stable(), what stored records keep) carries the scope without it; seed() puts
 * it in the seeding caller's partition.
 *
 * Layout. The keys need the body's message spans, so a body is scanned before its lookup; the scan
 * (scanLayout) takes the spans of a held prefix the body holds character for character from its
 * entries (candidates by the messages text's opening, compared in full, once, which the lookup
 * then need not repeat) and scans only what follows. The held text was part of an accepted body,
 * the rest of the body is parsed strictly, and a body that differs anywhere in it is scanned whole.
 *
 * Provisional entries (agent loops). Messages after the last query are stable too while no new
 * query comes: a tool result's opening reads only whether the previous message is a tool, and an
 * assistant turn after the last query keeps its reasoning as long as it stays after it. So an entry
 * may also end right after an assistant message that follows the last query; the rest is rendered
 * on [X, ...messages from the cut on] as above (X, a user query, is "not a tool" like the assistant
 * it stands for, and is the last query the template finds, at the right relative place). Such an
 * entry is used only by a request with no user message after its end (a final assistant message
 * counts: preprocessing turns it into one), else the longest non-provisional ancestor is; without
 * it every step of a loop re-rendered all tool output since the user's first message. A request
 * that ends with a tool result (a loop's step) ends its entry there instead (afterTool): the
 * result's block is closed by `<|im_end|>` before any message but another tool result (Qwen3-VL
 * groups consecutive results in one user block; Qwen2-VL closes each), so such an entry also
 * needs the message after it not to be a tool result, and is rendered on as a provisional one;
 * the next step then parses and renders only its own call and result, not the previous result.
 *
 * Entries after a long query (a document, then answers that differ: regenerated, edited, or the
 * first turn's). A store covers the messages from its parent to the request's last query; a long
 * query inside that span, the last such, also ends an entry of its own, so a request that keeps
 * it but answers it differently reuses it instead of parsing and storing it again. The text
 * through a query's block is stable for every continuation: the messages before it stay before
 * the last query (assistant turns there lose their reasoning whatever comes later), and its own
 * block reads only itself and the counters. The rest is rendered on [X, ...messages after it] as
 * for a provisional entry (X, a user query, stands for the query itself: "not a tool" to the
 * message after it, and the last query when no later one comes, at the right relative place).
 * A turn that found an entry and ends with its query stores such an entry through that query
 * instead of the one before it (storeFrom): it needs no render, and the next turn renders only
 * its new messages.
 *
 * Held bodies. The parse stage decodes a body's UTF-8 into text, two bytes a character once any is
 * non-ASCII (~0.4 ms at 100k tokens in workerd). A hit whose messages hold non-ASCII text keeps
 * the body's bytes up to them (a view of the body's buffer, or a copy of them where the body goes
 * on much further; one per conversation and one where conversations part, counted in the budget),
 * listed under a window of them; the next body whose first bytes equal them byte for byte
 * (compared in full, never by hash; the longest such) takes their text from the chain (the body's
 * text before its messages, then the entries' raw text) and decodes only the rest (validate.ts
 * readBody).
 *
 * A sample of hits (checkRate) is also rendered whole; a mismatch is logged, the entry dropped and
 * the full result used.
 */
import type { ChatCompletionRequest } from "../api/openai-schema.ts";
import { joinedTallies, tallyMessages, utf8ByteLength, type MessagesTally, type ReusedMessages } from "../api/validate.ts";
import type { MediaKind, MediaPart, DroppedPart, TemplateMessage, ChatRequestLike } from "./messages.ts";
import { preprocessChat } from "./messages.ts";
import type { ModelProfile, TemplateId } from "./model-profile.ts";
import { buildTailSkeleton, fillTailSkeleton, tailShape, type TailSkeleton } from "./tail-skeleton.ts";
import { contentFormatOf, countsItemsOf, itemCountsIrrelevant, renderTemplate, type RenderInput } from "./template.ts";
import { assemblePrompt, type PreparedPrompt } from "./index.ts";
import { xxh3_64 } from "../util/hash.ts";
import { deepFreeze } from "../util/deep-freeze.ts";
import { HeldChains } from "../util/held-chains.ts";
import { closingQuote, isCanonicalEscaping, LITERAL_MIN_CHARS, type JsonLiteral } from "../util/json-scan.ts";
import { escapeJsonReusing } from "../util/json-escape.ts";
import { ownCompactString, ownString } from "../util/own-string.ts";
import { sameBytes } from "../util/same-bytes.ts";
import { SplitText } from "../util/split-text.ts";

/** The rendered prompt as preparePrompt (index.ts) returns it. */
export interface ChainedPrompt extends PreparedPrompt {
  /** Leading messages whose rendered text came from the chain (0: rendered whole). */
  reusedMessages?: number;
  /** `text` as the chain's stored pieces and this request's own part, so later stages need not join it. */
  pieces?: PromptPieces;
  /**
   * The request's stable prefix as the chain keeps it after this request (its last query's entry,
   * else the one it was rendered from), assembled when called (a stored response keeps it; the
   * entry before the last query is stored then where the turn kept the one through it); absent
   * when the chain keeps none.
   */
  stable?: () => StablePrefix;
}

/** A prompt text in pieces: text = stable.join("") + rest. */
export interface PromptPieces {
  /** The chain's stored pieces (earlier turns' rendered text). */
  stable: readonly string[];
  /**
   * An identity per stable piece: the same object always stands for the same text, so a stage that
   * found a piece equal to its own text need not compare it again (PieceText.matches with a record).
   */
  ids: readonly object[];
  /**
   * An identity per stable piece of the text from the start through it (PieceText's heads): a stage
   * that found a prefix equal to it need not compare that prefix again (prefix-cache.ts).
   */
  heads: readonly object[];
  /**
   * The same escaping as the /generate body sends it: a piece with non-ASCII text as its UTF-8
   * bytes, one array made once and kept (a Blob copies bytes, where it encodes a two-byte string:
   * ~0.2 ms per 440 kB in workerd, every turn), an ASCII piece as its chunks (one-byte strings,
   * which a Blob writes about as fast as it copies bytes).
   */
  bodyParts: readonly (string | Uint8Array)[];
  /** Characters of the stable pieces together. */
  chars: number;
  /** This request's own part. */
  rest: string;
  /**
   * The JSON escaping of the first `restEscaped.chars` characters of `rest`, as chunks: the text of
   * the entries this request stored as it was prepared, escaped then; null when it stored none.
   * (A sampled body check's mismatch drops them with the hit's chain: they descend from the hit.)
   */
  restEscaped: { chars: number; chunks: readonly string[] } | null;
}

type ChatMessage = ChatCompletionRequest["messages"][number];

/** What one lookup found for a body: its layout and scope, and the longest cached message prefix. */
export interface ChainFind {
  /** The body as read: in its parts when a held prefix gave its first text (never joined here). */
  body: SplitText;
  profile: ModelProfile;
  layout: BodyLayout;
  scope: string;
  scopeHash: bigint;
  hit: { node: Node; chain: Node[] } | null;
  /**
   * Long message strings the parse of this body decoded, with their source escaping, in document
   * order (validate.ts `opts.literals`): a store takes a value from here instead of decoding its
   * raw JSON again.
   */
  decoded?: readonly JsonLiteral[];
  /**
   * The body's UTF-8 as read (validate.ts readBody), when it decoded to `body` whole: prepare
   * keeps the hit's prefix of it, so the conversation's next body decodes only what follows
   * (heldBodyText).
   */
  bodyBytes?: Uint8Array | null;
}

export type TemplateRenderer = (id: TemplateId, input: RenderInput) => string;

/** Estimated bytes of all entries (UTF-16 raw and rendered text, UTF-8 of pieces sent again, held bodies' buffers, media parts, nodes). */
export const DEFAULT_TURN_CHAIN_BYTES = 16 * 1024 * 1024;
/** Share of hits also rendered whole and compared. */
export const DEFAULT_TURN_CHECK_RATE = 0.01;
const KEY_HEAD_CHARS = 128;
const KEY_TAIL_CHARS = 512;
const MAX_BUCKET = 4;
const GENERATION_START = "<|im_start|>assistant";
/** Whitespace, one comma, whitespace: what JSON allows between two array elements. */
const SEPARATOR = /^[ \t\n\r]*,[ \t\n\r]*$/;
/** Characters of stand-in renders (with their keys) and their tail skeletons (shapes and pieces) kept; past it other entries are dropped (makeRoom). */
export const STAND_IN_MEMO_CHARS = 1 << 20;
/**
 * Layout hints: characters of the messages text kept as the key at its start and after its first element
 * (a shared system prompt alone does not tell conversations apart), and the entries kept per key
 * (the most recently stored; each is compared in full before its spans are taken).
 */
const HINT_WINDOW_CHARS = 128;
const HINTS_PER_KEY = 4;
/**
 * Held bodies (heldBodyText): a prefix of L bytes is listed under the BODY_WINDOW_BYTES at the
 * largest power of two that leaves the window inside it, so a body of B > L bytes finds it among
 * the first BODY_PROBES powers of two at or below its own when L > B / 2^BODY_PROBES (a shorter
 * prefix saves little of the decode); entries kept per key (the most recent).
 */
const BODY_WINDOW_BYTES = 64;
const BODY_PROBES = 3;
const BODIES_PER_KEY = 4;
/**
 * What a held body costs besides its buffer and strings (its record, its view, the map slot and
 * list), as measured in Node 22: the heap after a full GC (heapUsed + arrayBuffers) of a chain of
 * 3,000 two-turn conversations holding their bodies, less that of the same chain holding none, less
 * the bodies' counted buffers and strings, per body: medians of 7 paired runs 371 B (views of the
 * body's buffer) and 382 B (copies of the prefix).
 */
const HELD_BODY_OVERHEAD = 380;

export interface TurnChainOptions {
  maxBytes?: number;
  /** 0–1: share of hits also rendered whole (default DEFAULT_TURN_CHECK_RATE). */
  checkRate?: number;
  /** The template renderer (default renderTemplate); a test injects a faulty one. */
  render?: TemplateRenderer;
  /** Draws the checks' samples (default Math.random). */
  random?: () => number;
  /** Called with what a sampled check found different (default: a console.warn event). */
  onMismatch?: (detail: { templateId: TemplateId; messages: number; reusedMessages: number }) => void;
}

/**
 * A conversation's stable prefix as the chain holds it: the rendered text of its first `messages`
 * messages (everything before its last query's block), their media and dropped parts, and the
 * scope it was rendered in. Stored records carry it so another isolate can be seeded (seed()).
 */
export interface StablePrefix {
  scope: string;
  messages: number;
  text: string;
  media: MediaPart[];
  dropped: DroppedPart[];
  /** Image and video items the template counts in those messages (Node.images). */
  images: number;
  videos: number;
}

export interface TurnChainStats {
  hits: number;
  misses: number;
  reusedMessages: number;
  checks: number;
  mismatches: number;
  stores: number;
  /** Body scans (scanLayout) that took a held prefix's message spans instead of scanning its text. */
  heldLayouts: number;
  /** Body reads (heldBodyText) that took a held prefix's text instead of decoding its bytes. */
  heldBodies: number;
  evictions: number;
  entries: number;
  bytes: number;
  maxBytes: number;
}

/** What the stand-in renders to alone for one scope and item counts, and the tail skeletons built after it. */
interface StandInMemo {
  /** The memo's key: item counts and scope. */
  readonly key: string;
  /** The render before the generation prompt (header and the stand-in's block), and the generation prompt. */
  readonly head: string;
  readonly generation: string;
  /** Tail skeletons (tail-skeleton.ts) by tailShape; null where a shape has none. */
  readonly skeletons: Map<string, TailSkeleton | null>;
  /** Characters counted for the key and render, and for the skeletons' shapes and pieces. */
  readonly renderChars: number;
  skeletonChars: number;
}

type CutKind = "beforeQuery" | "provisional" | "afterTool" | "afterQuery";

interface Node {
  parent: Node | null;
  key: bigint;
  scope: string;
  /** Own raw JSON text: the messages array's text from the parent's end to this prefix's end. */
  raw: string;
  rawEnd: number;
  /** Own rendered text (the stable prefix is the parents' then this). */
  text: string;
  /**
   * Stands for `text` (PromptPieces.ids) and, as each entry has its own and an entry's parent and
   * text never change, for its chain's rendered text through it too (PromptPieces.heads): one
   * identity for both. A small object of its own, so holding it keeps nothing else alive.
   */
  textId: object;
  /** Messages covered (the request's last query is message `messages`, unless provisional or after a query). */
  messages: number;
  /**
   * Where the entry ends: before a query (used when the message after it may be one), after an
   * assistant message that follows the last query (provisional: valid only while no query follows
   * it), after a final tool result that follows the last query (afterTool: valid only while no
   * query follows it and the message after it is not a tool result), or right after a long query
   * that was not its request's last (valid for every continuation).
   */
  cut: CutKind;
  /** Own media and dropped parts (indices as in the whole request). */
  media: MediaPart[];
  dropped: DroppedPart[];
  /** Prefix totals of the image and video items the template counts (the stand-in's counters: numberedItems). */
  images: number;
  videos: number;
  /**
   * JSON escaping of `text` as chunks: a long message text whose raw JSON is its canonical escaping
   * is a view of `raw` (no copy), the rest is escaped in slices.
   */
  escaped: readonly string[];
  /** Whether its raw or rendered text holds non-ASCII (V8 keeps them, and the escaping chunks, two-byte). */
  wide: boolean;
  /**
   * `escaped` as UTF-8 when `wide`, made the first time a request sends this node as held history
   * (null until then: a node no later turn reuses never pays for it); counted in `bytes` from then on.
   */
  utf8: Uint8Array | null;
  /**
   * Own messages as the edge validated them (frozen; long strings are views of `raw` or `text`) and
   * their whole-body tally; null when stored from an unvalidated request.
   */
  parsed: readonly ChatMessage[] | null;
  tally: MessagesTally | null;
  /** The tally of its chain's messages, once asked for (chainTally); null until then. */
  chainTally: MessagesTally | null;
  /**
   * Own messages' spans, start and end pairs relative to the messages array's text (every one an
   * object, ending at its `}`), as the body's layout scan found them; null when unknown (seeded).
   */
  spans: Int32Array | null;
  /** The key this node is listed under in the layout hints (null: not listed). */
  hint: string | null;
  /** The last layout scan (heldSpans' stamp) that found the body holding this node's chain. */
  scanned: number;
  /** UTF-8 bytes of `raw` (-1 until a held body first needs it). */
  rawBytes: number;
  /** The latest body that reached this node, held for the next body's read (heldBodyText); counted in `bytes`. */
  body: HeldBody | null;
  /** What HeldChains counts: its hold (HeldNode.holders: > 0 while an entry's chain includes it), and its nodeBytes. */
  holders: number;
  bytes: number;
}

/** Spans of the body's top-level members and of each element of its `messages` array. */
export interface BodyLayout {
  members: Map<string, [number, number]>;
  /** Where the messages array's text starts (after `[`) and each element's [start, end). */
  messagesOpen: number;
  messages: [number, number][];
}

function isSpace(c: number): boolean {
  return c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;
}

function skipSpaces(text: string, i: number): number {
  while (i < text.length && isSpace(text.charCodeAt(i))) i++;
  return i;
}

/** Index just past the JSON value starting at `i` in valid JSON `text` (strings skipped by indexOf). */
function valueEnd(text: string, i: number): number {
  let depth = 0;
  for (; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      i = closingQuote(text, i);
      if (i < 0) return -1;
      if (depth === 0) return i + 1;
    } else if (c === 0x5b || c === 0x7b) depth++;
    else if (c === 0x5d || c === 0x7d) {
      // At depth 0 the closing bracket is the container's: a scalar ends before it.
      if (depth === 0) return i;
      if (--depth === 0) return i + 1;
    } else if (depth === 0 && (c === 0x2c || isSpace(c))) return i;
  }
  return depth === 0 ? i : -1;
}

/**
 * Walks the members of the JSON object at `i` (after spaces) in valid JSON `text`: `member(key,
 * valueStart)` answers where the value ends (negative: not shaped so). The index just past the
 * object, or -1 when the text is not shaped so (a key JSON cannot decode included).
 */
function walkMembers(text: string, i: number, member: (key: string, at: number) => number): number {
  while (i < text.length && isSpace(text.charCodeAt(i))) i++;
  if (text.charCodeAt(i) !== 0x7b) return -1;
  i++;
  for (;;) {
    while (i < text.length && (isSpace(text.charCodeAt(i)) || text.charCodeAt(i) === 0x2c)) i++;
    if (i >= text.length) return -1;
    if (text.charCodeAt(i) === 0x7d) return i + 1;
    if (text.charCodeAt(i) !== 0x22) return -1;
    const close = closingQuote(text, i);
    if (close < 0) return -1;
    const rawKey = text.slice(i + 1, close);
    let key = rawKey;
    if (rawKey.includes("\\")) {
      try {
        key = JSON.parse(text.slice(i, close + 1)) as string;
      } catch {
        return -1;
      }
    }
    i = close + 1;
    while (i < text.length && (isSpace(text.charCodeAt(i)) || text.charCodeAt(i) === 0x3a)) i++;
    const end = member(key, i);
    if (end < 0) return -1;
    i = end;
  }
}

/**
 * Elements of a messages array known without scanning: their spans (in the body) and the index just
 * past the last, where the scan goes on. Given only for text equal, character for character, to a
 * held prefix whose spans a scan of the same text found.
 */
export interface HeldSpans {
  end: number;
  spans: [number, number][];
}

/**
 * One pass over a valid JSON object body: its top-level members (the last of a repeated key, as
 * JSON.parse keeps) and the elements of `messages`. Null when the text is not shaped so.
 * `held(open)`: the leading elements of a messages array whose text starts at `open`, when known.
 */
export function scanBodyLayout(text: string, held?: (open: number) => HeldSpans | null): BodyLayout | null {
  const members = new Map<string, [number, number]>();
  let messages: [number, number][] | null = null;
  const walked = walkMembers(text, 0, (key, at) => {
    let end: number;
    if (key === "messages") {
      // The messages array's elements in the same pass that finds its end (the array is most of the body).
      const array = text.charCodeAt(at) === 0x5b ? arrayElements(text, at, held?.(at + 1) ?? null) : null;
      messages = array?.elements ?? null;
      end = array ? array.end : valueEnd(text, at);
    } else end = valueEnd(text, at);
    if (end >= 0) members.set(key, [at, end]);
    return end;
  });
  const span = members.get("messages");
  if (walked < 0 || !span || !messages) return null;
  return { members, messagesOpen: span[0] + 1, messages };
}

/**
 * The elements of the array opening at `open` in valid JSON `text`, and the index just past it; null
 * when not shaped so. `held`: its leading elements, known; the scan starts after them. Each element
 * ends at its own closing character and the scan reads nothing past it, so a text equal to the one
 * they were found in scans to the same spans (and the scan after them starts in the same state).
 */
function arrayElements(text: string, open: number, held: HeldSpans | null): { end: number; elements: [number, number][] } | null {
  const elements: [number, number][] = held ? held.spans : [];
  for (let j = held ? held.end : open + 1; ; ) {
    while (j < text.length && (isSpace(text.charCodeAt(j)) || text.charCodeAt(j) === 0x2c)) j++;
    if (j >= text.length) return null;
    if (text.charCodeAt(j) === 0x5d) return { end: j + 1, elements };
    const end = valueEnd(text, j);
    // A stray `}` ends nothing: no progress means not an array of values.
    if (end <= j) return null;
    elements.push([j, end]);
    j = end;
  }
}

const SCOPE_MEMBERS = ["tools", "tool_choice", "chat_template_kwargs", "reasoning_effort"] as const;
/** Ends a scope's partition id (base64url or empty: never holds it). */
const PARTITION_END = "\u0001";

function scopeOf(partition: string, profile: ModelProfile, text: SplitText, layout: BodyLayout): string {
  let s = partitioned(partition, `${profile.family}\u0000${profile.templateId}`);
  for (const m of SCOPE_MEMBERS) {
    const span = layout.members.get(m);
    s += `\u0000${span ? text.slice(span[0], span[1]) : ""}`;
  }
  return s;
}

/** What the thinking template's render_content prints of a preprocessed part for its last-query scan, as far as that scan reads it: an image or video item prints `<|vision_start|>…` (or `Picture n: …`), never part of either tag. */
function scannedText(p: unknown): string {
  if (!p || typeof p !== "object") return "";
  const { text, type } = p as { text?: unknown; type?: unknown };
  return type === "image" || type === "video" ? "\u0000" : typeof text === "string" ? text : "";
}

/** A user message that opens a query: its text, as the thinking template prints it, is not a tool result SGLang-style wrapped. */
function isQuery(m: TemplateMessage | undefined): boolean {
  if (!m || m.role !== "user") return false;
  const c = m.content;
  const text = typeof c === "string" ? c : Array.isArray(c) ? c.map(scannedText).join("") : "";
  return !(text.startsWith("<tool_response>") && text.endsWith("</tool_response>"));
}

/**
 * The role of the raw message element `span` as JSON.parse reads it (its last `role` member); null
 * when unreadable or not a string. Only the members' keys and the role's value are read.
 */
function rawRole(whole: SplitText, span: readonly [number, number]): string | null {
  // Read in the piece holding the element: the walk reads nothing past the element's end.
  const { text: body, at: base } = whole.region(span[0], span[1]);
  let role: [number, number] | null = null;
  const end = walkMembers(body, span[0] - base, (key, at) => {
    const stop = valueEnd(body, at);
    // The last `role`, as JSON.parse keeps.
    if (key === "role" && stop >= 0) role = [at, stop];
    return stop;
  });
  const found = role as [number, number] | null;
  if (end !== span[1] - base || found === null || body.charCodeAt(found[0]) !== 0x22) return null;
  let value: unknown;
  try {
    value = JSON.parse(body.slice(found[0], found[1]));
  } catch {
    return null;
  }
  return typeof value === "string" ? value : null;
}

/**
 * Whether the raw message element `span` may render as a query: a user message, or a final
 * assistant message (preprocessing relabels it a user message unless continue_final_message).
 * Anything unreadable may.
 */
function mayBeQuery(whole: SplitText, span: readonly [number, number], last: boolean): boolean {
  const role = rawRole(whole, span);
  return role === null || role === "user" || (last && role.toLowerCase() === "assistant");
}

/**
 * Whether the raw message element `span` may render as a tool result (`function` is one:
 * messages.ts TEMPLATE_ROLE). Anything unreadable may.
 */
function mayBeTool(whole: SplitText, span: readonly [number, number]): boolean {
  const role = rawRole(whole, span)?.toLowerCase() ?? null;
  return role === null || role === "tool" || role === "function";
}

/** A request message's role as parsed (undefined when it is not an object). */
function roleOf(m: unknown): unknown {
  return typeof m === "object" && m !== null ? (m as { role?: unknown }).role : undefined;
}

/** Whether the request's last message is a user message as the client sent it. */
function endsWithUser(request: ChatRequestLike): boolean {
  return roleOf(request.messages[request.messages.length - 1]) === "user";
}

/**
 * The index of the assistant message whose tool calls the request's trailing tool results answer
 * only in part (a client sending parallel tool results one request at a time), else -1. A result is
 * a `tool` or `function` message, as mayBeTool reads one. It counts result messages, not distinct
 * call ids: a duplicate id only costs reuse.
 */
function partlyAnsweredCalls(request: ChatRequestLike): number {
  const m = request.messages;
  const isResult = (x: unknown) => roleOf(x) === "tool" || roleOf(x) === "function";
  let c = m.length - 1;
  while (c >= 0 && isResult(m[c])) c--;
  const calls = c >= 0 && c < m.length - 1 && roleOf(m[c]) === "assistant" ? (m[c] as { tool_calls?: unknown }).tool_calls : undefined;
  return Array.isArray(calls) && calls.length > m.length - 1 - c ? c : -1;
}

function lastQuery(messages: readonly TemplateMessage[]): number {
  for (let i = messages.length - 1; i >= 1; i--) if (isQuery(messages[i])) return i;
  return -1;
}

/**
 * Shortest raw JSON (characters) of a query that ends an entry of its own when a later query
 * follows it. Such an entry costs a node (~1.5 kB counted: ~800 B, its hint windows and spans)
 * and, at each store, one more render of the messages after the query; it saves, at each request
 * that branches after the query, that query's parse, validation, copy and store. Per request in
 * Node (one long message, then a different answer of 1.2k or 12k characters and a question each
 * time; without the cut / with it): 2k characters 151 / 139 and 205 / 192 µs (within the noise),
 * 4k 151 / 122 and 207 / 179, 8k 168 / 113 and 206 / 165. From 4k on the saving is clear; the edge
 * bench's user messages (~1.2k characters) stay inside their turn's entry.
 */
const SPLIT_QUERY_MIN_CHARS = 4096;

/** The last query in messages [from, before) whose raw JSON is at least SPLIT_QUERY_MIN_CHARS; -1 when none. */
function lastLongQuery(messages: readonly TemplateMessage[], layout: BodyLayout, from: number, before: number): number {
  for (let i = before - 1; i >= from; i--) {
    const span = layout.messages[i];
    if (span && span[1] - span[0] >= SPLIT_QUERY_MIN_CHARS && isQuery(messages[i])) return i;
  }
  return -1;
}

function countKinds(parts: readonly MediaPart[], before: number): Record<MediaKind, number> {
  const n: Record<MediaKind, number> = { image: 0, video: 0, audio: 0 };
  for (const p of parts) if (p.messageIndex < before) n[p.kind]++;
  return n;
}

/**
 * The stand-in's counters after messages [from, before): `base` (those before `from`) plus the
 * image and video items of those messages in roles template `id` counts (template.ts countsItemsOf:
 * qwen3vl-instruct skips system and assistant items).
 */
function numberedItems(id: TemplateId, parts: readonly MediaPart[], messages: readonly TemplateMessage[], from: number, before: number, base: { images: number; videos: number }): { images: number; videos: number } {
  let { images, videos } = base;
  for (const p of parts) {
    if (p.messageIndex < from || p.messageIndex >= before || p.kind === "audio" || !countsItemsOf(id, messages[p.messageIndex]!.role)) continue;
    if (p.kind === "image") images++;
    else videos++;
  }
  return { images, videos };
}

/** Shortest string kept as a view of a node's raw or rendered text instead of its own copy (a view costs ~40 B). */
const SHARED_MIN_CHARS = 256;
/**
 * Shortest message text whose escaping is a view of the raw JSON: each is a chunk more for every
 * later /generate body (~1 µs in Node's Blob), shorter ones are escaped into the text's own chunks.
 */
const ESCAPED_VIEW_MIN_CHARS = LITERAL_MIN_CHARS;
/** Estimated bytes of a chain's joined tally (Node.chainTally) apart from its data URLs' list: the object and its fields. */
const CHAIN_TALLY_BYTES = 160;
/** Estimated bytes of a string object apart from its characters: a view, a chunk's slot. */
const STRING_BYTES = 40;
/** Estimated bytes of a Uint8Array apart from its bytes (the array, its ArrayBuffer and backing-store record). */
const BYTES_ARRAY_BYTES = 200;

/**
 * Estimated bytes of a node: its raw and rendered text (one copy each, at the bytes a character V8
 * holds them in), the escaping chunks (as wide as the text) and parsed-message strings (two bytes a
 * character) that are not views of them, per-message and per-part overhead, and ~800 B for the node
 * itself (its key, bucket and LRU slots, tally, arrays; measured ~320–470 B in Node). The UTF-8 of
 * its escaping is added when made (bodyParts).
 */
function nodeBytes(n: { raw: number; text: number; textWidth: 1 | 2; scope: string | null; escapedOwnChars: number; escapedChunks: number; parsed: SharedStrings | null; parts: number; dataUrls: number; spans: number }): number {
  const parsed = n.parsed ? parsedBytes(n.parsed) : 0;
  return n.raw + n.text + n.textWidth * n.escapedOwnChars + 2 * (n.scope?.length ?? 0) + STRING_BYTES * n.escapedChunks + parsed + 200 * n.parts + 8 * n.dataUrls + (n.spans > 0 ? 4 * n.spans + 4 * HINT_WINDOW_CHARS : 0) + 800;
}

/** Estimated bytes of a node's parsed messages: their own strings' characters, views of the texts, per-message overhead. */
function parsedBytes(s: SharedStrings): number {
  return 2 * s.ownChars + STRING_BYTES * s.views + 150 * s.messages;
}

/**
 * The long strings of raw JSON text `raw` (valid JSON: a request's messages) with their escaping
 * there as a view of `raw`, in document order: those JSON.stringify escapes the same way. A string
 * with no escape is its own escaping (the value is the view too); one with escapes is decoded only
 * when long enough for its escaping to be kept as a view (shorter ones are found in the rendered text).
 * `decoded`: literals the request's parse already decoded (document order); a string whose escaping
 * equals one's takes its value (the same text decodes to the same string, and the parse kept only
 * canonical escapings), so a new turn's answer is not decoded and checked a second time.
 */
function rawLiterals(raw: string, decoded: readonly JsonLiteral[] = []): JsonLiteral[] {
  const out: JsonLiteral[] = [];
  let next = 0;
  for (let open = raw.indexOf('"'); open !== -1; ) {
    const close = closingQuote(raw, open);
    if (close < 0) break;
    const chars = close - open - 1;
    if (chars >= SHARED_MIN_CHARS) {
      const inner = raw.slice(open + 1, close);
      if (!inner.includes("\\")) out.push({ value: inner, escaped: inner });
      else if (chars >= ESCAPED_VIEW_MIN_CHARS) {
        const k = decodedIndex(decoded, next, inner);
        if (k >= 0) {
          out.push({ value: decoded[k]!.value, escaped: inner });
          next = k + 1;
        } else if (isCanonicalEscaping(inner)) out.push({ value: JSON.parse(raw.slice(open, close + 1)) as string, escaped: inner });
      }
    }
    open = raw.indexOf('"', close + 1);
  }
  return out;
}

/** Index of the literal in `decoded` from `from` on (a few ahead: the parse also records `text` parts) whose escaping is `escaped`; -1 when none. */
function decodedIndex(decoded: readonly JsonLiteral[], from: number, escaped: string): number {
  for (let k = from; k < Math.min(decoded.length, from + 4); k++) {
    const e = decoded[k]!.escaped;
    if (e.length === escaped.length && e === escaped) return k;
  }
  return -1;
}

/**
 * The escaping chunks of a node's rendered text, long message texts taken from its raw JSON, and
 * where in the text each literal taken occurs.
 */
function escapedChunks(text: string, literals: readonly JsonLiteral[]): { chunks: string[]; ownChars: number; found: Map<JsonLiteral, number> } {
  const chunks: string[] = [];
  const found = new Map<JsonLiteral, number>();
  const reused = escapeJsonReusing(
    chunks,
    text,
    literals.filter((l) => l.escaped.length >= ESCAPED_VIEW_MIN_CHARS),
    null,
    found,
  );
  let chars = 0;
  for (const c of chunks) chars += c.length;
  return { chunks, ownChars: chars - reused, found };
}

/** Parsed messages whose long strings are views of a node's raw or rendered text. */
interface SharedStrings {
  messages: number;
  /** Characters of the strings that stayed copies. */
  ownChars: number;
  views: number;
}

/**
 * A copy of validated messages in which each long string is a view of equal text the node already
 * holds: its raw JSON literal when that has no escape, else its occurrence in the rendered text
 * (where escapedChunks found the literal, when it did: not searched for again).
 * Equal strings, so the parse that reuses them answers the same request.
 */
function shareStrings(messages: readonly ChatMessage[], literals: readonly JsonLiteral[], text: string, foundAt: ReadonlyMap<JsonLiteral, number> = new Map()): { parsed: ChatMessage[]; shared: SharedStrings } {
  const shared: SharedStrings = { messages: messages.length, ownChars: 0, views: 0 };
  let next = 0;
  let textAt = 0;
  const viewOf = (s: string): string | null => {
    // Document order, but a message's members may come in the schema's order: look a few literals ahead.
    for (let k = next; k < Math.min(literals.length, next + 4); k++) {
      const lit = literals[k]!;
      if (lit.value.length !== s.length || lit.value !== s) continue;
      next = k + 1;
      if (lit.escaped === lit.value) return lit.value;
      const known = foundAt.get(lit);
      if (known !== undefined && known >= textAt) {
        textAt = known + s.length;
        return text.slice(known, textAt);
      }
      break;
    }
    const at = text.indexOf(s, textAt);
    if (at < 0) return null;
    textAt = at + s.length;
    return text.slice(at, textAt);
  };
  const copy = (v: unknown): unknown => {
    if (typeof v === "string") {
      const view = v.length >= SHARED_MIN_CHARS ? viewOf(v) : null;
      if (view === null) shared.ownChars += v.length;
      else shared.views++;
      return view ?? v;
    }
    if (Array.isArray(v)) return v.map(copy);
    if (v === null || typeof v !== "object") return v;
    const out: Record<string, unknown> = {};
    for (const k of Object.keys(v)) out[k] = copy((v as Record<string, unknown>)[k]);
    return out;
  };
  return { parsed: messages.map((m) => copy(m) as ChatMessage), shared };
}

/** Whether the chain's raw pieces, in order, are `text` from `at` on (compared piece by piece, never joined). */
function rawMatches(chain: readonly Node[], text: SplitText, at: number): boolean {
  for (const x of chain) {
    if (!text.matches(at, x.raw)) return false;
    at += x.raw.length;
  }
  return true;
}

function chainOf(n: Node): Node[] {
  const out: Node[] = [];
  for (let x: Node | null = n; x; x = x.parent) out.push(x);
  return out.reverse();
}

/**
 * A layout hint's key: the text's first HINT_WINDOW_CHARS from `open` and as many after its first
 * element's end `firstEnd` (absolute). The text itself, not a hash of it (a Map hashes a short
 * string in a fraction of an encode and xxh3); candidates are compared in full anyway.
 */
/** Characters [start, end) of the chain's raw text joined, read from its pieces (only the part asked for is copied). */
function chainSlice(chain: readonly Node[], start: number, end: number): string {
  let out = "";
  let at = 0;
  for (const x of chain) {
    const next = at + x.raw.length;
    if (next > start && at < end) out += x.raw.slice(Math.max(0, start - at), Math.min(x.raw.length, end - at));
    if (next >= end) break;
    at = next;
  }
  return out;
}

function hintKey(partition: string, text: { slice(start: number, end: number): string }, open: number, firstEnd: number): string {
  return partitioned(partition, `${text.slice(open, open + HINT_WINDOW_CHARS)}\u0000${text.slice(firstEnd, firstEnd + HINT_WINDOW_CHARS)}`);
}

/**
 * A body's first bytes kept for the conversation's next body: the UTF-8 of `head` (the body's text
 * before its messages array's elements) then of `node`'s chain's raw text, a view of the body's
 * buffer, or a copy of those bytes where the buffer is much longer (holdBody). Those bytes decoded
 * to exactly that text when they were read.
 */
interface HeldBody {
  node: Node;
  head: string;
  bytes: Uint8Array;
  /** Its key in the held bodies (bodyKey), partitioned as the node's scope. */
  key: string;
  /**
   * The key of the entry the conversation that last relied on it goes on from (what its request
   * stored, else its hit): a body held further along that entry's chain replaces it (holdBody).
   */
  next: bigint;
  /** What it adds to the node's bytes. */
  cost: number;
}

/** A held body's key: the partition, then the BODY_WINDOW_BYTES of `bytes` at `at` (as Latin-1 characters). */
function bodyKey(partition: string, bytes: Uint8Array, at: number): string {
  return partitioned(partition, `${at}\u0000${String.fromCharCode(...bytes.subarray(at, at + BODY_WINDOW_BYTES))}`);
}

/** Where a held prefix of `length` (> BODY_WINDOW_BYTES) bytes has its key's window: the largest power of two leaving it inside. */
function bodyWindowAt(length: number): number {
  return 2 ** Math.floor(Math.log2(length - BODY_WINDOW_BYTES));
}

/** A scope of `partition`: its id, then the rest of the scope. */
function partitioned(partition: string, unpartitioned: string): string {
  return `${partition}${PARTITION_END}${unpartitioned}`;
}

/** A scope's partition id. */
function partitionOf(scope: string): string {
  return scope.slice(0, scope.indexOf(PARTITION_END));
}

/** A scope without its partition id (what a StablePrefix carries). */
function unpartitioned(scope: string): string {
  return scope.slice(scope.indexOf(PARTITION_END) + 1);
}

/** What a listed layout hint counts besides nodeBytes: its key's copy of the partition id. */
function hintIdBytes(n: { scope: string }): number {
  return 2 * partitionOf(n.scope).length;
}

/** Whether `chain` is a leading part of `of` (the same entries: a node's chain is fixed). */
function isPrefixOf(chain: readonly Node[], of: readonly Node[]): boolean {
  return chain.length <= of.length && of[chain.length - 1] === chain[chain.length - 1];
}

/**
 * Where the messages array's first element, after spaces from `open`, ends (valueEnd); -1 when none.
 * Read in the piece holding `open` (a held chain's first raw text: whole elements) when the element
 * ends there at its own closing bracket (the scan read nothing past it), else in the whole text.
 */
function firstElementEnd(body: SplitText, open: number): number {
  if (body.length <= open) return -1;
  const { text, at } = body.region(open, open + 1);
  const i = skipSpaces(text, open - at);
  const end = valueEnd(text, i);
  if (text === body.joined) return end;
  const c = end > i ? text.charCodeAt(end - 1) : -1;
  if (c === 0x7d || c === 0x5d) return at + end;
  const whole = body.joined;
  return valueEnd(whole, skipSpaces(whole, open));
}

/**
 * Spans of messages [from, cut) relative to the messages array's text, as pairs; null unless every
 * one is an object (ends at a `}`: its scan read nothing past it).
 */
function ownSpans(body: SplitText, layout: BodyLayout, from: number, cut: number): Int32Array | null {
  const out = new Int32Array(2 * (cut - from));
  for (let i = from; i < cut; i++) {
    const [start, end] = layout.messages[i]!;
    if (body.charCodeAt(end - 1) !== 0x7d) return null;
    out[2 * (i - from)] = start - layout.messagesOpen;
    out[2 * (i - from) + 1] = end - layout.messagesOpen;
  }
  return out;
}

/**
 * A chain's stored parts in order, in one pass: its rendered text (a rope of the pieces, never
 * flattened here), the pieces and their identities (PromptPieces ids, also its heads), media and dropped parts.
 */
function chainParts(chain: readonly Node[]): { text: string; texts: string[]; ids: object[]; media: MediaPart[]; dropped: DroppedPart[] } {
  const n = chain.length;
  const out = { text: "", texts: new Array<string>(n), ids: new Array<object>(n), media: [] as MediaPart[], dropped: [] as DroppedPart[] };
  for (let k = 0; k < n; k++) {
    const x = chain[k]!;
    out.text += x.text;
    out.texts[k] = x.text;
    out.ids[k] = x.textId;
    for (const p of x.media) out.media.push(p);
    for (const d of x.dropped) out.dropped.push(d);
  }
  return out;
}

/**
 * The stable prefix `n` stands for, or its nearest ancestor's that ends before a query (what a
 * StablePrefix is, and seed() stores) when it ends elsewhere; undefined when none.
 */
function stableAt(n: Node | null): (() => StablePrefix) | undefined {
  let x = n;
  while (x && x.cut !== "beforeQuery") x = x.parent;
  if (!x) return undefined;
  const node = x;
  return () => {
    const { text, media, dropped } = chainParts(chainOf(node));
    return { scope: unpartitioned(node.scope), messages: node.messages, text, media, dropped, images: node.images, videos: node.videos };
  };
}

export class TurnChainCache {
  readonly maxBytes: number;
  /** Share of hits also rendered whole (the edge sets it from its config on each request). */
  checkRate: number;
  private readonly render: TemplateRenderer;
  /** Characters the template has rendered in this chain (full renders, tails, stand-ins, checks): a work counter. */
  renderedChars = 0;
  private readonly random: () => number;
  private readonly onMismatch: NonNullable<TurnChainOptions["onMismatch"]>;
  private readonly buckets = new Map<bigint, Node[]>();
  /** Held bodies, by bodyKey (most recent last): at most one per conversation (holdBody). */
  private readonly bodies = new Map<string, HeldBody[]>();
  /** Layout hints: entries with spans, by hintKey of their messages text (most recent last). */
  private readonly hints = new Map<string, Node[]>();
  /**
   * The last scanLayout's layout, body and the chain its held spans came from, compared with that
   * body: the lookup of that layout compares it no second time, and lets it go.
   */
  private compared: { layout: BodyLayout; body: SplitText; chain: readonly Node[] } | null = null;
  /** The entries (LRU) and the bytes their pieces hold. */
  private readonly held: HeldChains<Node>;
  private s = { hits: 0, misses: 0, reusedMessages: 0, checks: 0, mismatches: 0, stores: 0, heldLayouts: 0, heldBodies: 0 };
  private readonly encoder = new TextEncoder();
  private readonly buf = new Uint8Array(24 + 3 * (KEY_HEAD_CHARS + KEY_TAIL_CHARS));
  /**
   * What the stand-in renders to alone, per scope and item counts: its head (header and its block)
   * and the generation prompt after it. One render per hit saved, and a cut after the last message
   * (its tail is what follows the stand-in alone) needs none.
   */
  private readonly standIns = new Map<string, StandInMemo>();
  private standInChars = 0;
  /** Templates whose tails are always rendered: a sampled check found a hit's prompt wrong (tail-skeleton.ts trusts each template's reads). */
  private readonly noSkeletons = new Set<TemplateId>();
  /** Layout scans made (heldSpans stamps the entries each found equal). */
  private scans = 0;
  /** The entries storeCut makes while a hit's store runs (prepare reads them: their escaping goes to this request's body); null otherwise. */
  private storedNow: Node[] | null = null;

  constructor(options: TurnChainOptions = {}) {
    this.maxBytes = options.maxBytes ?? DEFAULT_TURN_CHAIN_BYTES;
    this.held = new HeldChains<Node>({ maxBytes: this.maxBytes, onDrop: (n) => this.unlist(n) });
    this.checkRate = options.checkRate ?? DEFAULT_TURN_CHECK_RATE;
    const render = options.render ?? renderTemplate;
    this.render = (id, input) => {
      const out = render(id, input);
      this.renderedChars += out.length;
      return out;
    };
    this.random = options.random ?? Math.random;
    this.onMismatch = options.onMismatch ?? ((d) => console.warn(JSON.stringify({ event: "turn_chain_mismatch", ...d })));
  }

  /**
   * preparePrompt(request, profile) for the request parsed from `body`, reusing the rendered text
   * of the longest cached message prefix. `request` must be what the edge parsed from `body`.
   * `partition`: whose entries it may use and adds to (find). `opts.found`: this body's lookup, made
   * earlier (the parse stage's); `opts.validated`: `request` is parseChatRequest's, so its messages
   * may be kept for later bodies' parses (reusedMessages).
   */
  prepare(request: ChatRequestLike, body: string | SplitText, profile: ModelProfile, partition: string, opts: { found?: ChainFind | null; validated?: boolean } = {}): ChainedPrompt {
    const given = opts.found;
    // The lookup's body is this one when it is the same object, or its text the same string (compared by identity: never read).
    const found = given && (given.body === body || given.body.joined === body) && given.profile.family === profile.family && given.profile.templateId === profile.templateId && partitionOf(given.scope) === partition ? given : this.find(body, profile, partition);
    if (!found || found.layout.messages.length !== request.messages.length) return this.full(request, profile, null);
    const { body: text, layout, scope, scopeHash, hit } = found;
    const validated = opts.validated ? (request.messages as readonly ChatMessage[]) : null;
    const decoded = found.decoded ?? [];
    if (!hit) {
      this.s.misses++;
      return this.full(request, profile, { body: text, layout, scope, scopeHash, parent: null, validated, decoded, endsWithUser: endsWithUser(request), partlyAnswered: partlyAnsweredCalls(request) });
    }
    let extended: { prompt: ChainedPrompt; store: () => StoredPrefix } | null = null;
    try {
      extended = this.extend(request, text, layout, profile, hit.node, hit.chain, scope, scopeHash, validated, decoded);
    } catch {
      extended = null;
    }
    if (!extended) {
      this.s.misses++;
      return this.full(request, profile, null);
    }
    const out = extended.prompt;
    this.s.hits++;
    this.s.reusedMessages += hit.node.messages;
    // A node dropped since it was found (the parse stage found it) is used, not revived.
    this.held.touch(hit.node);
    // The chain's UTF-8 made for this request counts from now on.
    this.held.evictOverBudget();
    if (this.sampled()) {
      this.s.checks++;
      const whole = this.full(request, profile, null);
      if (whole.text !== out.text || whole.assistantPrefix !== out.assistantPrefix || JSON.stringify([whole.mediaParts, whole.droppedParts, whole.hasAudio]) !== JSON.stringify([out.mediaParts, out.droppedParts, out.hasAudio])) {
        this.s.mismatches++;
        this.onMismatch({ templateId: profile.templateId, messages: request.messages.length, reusedMessages: hit.node.messages });
        // Any entry of the chain may hold the wrong piece: every kept entry extending one goes (a branch's siblings too).
        this.dropHolding(hit.chain.map((n) => n.textId));
        // The tail may have come from a skeleton: rebuilt, it would be the same, so none is used again for this template.
        this.noSkeletons.add(profile.templateId);
        return whole;
      }
    }
    // Only a result that passed its check (or was not sampled) seeds the next turn.
    this.adoptParsed(hit.chain, text, layout, validated);
    this.storedNow = [];
    let kept: StoredPrefix;
    let storedNow: Node[];
    try {
      kept = extended.store();
    } finally {
      storedNow = this.storedNow;
      this.storedNow = null;
    }
    if (found.bodyBytes) this.holdBody(hit.node, text, layout, found.bodyBytes, (kept.next ?? hit.node).key);
    const stable = kept.node ? kept.stable : stableAt(hit.node);
    const pieces = this.withStoredEscaping(out.pieces!, hit.node, kept.next, storedNow);
    return { ...out, pieces, reusedMessages: hit.node.messages, ...(stable ? { stable } : {}) };
  }

  /**
   * `pieces` with the escaping of the entries this request stored after `from` (the hit) through
   * `to` (restEscaped), made as they were stored, so the /generate body escapes only the rest of
   * the request's own text (a chat turn's generation prompt; an agent step's tool output went into
   * the entry through it). Only entries made by this store count (`storedNow`): their text is a
   * slice of this request's rendered tail by construction. Unchanged where `to` is not such an
   * entry below `from`.
   */
  private withStoredEscaping(pieces: PromptPieces, from: Node, to: Node | null, storedNow: readonly Node[]): PromptPieces {
    const own: Node[] = [];
    let x = to;
    for (; x !== null && x !== from; x = x.parent) {
      if (!storedNow.includes(x)) return pieces;
      own.push(x);
    }
    if (x !== from || own.length === 0) return pieces;
    own.reverse();
    let chars = 0;
    for (const n of own) chars += n.text.length;
    if (chars > pieces.rest.length) return pieces;
    // As chunks, a wide entry's too: its UTF-8 is made only if a later turn sends it as held history (bodyParts).
    const chunks = own.length === 1 ? own[0]!.escaped : own.flatMap((n) => n.escaped);
    return { ...pieces, restEscaped: { chars, chunks } };
  }

  /**
   * The text of a held prefix of `bytes` (a body as read, before decoding): the longest held body
   * of `partition` whose bytes equal the body's first bytes, compared in full, and its length in
   * bytes; null when none. The text is exactly what decoding those bytes gives (they decoded to it
   * when first read, and end at a character's end); the caller decodes only the rest. Another
   * partition's bodies are never candidates (the key starts with it).
   */
  heldBodyText(bytes: Uint8Array, partition: string): { head: string; gap: string[]; length: number } | null {
    const h = this.heldBodyOf(bytes, partition);
    if (!h) return null;
    this.s.heldBodies++;
    // The text as its pieces: the head, then each entry's raw text (scanLayout takes their spans; nothing joins them).
    return { head: h.head, gap: chainOf(h.node).map((x) => x.raw), length: h.bytes.length };
  }

  /**
   * Forgets the held body of `partition` whose bytes are `prefix` (a read whose joined text differed
   * from the whole decode: heldBodyText gave it), and drops its entry as a failed check does.
   */
  dropHeldBody(prefix: Uint8Array, partition: string): void {
    const h = this.heldBodyOf(prefix, partition, true);
    if (!h) return;
    // The text came from every entry of its chain: each kept entry extending one of them goes.
    this.dropHolding(chainOf(h.node).map((x) => x.textId));
    if (h.node.body) this.releaseBody(h.node);
  }

  /**
   * Drops every entry whose chain holds a piece of `textIds` (PromptPieces.ids, or a hit chain's
   * entries' textId), their held bodies with them: a sampled check found what they gave wrong
   * (edge/chat/exactness-check.ts). The count dropped.
   */
  dropHolding(textIds: readonly object[]): number {
    const bad = new Set(textIds);
    return this.held.dropWhere((n) => {
      for (let x: Node | null = n; x; x = x.parent) if (bad.has(x.textId)) return true;
      return false;
    });
  }

  /** The longest held body of `partition` that `bytes` start with (`whole`: that is all of `bytes`). */
  private heldBodyOf(bytes: Uint8Array, partition: string, whole = false): HeldBody | null {
    if (this.bodies.size === 0 || bytes.length <= BODY_WINDOW_BYTES + 1) return null;
    // A held prefix is shorter than the body: its window is at the body's own power of two or below,
    // and one listed at a higher power of two is longer than any listed lower.
    for (let at = bodyWindowAt(whole ? bytes.length : bytes.length - 1), i = 0; at >= 1 && i < BODY_PROBES; at /= 2, i++) {
      const held = this.bodies.get(bodyKey(partition, bytes, at));
      if (!held) continue;
      // Longest first: conversations that share a prefix (a system prompt) list theirs under one key.
      const candidates = held.length === 1 ? held : [...held].sort((a, b) => b.bytes.length - a.bytes.length);
      for (const h of candidates) {
        if ((whole ? h.bytes.length !== bytes.length : h.bytes.length >= bytes.length) || !sameBytes(h.bytes, bytes.subarray(0, h.bytes.length))) continue;
        return h;
      }
    }
    return null;
  }

  /**
   * scanBodyLayout(body), the same layout, with the spans of a held message prefix that the body
   * holds character for character taken from its entries instead of scanning that text again (the
   * body is compared with the entries' raw text in full: what a lookup also compares, done once).
   * Only `partition`'s entries are candidates.
   */
  scanLayout(given: string | SplitText, partition: string): BodyLayout | null {
    // Whatever an earlier scan left for a lookup that never ran is dropped: it holds that body.
    this.compared = null;
    const body = typeof given === "string" ? SplitText.of(given) : given;
    if (this.hints.size === 0) return scanBodyLayout(body.joined);
    if (body.split) {
      const around = this.scanAroundGap(body, partition);
      if (around) return around;
    }
    const held: { chain: Node[] | null } = { chain: null };
    const layout = scanBodyLayout(body.joined, (open) => {
      const found = this.heldSpans(body, open, partition);
      held.chain = found?.chain ?? null;
      if (found) this.s.heldLayouts++;
      return found;
    });
    this.compared = layout && held.chain ? { layout, body, chain: held.chain } : null;
    return layout;
  }

  /**
   * scanLayout of a body whose messages array opens where its gap starts, reading only the text
   * around the gap (split-text.ts `outside`): the held spans of an entry chain that covers the gap
   * (compared piece by piece) stand for the gap's text, and the scan goes on after them, as the
   * whole scan goes on after held spans. The layout is the whole scan's, positions past the gap
   * moved by its length. Null (the whole body is scanned) when no held chain covers the gap or the
   * messages array is another one.
   */
  private scanAroundGap(body: SplitText, partition: string): BodyLayout | null {
    const open = body.gapStart;
    const shift = body.gapEnd - open;
    let found: (HeldSpans & { chain: Node[] }) | null = null;
    let covered = true;
    const local = scanBodyLayout(body.outside(), (at) => {
      if (at !== open) return null;
      found = this.heldSpans(body, open, partition);
      if (!found || found.end < body.gapEnd) {
        covered = false;
        return null;
      }
      return { end: found.end - shift, spans: [] };
    });
    const held = found as (HeldSpans & { chain: Node[] }) | null;
    if (!covered || !local || !held || local.messagesOpen !== open) return null;
    this.s.heldLayouts++;
    const moved = (i: number) => (i >= open ? i + shift : i);
    const members = new Map<string, [number, number]>();
    for (const [key, [a, b]] of local.members) members.set(key, [moved(a), moved(b)]);
    const messages = held.spans;
    for (const [a, b] of local.messages) messages.push([a + shift, b + shift]);
    const layout: BodyLayout = { members, messagesOpen: open, messages };
    this.compared = { layout, body, chain: held.chain };
    return layout;
  }

  /** Whether to check a result against the whole path's: a checkRate share, drawn with the `random` option. */
  sampled(): boolean {
    return this.checkRate > 0 && this.random() < this.checkRate;
  }

  /**
   * The body's layout, scope and longest cached message prefix of `partition` (the caller's: an
   * entry of another is never found; "" the common one). `given`: scanLayout(body, partition), when already made.
   */
  find(text: string | SplitText, profile: ModelProfile, partition: string, given?: BodyLayout | null): ChainFind | null {
    const body = typeof text === "string" ? SplitText.of(text) : text;
    const layout = given === undefined ? this.scanLayout(body, partition) : given;
    if (!layout) return null;
    const scope = scopeOf(partition, profile, body, layout);
    const scopeHash = xxh3_64(this.encoder.encode(scope));
    return { body, profile, layout, scope, scopeHash, hit: this.lookup(body, layout, scope, scopeHash) };
  }

  /**
   * The leading messages `found` reuses as an earlier body's parse validated them, with their
   * whole-body tally (parseChatRequest's `opts.reuse`); null without a hit or without parse data.
   */
  reusedMessages(found: ChainFind | null): ReusedMessages | null {
    const hit = found?.hit;
    if (!found || !hit) return null;
    const spans = found.layout.messages;
    const q = hit.node.messages;
    if (q >= spans.length) return null;
    // The reused text was compared with an accepted body's; what follows it up to the first new
    // message is cut out unparsed, so it must be the one separator JSON allows (the layout scan
    // would pass `,,` or a missing comma).
    if (!SEPARATOR.test(found.body.slice(spans[q - 1]![1], spans[q]![0]))) return null;
    const tally = this.chainTally(hit.node);
    if (!tally || tally.messages !== q) return null;
    // One slot a message, filled in place.
    const messages = new Array<ChatMessage>(q);
    let m = 0;
    for (const x of hit.chain) {
      if (!x.parsed || m + x.parsed.length > q) return null;
      for (const msg of x.parsed) messages[m++] = msg;
    }
    return m === q ? { messages, tally, cut: [spans[0]![0], spans[q]![0]] } : null;
  }

  /**
   * The tally of `n`'s chain's messages (joinedTallies of its entries' own, a left fold, so each
   * entry's is its parent's joined with its own), kept on each entry once made: a turn joins only
   * the entries it added. Null while an entry of the chain has none.
   */
  private chainTally(n: Node): MessagesTally | null {
    const todo: Node[] = [];
    let x: Node | null = n;
    for (; x && !x.chainTally; x = x.parent) {
      if (!x.tally) return null;
      todo.push(x);
    }
    let joined = x ? x.chainTally : null;
    let grew = false;
    for (let k = todo.length - 1; k >= 0; k--) {
      const y = todo[k]!;
      joined = joined ? joinedTallies([joined, y.tally!]) : y.tally!;
      y.chainTally = joined;
      if (joined === y.tally) continue;
      // Counted from now on (a joined list of data URLs may be a copy).
      this.held.grow(y, CHAIN_TALLY_BYTES + 8 * joined.dataUrls.length);
      grew = true;
    }
    // Within the budget at once: an entry of the found chain dropped for it is still read here, and
    // prepare uses it without reviving it. `n` (the entry being reused) is made the most recent
    // first, as prepare does: an old conversation resent must not be evicted by its own tally.
    if (grew) {
      this.held.touch(n);
      this.held.evictOverBudget();
    }
    return joined;
  }

  stats(): TurnChainStats {
    return { ...this.s, evictions: this.held.evictions, entries: this.held.entries, bytes: this.held.bytes, maxBytes: this.maxBytes };
  }

  clear(): void {
    this.standIns.clear();
    this.standInChars = 0;
    this.noSkeletons.clear();
    this.buckets.clear();
    this.hints.clear();
    this.bodies.clear();
    this.compared = null;
    this.held.clear();
    this.s = { hits: 0, misses: 0, reusedMessages: 0, checks: 0, mismatches: 0, stores: 0, heldLayouts: 0, heldBodies: 0 };
  }

  private full(request: ChatRequestLike, profile: ModelProfile, store: StoreContext | null): ChainedPrompt {
    const pre = preprocessChat(request, contentFormatOf(profile.templateId));
    const input = { messages: pre.messages, tools: pre.tools, kwargs: pre.templateKwargs };
    const rendered = this.render(profile.templateId, input);
    const stable = store ? this.storeFrom(store, profile, input, rendered, pre.mediaParts, pre.droppedParts, 0).stable : undefined;
    const prompt: ChainedPrompt = assemblePrompt(rendered, pre, profile);
    return stable ? { ...prompt, stable } : prompt;
  }

  /** The request's prompt from a cached prefix of `node.messages` messages, or null where the rules do not hold. */
  private extend(request: ChatRequestLike, body: SplitText, layout: BodyLayout, profile: ModelProfile, node: Node, chain: Node[], scope: string, scopeHash: bigint, validated: readonly ChatMessage[] | null, decoded: readonly JsonLiteral[]): { prompt: ChainedPrompt; store: () => StoredPrefix } | null {
    const q = node.messages;
    const pre = preprocessChat({ ...request, messages: request.messages.slice(q) }, contentFormatOf(profile.templateId));
    // The cut's rules on the messages as the template reads them. After an entry before a query a
    // query must come (lookup saw only that one may); for provisional and afterTool entries,
    // lookup's raw roles (mayBeQuery, mayBeTool) are the gate and these checks defence in depth.
    if (node.cut === "provisional" || node.cut === "afterTool" ? pre.messages.length === 0 || pre.messages.some(isQuery) || (node.cut === "afterTool" && pre.messages[0]!.role === "tool") : node.cut === "afterQuery" ? pre.messages.length === 0 : !isQuery(pre.messages[0])) return null;
    const tail = this.renderTail(profile.templateId, scope, node.images, node.videos, pre.messages, pre.tools, pre.templateKwargs);
    if (tail === null) return null;
    const { text: stable, texts, ids, media, dropped } = chainParts(chain);
    // Per-kind positions continue after the reused messages' items (audio too: refused later, but numbered as the full path numbers it).
    const counts = countKinds(media, q);
    const base = media.length;
    for (const p of pre.mediaParts) media.push({ ...p, index: p.index + base, kindIndex: p.kindIndex + counts[p.kind], messageIndex: p.messageIndex + q });
    for (const d of pre.droppedParts) dropped.push({ ...d, messageIndex: d.messageIndex + q });
    const rendered = stable + tail;
    const whole = [...new Array<TemplateMessage>(q), ...pre.messages];
    // The new turn's last query: store its stable prefix (the rendered text before it) for the next turn.
    const input = { messages: whole, tools: pre.tools, kwargs: pre.templateKwargs };
    const store = () => this.storeFrom({ body, layout, scope, scopeHash, parent: node, validated, decoded, endsWithUser: endsWithUser(request), partlyAnswered: partlyAnsweredCalls(request) }, profile, input, tail, media, dropped, q);
    const prompt: ChainedPrompt = {
      ...assemblePrompt(rendered, { mediaParts: media, hasAudio: media.some((p) => p.kind === "audio"), droppedParts: dropped, assistantPrefix: pre.assistantPrefix }, profile),
      pieces: { stable: texts, ids, heads: ids, bodyParts: this.bodyParts(chain), chars: stable.length, rest: tail + (pre.assistantPrefix ?? ""), restEscaped: null },
    };
    return { prompt, store };
  }

  /**
   * The rendered text of `messages` (the first a query) after `images` and `videos` earlier items,
   * through the generation prompt; null when the stand-in cannot be cut off cleanly.
   */
  private renderTail(id: TemplateId, scope: string, images: number, videos: number, messages: readonly TemplateMessage[], tools: RenderInput["tools"], kwargs: Record<string, unknown>): string | null {
    // Where the counts change nothing after the stand-in (template.ts itemCountsIrrelevant), it
    // holds no items: rendering one per earlier item cost ~18 µs each, twice a turn, and its head
    // (memoized by the counts) was rendered anew on every turn that added one.
    if (images + videos > 0 && itemCountsIrrelevant(id, kwargs)) images = videos = 0;
    const items = [...Array.from({ length: images }, () => ({ type: "image" })), ...Array.from({ length: videos }, () => ({ type: "video" }))];
    if (items.length > 0 && contentFormatOf(id) !== "openai") return null;
    const standIn: TemplateMessage = { role: "user", content: items.length > 0 ? items : "" };
    // The scope holds the template and everything else the render reads besides the messages.
    const memoKey = `${images}\u0000${videos}\u0000${scope}`;
    let memo = this.standIns.get(memoKey);
    if (memo === undefined) {
      const alone = this.render(id, { messages: [standIn], tools, kwargs });
      const cut = alone.lastIndexOf(GENERATION_START);
      if (cut < 0) return null;
      const key = ownString(memoKey);
      memo = { key, head: alone.slice(0, cut), generation: alone.slice(cut), skeletons: new Map(), renderChars: key.length + alone.length, skeletonChars: 0 };
      this.makeRoom(memo, memo.renderChars);
      this.standIns.set(key, memo);
      this.standInChars += memo.renderChars;
    }
    // No messages: the render would be the stand-in's alone, whose tail the memo holds.
    if (messages.length === 0) return memo.generation;
    // A shape seen before (a chat turn's [assistant, user]): its skeleton's pieces and these contents.
    const shape = this.noSkeletons.has(id) ? null : tailShape(id, messages);
    if (shape !== null) {
      let skeleton = memo.skeletons.get(shape);
      if (skeleton === undefined) {
        skeleton = buildTailSkeleton(shape, memo.head, (m) => this.render(id, { messages: [standIn, ...m], tools, kwargs }));
        const chars = shape.length + (skeleton ? skeleton.reduce((n, p) => n + p.length, 0) : 0);
        this.makeRoom(memo, chars);
        memo.skeletons.set(shape, skeleton);
        memo.skeletonChars += chars;
        this.standInChars += chars;
      }
      if (skeleton !== null) return fillTailSkeleton(skeleton, messages);
    }
    const withTail = this.render(id, { messages: [standIn, ...messages], tools, kwargs });
    if (!withTail.startsWith(memo.head)) return null;
    return withTail.slice(memo.head.length);
  }

  /**
   * Makes room for `chars` more of `memo` (a new entry, or a skeleton of one held), which the
   * caller then counts: where the memo would pass its bound, every other entry is dropped, and a
   * held entry's skeletons too where it alone would. The entry a turn is using stays (dropping it
   * cost each turn of a scope near the bound a render more).
   */
  private makeRoom(memo: StandInMemo, chars: number): void {
    if (this.standInChars + chars <= STAND_IN_MEMO_CHARS) return;
    const held = this.standIns.get(memo.key) === memo;
    this.standIns.clear();
    this.standInChars = 0;
    if (!held) return;
    this.standIns.set(memo.key, memo);
    if (memo.renderChars + memo.skeletonChars + chars > STAND_IN_MEMO_CHARS) {
      memo.skeletons.clear();
      memo.skeletonChars = 0;
    }
    this.standInChars = memo.renderChars + memo.skeletonChars;
  }

  /**
   * Stores the stable prefix of a request (the rendered text before its last query's block, in two
   * entries when a long query comes before it: through that query, then the rest) and one after
   * that query: through a final tool result (afterTool; through the calls before it instead when
   * the results answer them in part), else a provisional one (through the last assistant message,
   * leaving at least one message new). `input.messages` from index `from` on
   * are the request's preprocessed messages (earlier slots may be empty); `after` is the
   * template's output from message `from` on (no continuation prefix), what follows the parent's
   * stable prefix (all of it without a parent).
   * Only `after` is read: the history's text is never copied again. Returns the entry the stable
   * prefix ends at, the entry the next turn goes on from (stored or already held; null when it
   * stored none), and the stable prefix.
   *
   * A turn after a hit that ends with its query (a chat turn) stores instead the entry through that
   * query (valid for every continuation, as one after a long query): what follows the query's block
   * is what follows the stand-in alone (the generation prompt, memoized), so it needs no render,
   * where the entry before the query needs one of the query. The next turn goes on from it and
   * renders from the message after the query. The entry before the query is stored only when the
   * stable prefix is asked for (the Responses route keeps it).
   */
  private storeFrom(ctx: StoreContext, profile: ModelProfile, input: RenderInput, after: string, media: readonly MediaPart[], dropped: readonly DroppedPart[], from: number): StoredPrefix {
    const messages = input.messages as TemplateMessage[];
    // Every cut reads the layout's spans. The layout has the request's messages (prepare checks it)
    // and preprocessing only drops one (a continued final assistant message), so this is
    // messages.length; the bound keeps storeCut inside the layout all the same.
    const count = Math.min(messages.length, ctx.layout.messages.length);
    const q = lastQuery(messages);
    let at: { node: Node | null; after: string; from: number } = { node: ctx.parent, after, from };
    let kept: Node | null = null;
    if (q > from && q < ctx.layout.messages.length) {
      // The last long query before the last one ends an entry of its own, so a request that
      // branches after it (another answer to it) reuses it; a failed cut only leaves it in the next.
      // An entry also ends right before it, as before any query, so what stableAt hands out (and
      // seed() keeps) reaches as far as without the cut.
      const long = lastLongQuery(messages, ctx.layout, from, q - 1);
      if (long >= 0) {
        const before = long > from ? this.storeCut(ctx, profile, input, at, media, dropped, long, "beforeQuery") : null;
        if (before) at = before;
        const split = this.storeCut(ctx, profile, input, at, media, dropped, long + 1, "afterQuery");
        if (split) at = split;
      }
      // The query must be the client's user message: a final assistant message is relabelled one
      // only while it is final, and renders otherwise in the next turn.
      const before = stableAt(at.node);
      if (from > 0 && q === count - 1 && ctx.endsWithUser && before) {
        const through = this.storeCut(ctx, profile, input, at, media, dropped, count, "afterQuery");
        if (through) return { node: through.node, next: through.node, stable: () => this.storedBefore(ctx, profile, input, at, media, dropped, q) ?? before() };
      }
      const stored = this.storeCut(ctx, profile, input, at, media, dropped, q, "beforeQuery");
      if (!stored) return { node: null, next: null, stable: undefined };
      at = stored;
      kept = stored.node;
    }
    const out = { node: kept, next: kept, stable: stableAt(kept) };
    // The last query: found from `from` on, else before `from` (the parent is provisional), else message 0 of a whole request.
    const query = q >= 0 ? q : from > 0 ? from - 1 : isQuery(messages[0]) ? 0 : -1;
    if (query < 0) return out;
    // A final tool result ends an entry (its block closes the same way before any message but
    // another tool result: lookup and extend check), so the loop's next step parses and renders
    // only its own messages; else the last assistant message before the final message does.
    const last = count - 1;
    if (last > query && last >= at.from && messages[last]?.role === "tool") {
      // Results for fewer calls than the assistant message before them made: a client sending
      // parallel tool results one request at a time sends another result next, which an entry
      // through this result may not be followed by, so only the entry through the calls is stored
      // (counted on the request's own messages: after the first result the parent is that entry,
      // held already). The next result's request goes on from it; a client that sends an
      // assistant or user message after partial results renders those results again.
      const c = ctx.partlyAnswered;
      if (c >= 0) {
        const cuts = c > query && c >= at.from && messages[c]?.role === "assistant";
        const stored = cuts ? this.storeCut(ctx, profile, input, at, media, dropped, c + 1, "provisional") : null;
        const calling = c + 1 === at.from ? at.node : (stored?.node ?? null);
        return calling ? { ...out, next: calling } : out;
      }
      const afterTool = this.storeCut(ctx, profile, input, at, media, dropped, count, "afterTool");
      return afterTool ? { ...out, next: afterTool.node } : out;
    }
    let a = count - 2;
    while (a > query && a >= at.from && messages[a]?.role !== "assistant") a--;
    if (a <= query || a < at.from) return out;
    const provisional = this.storeCut(ctx, profile, input, at, media, dropped, a + 1, "provisional");
    return provisional ? { ...out, next: provisional.node } : out;
  }

  /**
   * The stable prefix through the entry before query `q` (storeFrom's deferred cut), stored now
   * when its parent `at.node` is still held; null when it is not (then a shorter stable prefix).
   */
  private storedBefore(ctx: StoreContext, profile: ModelProfile, input: RenderInput, at: { node: Node | null; after: string; from: number }, media: readonly MediaPart[], dropped: readonly DroppedPart[], q: number): StablePrefix | null {
    // Other requests may have run since (the caller asks after its own awaits): a dropped parent is not revived.
    if (at.node && !this.buckets.get(at.node.key)?.includes(at.node)) return null;
    const stored = this.storeCut(ctx, profile, input, at, media, dropped, q, "beforeQuery");
    return stored ? stableAt(stored.node)!() : null;
  }

  /** Stores the entry of the first `cut` messages after `at`'s node; it (or the same one already held) and the text from `cut` on, or null. */
  private storeCut(ctx: StoreContext, profile: ModelProfile, input: RenderInput, at: { node: Node | null; after: string; from: number }, media: readonly MediaPart[], dropped: readonly DroppedPart[], cut: number, kind: CutKind): { node: Node; after: string; from: number } | null {
    const messages = input.messages as TemplateMessage[];
    const { node: parent, after, from } = at;
    const counts = numberedItems(profile.templateId, media, messages, from, cut, parent ?? { images: 0, videos: 0 });
    const tail = this.renderTail(profile.templateId, ctx.scope, counts.images, counts.videos, messages.slice(cut), input.tools, input.kwargs);
    if (tail === null || tail.length > after.length || !after.endsWith(tail)) return null;
    const open = ctx.layout.messagesOpen;
    const rawEnd = ctx.layout.messages[cut - 1]![1] - open;
    const parentRaw = parent ? parent.rawEnd : 0;
    const key = this.key(ctx.scopeHash, cut, ctx.body, open, rawEnd);
    const held = this.buckets.get(key)?.find((n) => n.messages === cut && n.rawEnd === rawEnd && n.scope === ctx.scope && n.cut === kind);
    if (held) return rawMatches(chainOf(held), ctx.body, open) ? { node: held, after: tail, from: cut } : null;
    const { text: raw, bytesPerChar: rawWidth } = ownCompactString(ctx.body.slice(open + parentRaw, open + rawEnd));
    const { text, bytesPerChar: textWidth } = ownCompactString(after.slice(0, after.length - tail.length));
    const ownMedia = media.filter((p) => p.messageIndex >= from && p.messageIndex < cut);
    const ownDropped = dropped.filter((d) => d.messageIndex >= from && d.messageIndex < cut);
    const literals = rawLiterals(raw, ctx.decoded);
    const escaped = escapedChunks(text, literals);
    const shared = ctx.validated && ctx.validated.length === ctx.layout.messages.length ? shareStrings(ctx.validated.slice(from, cut), literals, text, escaped.found) : null;
    const parsed = shared ? deepFreeze(shared.parsed) : null;
    const tally = parsed ? tallyMessages(ctx.body, ctx.layout.messages.slice(from, cut), parsed) : null;
    const spans = ownSpans(ctx.body, ctx.layout, parent ? parent.messages : 0, cut);
    const bytes = nodeBytes({ raw: rawWidth * raw.length, text: textWidth * text.length, textWidth, scope: parent ? null : ctx.scope, escapedOwnChars: escaped.ownChars, escapedChunks: escaped.chunks.length, parsed: shared?.shared ?? null, parts: ownMedia.length + ownDropped.length, dataUrls: tally?.dataUrls.length ?? 0, spans: spans?.length ?? 0 });
    if (!this.held.admits(bytes)) return null;
    // A child shares its root's scope (the lookup found them equal; nodeBytes counts it at the root).
    // A root keeps its own copy: the request's scope is a rope of slices that would keep the body.
    const node: Node = { parent, key, scope: parent ? parent.scope : ownString(ctx.scope), raw, rawEnd, text, textId: {}, messages: cut, cut: kind, media: ownMedia, dropped: ownDropped, images: counts.images, videos: counts.videos, escaped: escaped.chunks, wide: rawWidth === 2 || textWidth === 2, utf8: null, parsed, tally, chainTally: null, spans, hint: null, scanned: 0, rawBytes: -1, body: null, holders: 0, bytes };
    this.insert(node);
    this.storedNow?.push(node);
    return { node, after: tail, from: cut };
  }

  /**
   * Seeds an entry from a stable prefix computed elsewhere (a stored response, written by the edge
   * itself) and `rawText`, the JSON text of its messages as a request's `messages` array holds them
   * (elements joined by commas, no brackets; the entry keeps its own copy). It is used like any
   * entry: only by a request whose scope and raw text equal these, and sampled hits are rendered
   * whole and compared. `validated`: its messages as the chat parse validates them and their tally
   * in a body holding `rawText` (asked for only when the entry is added), so the
   * first request's parse reads only its new messages (a sampled share is parsed whole and compared).
   * False when not added (already held, or too large). `partition`: the seeding caller's (find).
   */
  seed(given: StablePrefix, rawText: string, partition: string, validatedOf: (() => { messages: readonly ChatMessage[]; tally: MessagesTally } | null) | null = null): boolean {
    const prefix = { ...given, scope: partitioned(partition, given.scope) };
    const rawEnd = rawText.length;
    const key = this.key(xxh3_64(this.encoder.encode(prefix.scope)), prefix.messages, rawText, 0, rawEnd);
    const known = this.buckets.get(key)?.some((n) => n.messages === prefix.messages && n.rawEnd === rawEnd && n.scope === prefix.scope && rawMatches(chainOf(n), SplitText.of(rawText), 0));
    if (known) return false;
    const { text: raw, bytesPerChar: rawWidth } = ownCompactString(rawText);
    const literals = rawLiterals(raw);
    const { text, bytesPerChar: textWidth } = ownCompactString(prefix.text);
    const escaped = escapedChunks(text, literals);
    const validated = validatedOf ? validatedOf() : null;
    const usable = validated !== null && validated.messages.length === prefix.messages && validated.tally.messages === prefix.messages;
    const shared = usable ? shareStrings(validated.messages, literals, text, escaped.found) : null;
    const parsed = shared ? deepFreeze(shared.parsed) : null;
    const tally = parsed ? validated!.tally : null;
    const bytes = nodeBytes({ raw: rawWidth * raw.length, text: textWidth * text.length, textWidth, scope: prefix.scope, escapedOwnChars: escaped.ownChars, escapedChunks: escaped.chunks.length, parsed: shared?.shared ?? null, parts: prefix.media.length + prefix.dropped.length, dataUrls: tally?.dataUrls.length ?? 0, spans: 0 });
    if (!this.held.admits(bytes)) return false;
    this.insert({ parent: null, key, scope: ownString(prefix.scope), raw, rawEnd, text, textId: {}, messages: prefix.messages, cut: "beforeQuery", media: prefix.media, dropped: prefix.dropped, images: prefix.images, videos: prefix.videos, escaped: escaped.chunks, wide: rawWidth === 2 || textWidth === 2, utf8: null, parsed, tally, chainTally: null, spans: null, hint: null, scanned: 0, rawBytes: -1, body: null, holders: 0, bytes });
    return true;
  }

  private insert(node: Node): void {
    const key = node.key;
    const bucket = this.buckets.get(key);
    if (bucket && bucket.length >= MAX_BUCKET) this.held.drop(bucket[0]!);
    const b = this.buckets.get(key);
    if (b) b.push(node);
    else this.buckets.set(key, [node]);
    this.held.keep(node);
    this.listHint(node);
    this.s.stores++;
    this.held.evictOverBudget();
  }

  /**
   * Gives the entries of `chain` kept without parse data (seeded from a stored response, or stored
   * from an unvalidated request) this request's validated messages and their tally, so later bodies
   * of the conversation parse only their new messages. Their raw text equals the body's (the hit).
   */
  private adoptParsed(chain: readonly Node[], body: SplitText, layout: BodyLayout, validated: readonly ChatMessage[] | null): void {
    if (!validated || validated.length !== layout.messages.length) return;
    let from = 0;
    for (const x of chain) {
      if (!x.parsed) {
        const { parsed, shared } = shareStrings(validated.slice(from, x.messages), rawLiterals(x.raw), x.text);
        x.parsed = deepFreeze(parsed);
        x.tally = tallyMessages(body, layout.messages.slice(from, x.messages), x.parsed);
        this.held.grow(x, parsedBytes(shared) + 8 * x.tally.dataUrls.length);
      }
      from = x.messages;
    }
    this.held.evictOverBudget();
  }

  /**
   * The longest cached message prefix of the request (leaving at least one message new): an entry
   * ending before a query only when the message after it may be a query, a provisional one only
   * when no message after it may be one, one after a tool result only when that holds and also the
   * message after it may not be a tool result, one ending after a query whatever follows.
   */
  private lookup(body: SplitText, layout: BodyLayout, scope: string, scopeHash: bigint): { node: Node; chain: Node[] } | null {
    const open = layout.messagesOpen;
    const count = layout.messages.length;
    // A chain scanLayout compared with this body: its entries' text need not be compared again.
    const compared = this.compared;
    const matched = compared && compared.layout === layout && compared.body === body ? compared.chain : null;
    if (compared?.layout === layout) this.compared = null;
    // Read from the end down, only as far as a provisional candidate needs: the new part.
    let read = count;
    let queryAt = -1;
    const queryFrom = (q: number): boolean => {
      while (queryAt < 0 && read > q) {
        read--;
        if (mayBeQuery(body, layout.messages[read]!, read === count - 1)) queryAt = read;
      }
      return queryAt >= q;
    };
    // A continued final message is dropped by preprocessing: an entry after a query must keep one message after it.
    const continues = layout.members.get("continue_final_message");
    const continuesFinal = continues !== undefined && body.slice(continues[0], continues[1]) === "true";
    for (let q = count - 1; q >= 1; q--) {
      const rawEnd = layout.messages[q - 1]![1] - open;
      const bucket = this.buckets.get(this.key(scopeHash, q, body, open, rawEnd));
      if (!bucket) continue;
      for (const n of bucket) {
        if (n.messages !== q || n.rawEnd !== rawEnd || n.scope !== scope) continue;
        if (n.cut === "provisional" ? queryFrom(q) : n.cut === "afterTool" ? queryFrom(q) || mayBeTool(body, layout.messages[q]!) : n.cut === "beforeQuery" ? !mayBeQuery(body, layout.messages[q]!, q === count - 1) : continuesFinal && q === count - 1) continue;
        const chain = chainOf(n);
        if ((matched !== null && isPrefixOf(chain, matched)) || rawMatches(chain, body, open)) return { node: n, chain };
      }
    }
    return null;
  }

  /**
   * The spans of the longest entry chain whose raw text `body` holds from `open` on, and that
   * chain; null when none. Candidates are the entries listed under the body's hintKey and their
   * ancestors (a sibling branch's parent is the conversation's prefix); each entry's text is
   * compared in full, once.
   */
  private heldSpans(body: SplitText, open: number, partition: string): (HeldSpans & { chain: Node[] }) | null {
    const first = firstElementEnd(body, open);
    if (first < 0 || first + HINT_WINDOW_CHARS > body.length) return null;
    const hints = this.hints.get(hintKey(partition, body, open, first));
    if (!hints) return null;
    // The deepest entry whose chain (all with spans) the body holds; entries found so (`scanned` is
    // this scan's stamp), each with its whole chain. Candidates are mostly one conversation's
    // branches: each walks up only to an entry an earlier one found equal, not over the whole history again.
    let best: Node | null = null;
    const stamp = ++this.scans;
    const above: Node[] = [];
    for (const n of hints) {
      if (best && n.rawEnd <= best.rawEnd) continue;
      above.length = 0;
      let x: Node | null = n;
      for (; x && x.scanned !== stamp; x = x.parent) above.push(x);
      let deepest = x;
      for (let k = above.length - 1; k >= 0; k--) {
        const y = above[k]!;
        if (y.spans === null || !body.matches(open + y.rawEnd - y.raw.length, y.raw)) break;
        y.scanned = stamp;
        deepest = y;
      }
      if (deepest && (!best || deepest.rawEnd > best.rawEnd)) best = deepest;
    }
    if (!best) return null;
    const chain = chainOf(best);
    // One slot a message, filled in place (pushing one pair at a time regrows the array as it goes).
    let count = 0;
    for (const x of chain) count += x.spans!.length >> 1;
    const spans = new Array<[number, number]>(count);
    let m = 0;
    for (const x of chain) {
      const own = x.spans!;
      for (let i = 0; i < own.length; i += 2) spans[m++] = [open + own[i]!, open + own[i + 1]!];
    }
    return { end: open + best.rawEnd, spans, chain };
  }

  /** Lists `node` under the hintKey of its messages text, when its chain's spans are known and cover the key's windows. */
  private listHint(node: Node): void {
    const chain = chainOf(node);
    if (!chain.every((x) => x.spans !== null)) return;
    const firstEnd = chain[0]!.spans![1]!;
    if (firstEnd + HINT_WINDOW_CHARS > node.rawEnd) return;
    // Each window cut from the chain's pieces: joining them first (a long first message and the
    // next) makes a string the slices flatten, a copy of the history on every store (~1 ms at 100k tokens).
    const raw = { slice: (start: number, end: number): string => chainSlice(chain, start, end) };
    // Its own copy: the slices would keep the text they were cut from.
    const key = ownString(hintKey(partitionOf(node.scope), raw, 0, firstEnd));
    // nodeBytes counts the key's windows; its partition id on top, while it is listed.
    this.held.grow(node, hintIdBytes(node));
    const hints = this.hints.get(key);
    if (hints) {
      if (hints.length >= HINTS_PER_KEY) {
        const displaced = hints.shift()!;
        displaced.hint = null;
        this.held.grow(displaced, -hintIdBytes(displaced));
      }
      hints.push(node);
    } else this.hints.set(key, [node]);
    node.hint = key;
  }

  /** PromptPieces.bodyParts of `chain`: a wide node's UTF-8 is encoded on its first send as held history, then kept (and counted) with it. */
  private bodyParts(chain: readonly Node[]): (string | Uint8Array)[] {
    const out: (string | Uint8Array)[] = [];
    for (const x of chain) {
      if (!x.wide) {
        for (const c of x.escaped) out.push(c);
        continue;
      }
      if (x.utf8 === null) {
        // Pieces end at a message's block, never inside a surrogate pair: each encodes as its part of the whole.
        x.utf8 = this.encoder.encode(x.escaped.length === 1 ? x.escaped[0]! : x.escaped.join(""));
        this.held.grow(x, x.utf8.byteLength + BYTES_ARRAY_BYTES);
      }
      out.push(x.utf8);
    }
    return out;
  }

  private key(scopeHash: bigint, messages: number, body: { slice(start: number, end: number): string }, open: number, rawEnd: number): bigint {
    const v = new DataView(this.buf.buffer);
    v.setBigUint64(0, scopeHash, true);
    v.setUint32(8, messages, true);
    v.setUint32(12, rawEnd, true);
    let n = 16;
    const headEnd = Math.min(rawEnd, KEY_HEAD_CHARS);
    n += this.encoder.encodeInto(body.slice(open, open + headEnd), this.buf.subarray(n)).written;
    n += this.encoder.encodeInto(body.slice(open + Math.max(headEnd, rawEnd - KEY_TAIL_CHARS), open + rawEnd), this.buf.subarray(n)).written;
    return xxh3_64(this.buf.subarray(0, n));
  }

  /**
   * Keeps the first bytes of `bytes` (the body `body` as read) that hold `node`'s messages, for the
   * conversation's next body (heldBodyText); `next`: the key of the entry this conversation goes on
   * from. The node's own body goes, and an ancestor's when its conversation went on along this
   * chain (one body per conversation: the newest, whose prefix the next turn's body carries); an
   * ancestor's that another conversation relies on (a shared system prompt's) stays. Not held: a
   * body that starts with a byte order mark (its text lacks those bytes), bytes that do not end
   * where the node's text ends in UTF-8 (then bytes and text disagree), or bytes over what the
   * budget admits for one piece.
   */
  private holdBody(node: Node, body: SplitText, layout: BodyLayout, bytes: Uint8Array, next: bigint): void {
    const head = body.slice(0, layout.messagesOpen);
    // Only a kept entry (one dropped since the parse found it is never released again).
    if (!this.buckets.get(node.key)?.includes(node)) return;
    if (node.body && node.body.head === head) {
      // The same bytes: this conversation is the latest to rely on them.
      node.body.next = next;
      return;
    }
    if (bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf) return;
    const chain = chainOf(node);
    let length = utf8ByteLength(head);
    for (const x of chain) {
      if (x.rawBytes < 0) x.rawBytes = utf8ByteLength(x.raw);
      length += x.rawBytes;
    }
    if (length <= BODY_WINDOW_BYTES + 1 || length >= bytes.length || bytes[length - 1] !== 0x7d || body.charCodeAt(layout.messagesOpen + node.rawEnd - 1) !== 0x7d) return;
    // An ASCII prefix is not held: workerd decodes ASCII about as fast as the joined text was copied
    // (paired A/B: +0.1–0.3 ms at 100k), and with the text kept in its parts (split-text.ts) holding
    // it still measured no lower at 100k (both orders disagree, within the host's noise) for ~1 B a
    // character of the budget.
    if (length === layout.messagesOpen + node.rawEnd) return;
    // A view would keep the whole buffer: where the body goes on much past the prefix (a large
    // image in its newest message), a copy of the prefix is kept instead.
    const copy = bytes.buffer.byteLength > length + (length >> 2);
    const key = ownString(bodyKey(partitionOf(node.scope), bytes, bodyWindowAt(length)));
    const cost = (copy ? length : bytes.buffer.byteLength) + 2 * (head.length + key.length) + HELD_BODY_OVERHEAD;
    if (!this.held.admits(cost)) return;
    for (const x of chain) if (x.body && (x === node || this.wentOn(x.body, chain))) this.releaseBody(x);
    const held: HeldBody = { node, head: ownString(head), bytes: copy ? bytes.slice(0, length) : bytes.subarray(0, length), key, next, cost };
    const list = this.bodies.get(key);
    if (list && list.length >= BODIES_PER_KEY) this.releaseBody(list[0]!.node);
    const listed = this.bodies.get(key);
    if (listed) listed.push(held);
    else this.bodies.set(key, [held]);
    node.body = held;
    this.held.grow(node, held.cost);
    this.held.evictOverBudget();
  }

  /** Whether the conversation that last relied on `body` went on past its node along `chain`. */
  private wentOn(body: HeldBody, chain: readonly Node[]): boolean {
    return body.next !== body.node.key && chain.some((y) => y.key === body.next);
  }

  private releaseBody(n: Node): void {
    const held = n.body!;
    const list = this.bodies.get(held.key);
    const i = list ? list.indexOf(held) : -1;
    if (i >= 0) list!.splice(i, 1);
    if (list && list.length === 0) this.bodies.delete(held.key);
    n.body = null;
    this.held.grow(n, -held.cost);
  }

  /** Takes an entry that HeldChains dropped out of its bucket. */
  private unlist(n: Node): void {
    if (n.body) this.releaseBody(n);
    if (n.hint !== null) {
      const hints = this.hints.get(n.hint);
      const i = hints ? hints.indexOf(n) : -1;
      if (i >= 0) hints!.splice(i, 1);
      if (hints && hints.length === 0) this.hints.delete(n.hint);
      n.hint = null;
      // A listed hint counted its partition id (listHint): given back with the listing.
      this.held.grow(n, -hintIdBytes(n));
    }
    const bucket = this.buckets.get(n.key);
    if (bucket) {
      const i = bucket.indexOf(n);
      if (i >= 0) bucket.splice(i, 1);
      if (bucket.length === 0) this.buckets.delete(n.key);
    }
  }
}

interface StoreContext {
  body: SplitText;
  layout: BodyLayout;
  scope: string;
  scopeHash: bigint;
  parent: Node | null;
  /** The request's validated messages (kept for later parses), or null. */
  validated: readonly ChatMessage[] | null;
  /** ChainFind.decoded (none: []). */
  decoded: readonly JsonLiteral[];
  /** Whether the request's last message is a user message (before preprocessing relabels a final assistant one). */
  endsWithUser: boolean;
  /** partlyAnsweredCalls of the request: the calls' message its trailing tool results answer in part, else -1. */
  partlyAnswered: number;
}

/** What storeFrom kept: the entry its stable prefix ends at, the entry the next turn goes on from, and the request's stable prefix (ChainedPrompt.stable). */
interface StoredPrefix {
  node: Node | null;
  /**
   * The entry the next turn goes on from: the afterTool or provisional one, the entry through
   * calls the results answer in part (stored or the parent), else `node` itself. The held body's
   * `next` (holdBody).
   */
  next: Node | null;
  stable: (() => StablePrefix) | undefined;
}

let shared: TurnChainCache | null = null;
/** The isolate's turn chain (the edge's prompt stage); `checkRate`, when given, becomes its check rate. */
export function sharedTurnChain(checkRate?: number): TurnChainCache {
  shared ??= new TurnChainCache({ checkRate: checkRate ?? DEFAULT_TURN_CHECK_RATE });
  if (checkRate !== undefined) shared.checkRate = checkRate;
  return shared;
}
