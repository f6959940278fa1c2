/**
 * Turns a raw request body into a validated ChatCompletionRequest, or throws an
 * InvalidRequestError / PayloadTooLargeError naming the offending field (`param`, e.g.
 * `messages[2].content[0].image_url.url`). Nothing else ever escapes parseChatRequest.
 */
import type { z } from "zod";
import { InvalidRequestError, KvedgeError, PayloadTooLargeError } from "./errors.ts";
import { DEFAULT_LIMITS } from "./limits.ts";
import { checkPatternGrammar, checkSchemaGrammar } from "./grammar-bounds.ts";
import { checkSamplingLimits, limitError } from "./sampling-limits.ts";
import type { Limits } from "./limits.ts";
import { ChatCompletionRequestObject, withSglangDefaults } from "./openai-schema.ts";
import { fastMessages } from "./message-fast-path.ts";
import { PresentKeysReader } from "./present-keys.ts";
import { hasLoneSurrogate } from "../util/unicode.ts";
import { closingQuote, parseRecordingLiterals, type JsonLiteral } from "../util/json-scan.ts";
import { SplitText } from "../util/split-text.ts";
import type { ChatCompletionRequest, ContentPart } from "./openai-schema.ts";

type PathKey = string | number;

/** `["messages", 2, "content"]` → `messages[2].content`. */
export function formatParam(path: readonly PropertyKey[]): string | null {
  let out = "";
  for (const k of path) {
    if (typeof k === "number") out += `[${k}]`;
    else out += out === "" ? String(k) : `.${String(k)}`;
  }
  return out === "" ? null : out;
}

/**
 * Fields SGLang honours but this router refuses: they would either bypass the router's own
 * control (request ids, cache namespaces, DP pinning, sessions), run client code on the worker
 * (custom logit processors), or ask for output the translation does not produce (hidden states,
 * token ids, meta_info).
 */
const UNSUPPORTED_FIELDS: Readonly<Record<string, string>> = {
  cache_salt: "the router sets the cache namespace itself (per tenant, KVEDGE_KV_SHARING)",
  extra_key: "the router sets the cache namespace itself (per tenant, KVEDGE_KV_SHARING)",
  lora_path: 'choose an adapter with model "<pool>:<adapter>" (KVEDGE_MODELS loraAdapters)',
  custom_logit_processor: "custom logit processors are not accepted",
  custom_params: "custom logit processor parameters are not accepted",
  session_id: "sessions are not supported",
  session_params: "sessions are not supported",
  input_ids: "pre-tokenized prompts are not supported; send messages",
  rid: "request ids are assigned by the router",
  bootstrap_host: "PD disaggregation fields are not accepted",
  bootstrap_port: "PD disaggregation fields are not accepted",
  bootstrap_room: "PD disaggregation fields are not accepted",
  routed_dp_rank: "DP rank pinning is not accepted",
  data_parallel_rank: "DP rank pinning is not accepted",
  disagg_prefill_dp_rank: "PD disaggregation fields are not accepted",
  return_hidden_states: "hidden states are not returned",
  return_routed_experts: "routed experts are not returned",
  return_cached_tokens_details: "cached-token details are not returned (usage carries cached_tokens)",
  return_prompt_token_ids: "prompt token ids are not returned",
  return_token_ids: "token ids are not returned",
  return_meta_info: "meta_info is not returned",
  images_config: "images_config is not supported",
  max_dynamic_patch: "dynamic patch controls are not supported",
  min_dynamic_patch: "dynamic patch controls are not supported",
  use_audio_in_video: "audio in video is not supported",
  ngram_corpus_id: "n-gram corpora are not supported",
};

function unsupported(param: string, why: string): InvalidRequestError {
  return new InvalidRequestError(`'${param}' is not supported by this endpoint: ${why}.`, param, "unsupported_parameter");
}

const NON_ASCII = /[^\x00-\x7f]/;

/** UTF-8 byte length of a JS string (lone surrogates count as the 3 bytes of U+FFFD). */
export function utf8ByteLength(s: string): number {
  // Bodies are mostly ASCII (JSON syntax, base64 media): a native scan settles those at once.
  if (!NON_ASCII.test(s)) return s.length;
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) n += 1;
    else if (c < 0x800) n += 2;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        n += 4;
        i++;
      } else n += 3;
    } else n += 3;
  }
  return n;
}

/** JSON escapes can make text up to 6× its content (`\u00e9`): the pre-parse bound allows for it. */
const MAX_ESCAPE_FACTOR = 6;
const SYNTAX_SLACK_CHARS = 65_536;

function isJsonSpace(c: number): boolean {
  return c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;
}

/**
 * Whether the `"` at `open` opens the value of a `"url"` member: `"url"`, optional whitespace, `:`,
 * optional whitespace, then `open`. Where a media data URL can be (`image_url.url`, `video_url.url`,
 * `audio_url.url`). A quote inside a string is escaped, so it is preceded by `\`, not `:`; and a
 * `"url"` preceded by `\` is the tail of a longer string, not a key.
 */
function opensUrlValue(text: string, open: number): boolean {
  let k = open - 1;
  while (k >= 0 && isJsonSpace(text.charCodeAt(k))) k--;
  if (k < 0 || text.charCodeAt(k) !== 0x3a) return false;
  k--;
  while (k >= 0 && isJsonSpace(text.charCodeAt(k))) k--;
  return k >= 4 && text.startsWith('"url"', k - 4) && text.charCodeAt(k - 5) !== 0x5c;
}

/**
 * Characters of the JSON text outside inline media: the first `maxItems` strings that begin with
 * `data:` and are the value of a `"url"` member (data URLs of image/video/audio parts, bounded by
 * the body cap only). Found with native indexOf jumps: a body of megabytes of tool schema is
 * refused from this before it is parsed or even scanned character by character. A `"data:` string
 * anywhere else (another key, an unknown field, a tool schema), or past `maxItems` (more media
 * than the request may hold), counts in full. A key written with escapes (`"\u0075rl"`) is not
 * recognised: its data URL counts too (the count only errs towards refusing). Linear: every `"data:`
 * is looked at once, and the whitespace before it once.
 */
function charsOutsideMediaDataUrls(text: string, maxItems: number): number {
  return text.length - mediaDataUrls(text, 0, text.length, maxItems).chars;
}

/**
 * The media data URLs charsOutsideMediaDataUrls leaves out, among those opening in [from, to): at
 * most `maxItems`, their characters (quotes included); `lengths`, when given, gets each one's.
 */
function mediaDataUrls(text: string, from: number, to: number, maxItems: number, lengths?: number[]): { chars: number; items: number } {
  let chars = 0;
  let items = 0;
  let i = text.indexOf('"data:', from);
  while (i !== -1 && i < to && items < maxItems) {
    if (!opensUrlValue(text, i)) {
      i = text.indexOf('"data:', i + 1);
      continue;
    }
    const j = closingQuote(text, i);
    if (j === -1) break;
    chars += j - i + 1;
    lengths?.push(j - i + 1);
    items++;
    i = text.indexOf('"data:', j + 1);
  }
  return { chars, items };
}

/** What scanJsonStructure found: the first limit passed (or null) and the values counted so far. */
export interface JsonStructure {
  over: "depth" | "values" | null;
  values: number;
}

/**
 * One pass over a JSON text before JSON.parse, ignoring everything inside strings (skipped with
 * native indexOf; media data URLs make up most large bodies): the bracket nesting depth, and the
 * number of JSON values. In valid JSON every value is the root, the first element or member of a
 * non-empty array or object, or follows a `,`; so values = 1 + commas + non-empty containers, an
 * exact count that needs no tokenizing. Stops at the first limit passed, so a body of 10^7 nested
 * arrays or of 4 million `{}` costs no more than the limits to refuse, and is never materialised.
 * On invalid JSON the answer is approximate; JSON.parse then reports the syntax error.
 */
export function scanJsonStructure(text: string, maxDepth: number, maxValues: number): JsonStructure {
  const { over, values } = scanStructure(text, 0, text.length, maxDepth, maxValues);
  return { over, values };
}

/** scanJsonStructure over text[start, end), also answering the deepest nesting seen. */
function scanStructure(text: string, start: number, end: number, maxDepth: number, maxValues: number): JsonStructure & { depth: number } {
  let depth = 0;
  let deepest = 0;
  let values = 1;
  for (let i = start; i < end; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      const j = closingQuote(text, i);
      if (j === -1) break; // unterminated: JSON.parse reports it
      i = j;
    } else if (c === 0x5b || c === 0x7b) {
      if (++depth > maxDepth) return { over: "depth", values, depth };
      if (depth > deepest) deepest = depth;
      let k = i + 1;
      while (k < end && isJsonSpace(text.charCodeAt(k))) k++;
      const d = text.charCodeAt(k);
      if (d !== 0x5d && d !== 0x7d && ++values > maxValues) return { over: "values", values, depth: deepest };
      i = k - 1;
    } else if (c === 0x5d || c === 0x7d) depth--;
    else if (c === 0x2c && ++values > maxValues) return { over: "values", values, depth: deepest };
  }
  return { over: null, values, depth: deepest };
}

/**
 * A JSON body for a route with its own schema (completions, responses): bounded by
 * scanJsonStructure before JSON.parse, then checked by `schema`; the first issue names the param.
 */
export function parseSchemaBody<S extends z.ZodType>(text: string, limits: Limits, schema: S): z.output<S> {
  const structure = scanJsonStructure(text, limits.maxJsonDepth, limits.maxJsonValues);
  if (structure.over) throw new InvalidRequestError(`JSON body exceeds the ${structure.over === "depth" ? `nesting limit (${limits.maxJsonDepth})` : `value limit (${limits.maxJsonValues})`}.`, null, "invalid_json");
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new InvalidRequestError("Request body is not valid JSON.", null, "invalid_json");
  }
  const parsed = schema.safeParse(body);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const param = formatParam(issue.path);
    throw new InvalidRequestError(`Invalid ${param ?? "request"}: ${issue.message}`, param);
  }
  return parsed.data;
}

/**
 * Characters of `v` as compact JSON, counted without serialising it and stopping as soon as the
 * count passes `budget` (so a huge schema costs no more than the budget to measure).
 */
export function jsonChars(v: unknown, budget: number): number {
  let n = 0;
  const stack: unknown[] = [v];
  while (stack.length > 0 && n <= budget) {
    const x = stack.pop();
    if (typeof x === "string") n += x.length + 2;
    else if (typeof x === "number" || typeof x === "boolean") n += String(x).length;
    else if (x === null || x === undefined) n += 4;
    else if (Array.isArray(x)) {
      n += 2 + Math.max(0, x.length - 1);
      if (n > budget) break;
      for (const e of x) stack.push(e);
    } else if (typeof x === "object") {
      const keys = Object.keys(x);
      n += 2 + Math.max(0, keys.length - 1);
      if (n > budget) break;
      for (const k of keys) {
        n += k.length + 3;
        stack.push((x as Record<string, unknown>)[k]);
      }
    }
  }
  return n;
}


/** A container on checkStrings' path: its keys (null for an array) and the next child to look at. */
interface WalkFrame {
  node: object;
  keys: string[] | null;
  /** Children [0, scanned) were checked; then containers among them are entered from the last down. */
  scanned: number;
  next: number;
}

function walkFrame(node: object): WalkFrame {
  const keys = Array.isArray(node) ? null : Object.keys(node);
  const n = keys === null ? (node as unknown[]).length : keys.length;
  return { node, keys, scanned: 0, next: n };
}

/** The path to the child being looked at in the innermost frame (`child`: that frame's index). */
function walkPath(frames: readonly WalkFrame[], child: number): PathKey[] {
  return frames.map((f, d) => {
    const i = d === frames.length - 1 ? child : f.next;
    return f.keys === null ? i : f.keys[i]!;
  });
}

/**
 * Walks the parsed body once (iteratively): refuses lone surrogates (they cannot be encoded as
 * UTF-8 for the worker) and `__proto__` keys (no legitimate use; prototype games downstream).
 * Depth-first with one frame per open container (at most maxJsonDepth live): no path is kept per
 * value; the path is rebuilt from the frames only for the error. Order as a stack walk: a
 * container's own keys and strings first, then its child containers from the last to the first.
 */
export function checkStrings(root: unknown): void {
  if (typeof root !== "object" || root === null) return;
  const frames: WalkFrame[] = [walkFrame(root)];
  while (frames.length > 0) {
    const f = frames[frames.length - 1]!;
    const record = f.node as Record<string, unknown>;
    const count = f.keys === null ? (f.node as unknown[]).length : f.keys.length;
    if (f.scanned < count) {
      const i = f.scanned++;
      const key = f.keys === null ? i : f.keys[i]!;
      if (typeof key === "string") {
        if (key === "__proto__") {
          throw new InvalidRequestError("The key '__proto__' is not allowed.", formatParam(walkPath(frames, i)));
        }
        if (hasLoneSurrogate(key)) {
          throw new InvalidRequestError("Object keys must be valid Unicode (lone surrogate found).", formatParam(walkPath(frames, i).slice(0, -1)));
        }
      }
      const v: unknown = record[key];
      if (typeof v === "string" && hasLoneSurrogate(v)) {
        throw new InvalidRequestError("Strings must be valid Unicode (lone surrogate found).", formatParam(walkPath(frames, i)));
      }
      continue;
    }
    // All children checked: enter the child containers, last first.
    let entered = false;
    while (f.next > 0) {
      const i = --f.next;
      const v: unknown = record[f.keys === null ? i : f.keys[i]!];
      if (typeof v === "object" && v !== null) {
        frames.push(walkFrame(v));
        entered = true;
        break;
      }
    }
    if (!entered) frames.pop();
  }
}

function isActive(v: unknown): boolean {
  return v !== undefined && v !== null && v !== false;
}

const UNSUPPORTED_ORDER: ReadonlyMap<string, number> = new Map(Object.keys(UNSUPPORTED_FIELDS).map((k, i) => [k, i]));

/**
 * Refuses the first field of UNSUPPORTED_FIELDS (in its order) the body sets. A body has a few
 * own keys (JSON.parse gives own keys only; none of these names is an Object.prototype member):
 * its keys are looked up in the list, not the list's in the body.
 */
function checkUnsupported(body: Record<string, unknown>): void {
  let first = -1;
  let key: string | null = null;
  for (const k in body) {
    const at = UNSUPPORTED_ORDER.get(k);
    if (at !== undefined && (first === -1 || at < first) && isActive(body[k])) {
      first = at;
      key = k;
    }
  }
  if (key !== null) throw unsupported(key, UNSUPPORTED_FIELDS[key]!);
}

// ---------------------------------------------------------------------------------------------
// zod issues → one helpful error

interface LocatedIssue {
  issue: z.core.$ZodIssue;
  path: PropertyKey[];
}

/** Descends into union branches and keeps the issue that got furthest into the input. */
function mostSpecific(issue: z.core.$ZodIssue, base: PropertyKey[]): LocatedIssue {
  const here = [...base, ...issue.path];
  if (issue.code === "invalid_union" && issue.errors.length > 0) {
    let best: LocatedIssue | null = null;
    for (const branch of issue.errors) {
      for (const sub of branch) {
        const cand = mostSpecific(sub, here);
        if (best === null || cand.path.length > best.path.length) best = cand;
      }
    }
    if (best !== null && best.path.length > here.length) return best;
    if (best !== null && issue.errors.every((b) => b.every((s) => s.code === "invalid_type"))) {
      const expected = issue.errors.flatMap((b) => b.map((s) => (s.code === "invalid_type" ? s.expected : "?")));
      return {
        issue: { ...issue, message: `Invalid input: expected ${[...new Set(expected)].join(" or ")}` },
        path: here,
      };
    }
    if (best !== null) return best;
  }
  return { issue, path: here };
}

/** The client's error for a refused body: zod's first issue, at the most specific branch of a union. */
export function issueToError(issues: readonly z.core.$ZodIssue[]): InvalidRequestError {
  const first = issues[0];
  if (first === undefined) return new InvalidRequestError("Invalid request body.");
  const { issue, path } = mostSpecific(first, []);
  const param = formatParam(path);
  return new InvalidRequestError(param === null ? issue.message : `Invalid '${param}': ${issue.message}`, param);
}

// ---------------------------------------------------------------------------------------------
// Semantics and limits

/** Request-level rules SGLang enforces after parsing (serving_chat `_validate_request`, SamplingParams.verify). */
/** OpenAI's rule for function names; a call the model writes can only be matched to a name it can spell back. */
const TOOL_NAME = /^[A-Za-z0-9_-]{1,64}$/;

function checkSemantics(req: ChatCompletionRequest): void {
  const seen = new Set<string>();
  for (const [i, t] of (req.tools ?? []).entries()) {
    const name = t.function.name;
    if (!TOOL_NAME.test(name)) {
      throw new InvalidRequestError(`Tool name ${JSON.stringify(name.slice(0, 80))} must be 1-64 letters, digits, '_' or '-'.`, `tools[${i}].function.name`);
    }
    // Two tools of one name: a call naming it could mean either.
    if (seen.has(name)) throw new InvalidRequestError(`Tool name '${name}' appears more than once.`, `tools[${i}].function.name`);
    seen.add(name);
  }
  const tc = req.tool_choice;
  if (tc === "required" || typeof tc === "object") {
    const hasTools = req.tools !== undefined && req.tools.length > 0;
    if (!hasTools) {
      throw new InvalidRequestError("Tools cannot be empty if tool_choice is 'required' or names a tool.", "tool_choice");
    }
    if (typeof tc === "object" && !req.tools!.some((t) => t.function.name === tc.function.name)) {
      throw new InvalidRequestError(`Tool '${tc.function.name}' not found in tools list.`, "tool_choice.function.name");
    }
  }
  const rf = req.response_format;
  if (rf?.type === "json_schema" && rf.json_schema?.schema === undefined && rf.schema === undefined) {
    throw new InvalidRequestError("response_format json_schema requires a schema.", "response_format.json_schema.schema");
  }
  const constraints: string[] = [];
  if (rf !== undefined && rf.type !== "text") constraints.push("response_format");
  if (req.regex !== undefined) constraints.push("regex");
  if (req.ebnf !== undefined) constraints.push("ebnf");
  if (constraints.length > 1) {
    throw new InvalidRequestError(
      `Only one output constraint may be set (got ${constraints.join(", ")}).`,
      constraints[1] ?? null,
    );
  }
  const maxNew = req.max_completion_tokens ?? req.max_tokens;
  if (maxNew !== undefined && req.min_tokens > maxNew) {
    throw new InvalidRequestError(`min_tokens (${req.min_tokens}) exceeds the maximum (${maxNew}).`, "min_tokens");
  }
}

function partChars(p: ContentPart): number {
  switch (p.type) {
    case "text":
      return p.text.length;
    case "thinking":
    case "reasoning":
      return (p.thinking ?? p.text ?? "").length;
    default:
      return 0;
  }
}

function mediaUrlOf(p: ContentPart): { url: string; key: string } | null {
  switch (p.type) {
    case "image_url":
      return { url: p.image_url.url, key: "image_url" };
    case "video_url":
      return { url: p.video_url.url, key: "video_url" };
    case "audio_url":
      return { url: p.audio_url.url, key: "audio_url" };
    default:
      return null;
  }
}

type ChatMessage = ChatCompletionRequest["messages"][number];

/** What checkLimits counts of one message. */
interface MessageSize {
  /** Text characters (content, reasoning, tool calls; jsonChars stops past `budget`). */
  chars: number;
  parts: number;
  media: number;
  /** The longest media URL that is not a data: URL. */
  urlChars: number;
  /** The first part that passes the media count or the URL length (measureMessage's `caps`), if any. */
  overPart: PartOver | null;
}

/** A content part over a media limit: `urlKey` names the part's URL member when the URL is too long, null when the item is one too many. */
interface PartOver {
  index: number;
  urlKey: string | null;
}

/** What measureMessage checks while it walks: `maxMessageChars` also bounds its count of tool-call JSON. */
type MeasureCaps = Pick<Limits, "maxMessageChars" | "maxMediaItems" | "maxUrlChars">;

const NO_CAPS: MeasureCaps = { maxMessageChars: Infinity, maxMediaItems: Infinity, maxUrlChars: Infinity };

/** `mediaBefore`: media items of earlier messages, which count against caps.maxMediaItems. */
function measureMessage(m: ChatMessage, caps: MeasureCaps, mediaBefore = 0): MessageSize {
  const size: MessageSize = { chars: 0, parts: 0, media: 0, urlChars: 0, overPart: null };
  if (typeof m.content === "string") size.chars += m.content.length;
  else if (Array.isArray(m.content)) {
    size.parts = m.content.length;
    for (const [j, p] of m.content.entries()) {
      size.chars += partChars(p);
      const ref = mediaUrlOf(p);
      if (ref !== null || p.type === "input_audio") {
        size.media++;
        if (mediaBefore + size.media > caps.maxMediaItems) size.overPart ??= { index: j, urlKey: null };
      }
      if (ref !== null && !/^data:/i.test(ref.url)) {
        size.urlChars = Math.max(size.urlChars, ref.url.length);
        if (ref.url.length > caps.maxUrlChars) size.overPart ??= { index: j, urlKey: ref.key };
      }
    }
  }
  if (m.role !== "user") {
    size.chars += m.reasoning_content?.length ?? 0;
    for (const call of m.tool_calls ?? []) {
      const args: unknown = call.function.arguments;
      size.chars += call.function.name?.length ?? 0;
      size.chars += typeof args === "string" ? args.length : jsonChars(args, caps.maxMessageChars);
    }
  }
  return size;
}

function partLimitError(i: number, over: PartOver, limits: Limits): InvalidRequestError {
  return over.urlKey === null
    ? limitError(`Too many media items (limit ${limits.maxMediaItems}).`, `messages[${i}].content[${over.index}]`)
    : limitError(`Media URLs are limited to ${limits.maxUrlChars} characters.`, `messages[${i}].content[${over.index}].${over.urlKey}.url`);
}

function checkLimits(req: ChatCompletionRequest, limits: Limits, base: MessagesTally | null = null): void {
  checkSamplingLimits(req, limits);
  if (req.messages.length > limits.maxMessages) {
    throw limitError(`Too many messages: ${req.messages.length} (limit ${limits.maxMessages}).`, "messages");
  }
  if (req.tools !== undefined && req.tools.length > limits.maxTools) {
    throw limitError(`At most ${limits.maxTools} tools are allowed.`, "tools");
  }

  // Leading messages reused from an earlier request (`base`) count with the totals they had then.
  if (base !== null && (base.maxParts > limits.maxContentParts || base.media > limits.maxMediaItems || base.maxUrlChars > limits.maxUrlChars || base.maxChars > limits.maxMessageChars)) {
    throw limitError("Earlier messages are over this endpoint's limits.", "messages");
  }
  let total = base?.chars ?? 0;
  let media = base?.media ?? 0;
  for (let i = base?.messages ?? 0; i < req.messages.length; i++) {
    const m = req.messages[i]!;
    const size = measureMessage(m, limits, media);
    if (size.parts > limits.maxContentParts) {
      throw limitError(`Too many content parts: ${size.parts} (limit ${limits.maxContentParts}).`, `messages[${i}].content`);
    }
    if (size.overPart !== null) throw partLimitError(i, size.overPart, limits);
    media += size.media;
    if (size.chars > limits.maxMessageChars) {
      throw limitError(`Message text is ${size.chars} characters (limit ${limits.maxMessageChars}).`, `messages[${i}].content`);
    }
    total += size.chars;
  }
  if (total > limits.maxTotalChars) {
    throw limitError(`Request text is ${total} characters (limit ${limits.maxTotalChars}).`, "messages");
  }
  // Everything else the template renders or the worker compiles counts against the same budget.
  const budget = () => limits.maxTotalChars - total;
  const extra = (param: string, chars: number) => {
    total += chars;
    if (total > limits.maxTotalChars) throw limitError(`Request text including ${param} is over ${limits.maxTotalChars} characters.`, param);
  };
  (req.tools ?? []).forEach((t, i) => {
    extra(`tools[${i}].function`, t.function.name.length + (t.function.description?.length ?? 0) + (t.function.parameters === undefined ? 0 : jsonChars(t.function.parameters, budget())));
  });
  if (req.chat_template_kwargs !== undefined) extra("chat_template_kwargs", jsonChars(req.chat_template_kwargs, budget()));
  if (req.response_format !== undefined) extra("response_format", jsonChars(req.response_format, budget()));
  if (req.regex !== undefined) extra("regex", req.regex.length);
  if (req.ebnf !== undefined) extra("ebnf", req.ebnf.length);
  checkGrammars(req, limits);
}

/** Complexity bounds of every output constraint the worker will compile (grammar-bounds.ts). */
function checkGrammars(req: ChatCompletionRequest, limits: Limits): void {
  if (req.regex !== undefined) checkPatternGrammar(req.regex, "regex", "regex", limits);
  if (req.ebnf !== undefined) checkPatternGrammar(req.ebnf, "ebnf", "ebnf", limits);
  const rf = req.response_format;
  if (rf?.type === "json_schema") {
    const inner = rf.json_schema?.schema !== undefined;
    checkSchemaGrammar(inner ? rf.json_schema!.schema : rf.schema, inner ? "response_format.json_schema.schema" : "response_format.schema", limits);
  } else if (rf?.type === "structural_tag") checkSchemaGrammar(rf, "response_format", limits);
  // Tool schemas become a json_schema or structural_tag constraint when a call is forced or a tool is strict.
  const forced = req.tool_choice === "required" || typeof req.tool_choice === "object";
  const compiled: unknown[] = [];
  (req.tools ?? []).forEach((t, i) => {
    if ((forced || t.function.strict) && t.function.parameters !== undefined) {
      checkSchemaGrammar(t.function.parameters, `tools[${i}].function.parameters`, limits);
      compiled.push(t.function.parameters);
    }
  });
  // The worker compiles them as one constraint (a structural tag or a schema over every tool): their sum is bounded too.
  if (compiled.length > 1) checkSchemaGrammar(compiled, "tools", limits);
}

// ---------------------------------------------------------------------------------------------

/** Message text members whose source text parseChatRequest can keep (`opts.literals`). */
const LITERAL_KEYS: ReadonlySet<string> = new Set(["content", "text"]);

/**
 * What the whole-body limits count of some consecutive messages of an accepted body, so a later
 * body that starts with the same message text can be checked without reading it again.
 */
export interface MessagesTally {
  messages: number;
  /** scanJsonStructure's value count of the messages' text, one separating comma each. */
  values: number;
  /** Deepest nesting inside one message (its own braces: 1). */
  depth: number;
  /** Characters of each media data URL charsOutsideMediaDataUrls leaves out, in order (the first MAX_TALLIED_DATA_URLS). */
  dataUrls: readonly number[];
  /** More data URLs than dataUrls lists (a limit above MAX_TALLIED_DATA_URLS items then needs the whole body). */
  dataUrlsCut: boolean;
  /** checkLimits' counts: text characters in total and in the longest message, media items, the most content parts, the longest non-data URL. */
  chars: number;
  maxChars: number;
  media: number;
  maxParts: number;
  maxUrlChars: number;
}

/** Data URLs a tally lists: only the first maxMediaItems of a body are ever left out of the count (the tally's size stays bounded). */
const MAX_TALLIED_DATA_URLS = 1024;

/** The tally of `messages` (validated) whose JSON text is body[spans[i][0], spans[i][1]). */
export function tallyMessages(body: string | SplitText, spans: readonly (readonly [number, number])[], messages: readonly ChatMessage[]): MessagesTally {
  const dataUrls: number[] = [];
  const t = { messages: messages.length, values: 0, depth: 0, dataUrls, dataUrlsCut: false, chars: 0, maxChars: 0, media: 0, maxParts: 0, maxUrlChars: 0 };
  const whole = typeof body === "string" ? SplitText.of(body) : body;
  messages.forEach((m, i) => {
    // Each message is read in the piece holding it (a split body is never joined: split-text.ts).
    const { text, at } = whole.region(spans[i]![0], spans[i]![1]);
    const start = spans[i]![0] - at;
    const end = spans[i]![1] - at;
    const shape = scanStructure(text, start, end, Infinity, Infinity);
    t.values += shape.values;
    t.depth = Math.max(t.depth, shape.depth);
    if (!t.dataUrlsCut) {
      mediaDataUrls(text, start, end, MAX_TALLIED_DATA_URLS + 1 - dataUrls.length, dataUrls);
      if (dataUrls.length > MAX_TALLIED_DATA_URLS) {
        dataUrls.pop();
        t.dataUrlsCut = true;
      }
    }
    const size = measureMessage(m, NO_CAPS);
    t.chars += size.chars;
    t.maxChars = Math.max(t.maxChars, size.chars);
    t.media += size.media;
    t.maxParts = Math.max(t.maxParts, size.parts);
    t.maxUrlChars = Math.max(t.maxUrlChars, size.urlChars);
  });
  return t;
}

/**
 * The tally of consecutive messages' tallies, in order (the first tally itself when there is one):
 * what joining them two by two gives, in one pass. A turn chain's hit joins one tally per held
 * entry on every turn, so no object is made per tally; the data URL counts are copied only where
 * a later tally adds some, and no longer once MAX_TALLIED_DATA_URLS are listed.
 */
export function joinedTallies(tallies: readonly MessagesTally[]): MessagesTally {
  const first = tallies[0];
  if (first === undefined) throw new RangeError("no tallies to join");
  if (tallies.length === 1) return first;
  const t = { ...first };
  let dataUrls: number[] | null = null;
  for (let i = 1; i < tallies.length; i++) {
    const b = tallies[i]!;
    t.messages += b.messages;
    t.values += b.values;
    t.depth = Math.max(t.depth, b.depth);
    t.chars += b.chars;
    t.maxChars = Math.max(t.maxChars, b.maxChars);
    t.media += b.media;
    t.maxParts = Math.max(t.maxParts, b.maxParts);
    t.maxUrlChars = Math.max(t.maxUrlChars, b.maxUrlChars);
    // Once the list is cut, later URLs are not listed and it stays cut.
    if (t.dataUrlsCut) continue;
    if (b.dataUrls.length === 0) {
      t.dataUrlsCut = b.dataUrlsCut;
      continue;
    }
    dataUrls ??= [...t.dataUrls];
    for (const n of b.dataUrls) dataUrls.push(n);
    t.dataUrlsCut = dataUrls.length > MAX_TALLIED_DATA_URLS || b.dataUrlsCut;
    if (dataUrls.length > MAX_TALLIED_DATA_URLS) dataUrls.length = MAX_TALLIED_DATA_URLS;
  }
  if (dataUrls !== null) t.dataUrls = dataUrls;
  return t;
}

/** A body's leading messages as an earlier accepted body held them (the turn chain keeps them). */
export interface ReusedMessages {
  /** The validated messages: the body's first `tally.messages`. */
  messages: readonly ChatMessage[];
  tally: MessagesTally;
  /** Their text in the body: from the first one's start to the next message's start (the separators included). */
  cut: readonly [number, number];
}

/** Work one parse did (tests and the bench read it). */
export interface ParseWork {
  /** Characters scanned, parsed and validated (the whole body, or the body less the reused messages). */
  parsedChars: number;
  /** Messages checked by the schema and the limits. */
  validatedMessages: number;
}

/** The request's fields read by the fields it has (present-keys.ts): the schema's output and issues. */
const CHAT_REQUEST_FIELDS = new PresentKeysReader(ChatCompletionRequestObject);
/** The same, less `messages`: read so when message-fast-path.ts gave zod's output for them. */
const FIELDS_BESIDE_MESSAGES_OBJECT = ChatCompletionRequestObject.omit({ messages: true });
const FIELDS_BESIDE_MESSAGES = new PresentKeysReader(FIELDS_BESIDE_MESSAGES_OBJECT);

/**
 * ChatCompletionRequestObject's safeParse of `body`. Messages the fast path accepts are zod's
 * output with no issue, and a strip object's fields parse independently (present-keys.ts), so
 * zod's answer is those messages first (`messages` leads the shape) and the other fields as the
 * schema less `messages` reads them, issues included.
 */
function readChatFields(body: Record<string, unknown>): z.ZodSafeParseResult<z.output<typeof ChatCompletionRequestObject>> {
  const messages = fastMessages(body.messages);
  // A set of fields the reader holds no pick for (past its bound) is parsed whole.
  if (messages === null) return CHAT_REQUEST_FIELDS.read(body) ?? ChatCompletionRequestObject.safeParse(body);
  const rest = FIELDS_BESIDE_MESSAGES.read(body) ?? FIELDS_BESIDE_MESSAGES_OBJECT.safeParse(body);
  if (!rest.success) return rest as z.ZodSafeParseResult<z.output<typeof ChatCompletionRequestObject>>;
  return { success: true, data: { messages, ...rest.data } };
}

/** ChatCompletionRequestSchema's output for a parsed JSON object, or its first issue as the client's error. */
function readChatRequest(body: Record<string, unknown>): ChatCompletionRequest {
  const parsed = readChatFields(body);
  if (!parsed.success) throw issueToError(parsed.error.issues);
  return withSglangDefaults(parsed.data);
}

/** JSON text that passed the pre-parse bounds → the validated request (`base`: leading messages reused, not in `text`). */
function parseValidated(text: string, limits: Limits, literals: JsonLiteral[] | undefined, base: ReusedMessages | null, work: ParseWork | undefined): ChatCompletionRequest {
  let body: unknown;
  try {
    body = literals ? parseRecordingLiterals(text, LITERAL_KEYS, literals) : JSON.parse(text);
  } catch (e) {
    const detail = e instanceof Error ? e.message.slice(0, 200) : "parse error";
    throw new InvalidRequestError(`Request body is not valid JSON: ${detail}`, null, "invalid_json");
  }
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    throw new InvalidRequestError("Request body must be a JSON object.", null, "invalid_json");
  }
  checkStrings(body);
  checkUnsupported(body as Record<string, unknown>);
  const req = readChatRequest(body as Record<string, unknown>);
  if (work) {
    work.parsedChars += text.length;
    work.validatedMessages += req.messages.length;
  }
  if (base !== null) req.messages = [...base.messages, ...req.messages];
  checkSemantics(req);
  checkLimits(req, limits, base?.tally ?? null);
  return req;
}

function outsideMediaOver(outside: number, limits: Limits): boolean {
  return outside > MAX_ESCAPE_FACTOR * limits.maxTotalChars + SYNTAX_SLACK_CHARS;
}

function checkOutsideMedia(outside: number, limits: Limits): void {
  if (outsideMediaOver(outside, limits)) {
    throw limitError(`Request text (outside data: URLs) is ${outside} characters: far over the limit of ${limits.maxTotalChars}.`, null);
  }
}

/**
 * The body with `reuse`'s messages cut out, checked and parsed; the whole-body limits hold with
 * the reused messages' tally added (values and media data URLs in document order, depth as
 * nested at messages[i]). Null when anything is refused or unexpected: the whole body then gives
 * the verdict, so an error is always the one the whole body gets.
 */
function parseReusing(body: SplitText, limits: Limits, literals: JsonLiteral[] | undefined, reuse: ReusedMessages, work: ParseWork | undefined): ChatCompletionRequest | null {
  const [cutStart, cutEnd] = reuse.cut;
  const t = reuse.tally;
  if (t.messages !== reuse.messages.length || cutStart <= 0 || cutEnd <= cutStart || cutEnd > body.length) return null;
  // Read from the pieces around the cut: a split body's held text is never joined (split-text.ts).
  const text = body.slice(0, cutStart) + body.slice(cutEnd);
  const before = mediaDataUrls(text, 0, cutStart, limits.maxMediaItems);
  let skipped = before.chars;
  let items = before.items;
  for (const n of t.dataUrls) {
    if (items >= limits.maxMediaItems) break;
    skipped += n;
    items++;
  }
  if (items < limits.maxMediaItems && t.dataUrlsCut) return null;
  skipped += mediaDataUrls(text, cutStart, text.length, limits.maxMediaItems - items).chars;
  if (outsideMediaOver(body.length - skipped, limits)) return null;
  // Messages are elements of a top-level member: their own nesting starts at depth 3.
  if (2 + t.depth > limits.maxJsonDepth || t.values >= limits.maxJsonValues) return null;
  if (scanStructure(text, 0, text.length, limits.maxJsonDepth, limits.maxJsonValues - t.values).over !== null) return null;
  const mark = literals?.length ?? 0;
  const done = work ? { ...work } : null;
  try {
    return parseValidated(text, limits, literals, reuse, work);
  } catch {
    if (literals) literals.length = mark;
    if (work && done) Object.assign(work, done);
    return null;
  }
}

/**
 * Validates a chat-completions request body. Throws PayloadTooLargeError (413) when the body
 * exceeds `limits.maxBodyBytes`, InvalidRequestError (400) for anything else wrong. With
 * `opts.literals`, long message texts whose source is already canonical JSON are recorded there
 * (value → escaped text; parseRecordingLiterals), so the `/generate` body need not escape them again.
 * With `opts.reuse`, the body's leading messages are taken as an earlier accepted body held them
 * and only the rest of the body is read (the verdict is the whole body's). A SplitText body is
 * read in its pieces as far as the reuse goes; anything else reads it whole (joined).
 */
export function parseChatRequest(
  bodyText: string | SplitText,
  limits: Limits = DEFAULT_LIMITS,
  opts: { sizeChecked?: boolean; literals?: JsonLiteral[]; reuse?: ReusedMessages | null; work?: ParseWork } = {},
): ChatCompletionRequest {
  try {
    if (typeof bodyText !== "string" && !(bodyText instanceof SplitText)) throw new InvalidRequestError("Request body must be text.");
    const body = typeof bodyText === "string" ? SplitText.of(bodyText) : bodyText;
    // UTF-8 never takes fewer bytes than UTF-16 code units, so the cheap test goes first. Text from
    // readBodyText was capped in bytes while it was read (`sizeChecked`): no second scan.
    if (body.length > limits.maxBodyBytes || (!opts.sizeChecked && utf8ByteLength(body.joined) > limits.maxBodyBytes)) {
      throw new PayloadTooLargeError(`Request body exceeds ${limits.maxBodyBytes} bytes.`);
    }
    if (body.blank()) throw new InvalidRequestError("Request body is empty; expected a JSON object.", null, "invalid_json");
    if (opts.reuse) {
      const req = parseReusing(body, limits, opts.literals, opts.reuse, opts.work);
      if (req !== null) return req;
    }
    // The whole body's verdict: read as one string.
    bodyText = body.joined;
    checkOutsideMedia(charsOutsideMediaDataUrls(bodyText, limits.maxMediaItems), limits);
    const structure = scanJsonStructure(bodyText, limits.maxJsonDepth, limits.maxJsonValues);
    if (structure.over === "depth") {
      throw new InvalidRequestError(`JSON body is nested deeper than ${limits.maxJsonDepth} levels.`, null, "invalid_json");
    }
    if (structure.over === "values") {
      throw limitError(`JSON body holds more than ${limits.maxJsonValues} values (objects, arrays, strings, numbers, …; KVEDGE_LIMITS.maxJsonValues).`, null);
    }
    return parseValidated(bodyText, limits, opts.literals, null, opts.work);
  } catch (e) {
    if (e instanceof KvedgeError) throw e;
    // A bug or an engine limit (e.g. stack overflow) on hostile input: still the client's request.
    throw new InvalidRequestError("Invalid request body.");
  }
}

/**
 * A body's bytes as text; invalid UTF-8 → 400. A leading byte order mark is stripped only at the
 * body's start: `midBody` bytes (the rest after a known prefix) keep a leading U+FEFF as text.
 */
export function decodeBodyBytes(bytes: Uint8Array, midBody = false): string {
  return decodeUtf8(new TextDecoder("utf-8", { fatal: true, ignoreBOM: midBody }), bytes, true);
}

function decodeUtf8(decoder: TextDecoder, bytes?: Uint8Array, whole = false): string {
  try {
    return bytes === undefined ? decoder.decode() : decoder.decode(bytes, { stream: !whole });
  } catch {
    throw new InvalidRequestError("Request body is not valid UTF-8.", null, "invalid_json");
  }
}

/** What readBodyText needs of a Request. */
export interface RequestBodySource {
  readonly body: ReadableStream<Uint8Array> | null;
  readonly headers: Headers;
  arrayBuffer(): Promise<ArrayBuffer>;
}

/**
 * The body's declared length when the runtime frames the body by it: a Content-Length of digits
 * and no Transfer-Encoding (with both, chunked framing wins in HTTP/1.1 and the declared length
 * says nothing about what arrives). Otherwise null.
 */
function framedLength(headers: Headers): number | null {
  const declared = headers.get("content-length");
  if (declared === null || !/^\d{1,15}$/.test(declared) || headers.has("transfer-encoding")) return null;
  return Number(declared);
}

/**
 * Reads a request body as UTF-8 text with a byte cap. Invalid UTF-8 → 400; too large → 413.
 * - Framed by a Content-Length within the cap: read by the runtime into one buffer and decoded
 *   once. The runtime's own read is ~1 ms cheaper at 136 kB than a JS reader loop in workerd (the
 *   framing already bounds it); a length that still differs from the declared one is refused.
 * - Otherwise (chunked): read chunk by chunk, stopping as soon as the cap is passed, so the body
 *   is never buffered beyond it.
 */
export async function readBodyText(request: RequestBodySource, limits: Pick<Limits, "maxBodyBytes"> = DEFAULT_LIMITS): Promise<string> {
  return (await readBody(request, limits, null)).text;
}

/** A body as readBody read it. */
export interface ReadBody {
  /** The text: `body.joined` (with a held prefix a rope, whose first read copies it whole). */
  text: string;
  /** The text in its parts: the held prefix's (head and gap) then the decoded rest; one piece when decoded whole. */
  body: SplitText;
  /** Its bytes, when read into one buffer (framed by a Content-Length); null when read in chunks. */
  bytes: Uint8Array | null;
  /** Leading bytes whose text came from `heldPrefix` instead of being decoded (0: decoded whole). */
  heldBytes: number;
}

/**
 * Text already known for a body's leading bytes (the turn chain's held bodies): its length in
 * bytes, which must end at a character's end, and exactly what decoding them gives, as `head` then
 * the `gap`'s pieces (SplitText); null when none.
 */
export type HeldPrefix = (bytes: Uint8Array) => { head: string; gap: readonly string[]; length: number } | null;

/**
 * readBodyText, also giving the bytes read. With `heldPrefix`, a framed body whose leading bytes
 * it knows is decoded only past them: the text is the known text then the rest's decoding, which
 * is what decoding it whole gives (UTF-8 decodes character by character, the prefix ends at a
 * character's end and a byte order mark is stripped only at the body's start, which a prefix
 * without one is never handed). Sizes are checked as readBodyText checks them.
 */
export async function readBody(request: RequestBodySource, limits: Pick<Limits, "maxBodyBytes">, heldPrefix: HeldPrefix | null): Promise<ReadBody> {
  const tooLarge = () => new PayloadTooLargeError(`Request body exceeds ${limits.maxBodyBytes} bytes.`);
  const framed = framedLength(request.headers);
  if (framed !== null && framed > limits.maxBodyBytes) throw tooLarge();
  if (request.body === null) return wholeRead("", null);
  if (framed !== null) {
    let bytes: ArrayBuffer;
    try {
      bytes = await request.arrayBuffer();
    } catch {
      throw new InvalidRequestError("Request body could not be read.");
    }
    if (bytes.byteLength > limits.maxBodyBytes) throw tooLarge();
    if (bytes.byteLength !== framed) throw new InvalidRequestError(`Request body is ${bytes.byteLength} bytes, not the ${framed} its Content-Length declares.`);
    const all = new Uint8Array(bytes);
    const held = heldPrefix?.(all) ?? null;
    if (held === null) return wholeRead(decodeBodyBytes(all), all);
    const body = new SplitText(held.head, held.gap, decodeBodyBytes(all.subarray(held.length), true));
    return { text: body.joined, body, bytes: all, heldBytes: held.length };
  }
  const reader = request.body.getReader();
  const decoder = new TextDecoder("utf-8", { fatal: true, ignoreBOM: false });
  let size = 0;
  let text = "";
  /** Invalid UTF-8 seen: the rest of the body (within the cap) is read and dropped, then refused. */
  let invalid: KvedgeError | null = null;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      size += value.byteLength;
      if (size > limits.maxBodyBytes) {
        await reader.cancel().catch(() => undefined);
        throw tooLarge();
      }
      if (invalid) continue;
      try {
        text += decodeUtf8(decoder, value);
      } catch (e) {
        invalid = e as KvedgeError;
        text = "";
      }
    }
    if (invalid) throw invalid;
    text += decodeUtf8(decoder);
  } catch (e) {
    await reader.cancel().catch(() => undefined);
    if (e instanceof KvedgeError) throw e;
    throw new InvalidRequestError("Request body could not be read.");
  } finally {
    reader.releaseLock();
  }
  return wholeRead(text, null);
}

function wholeRead(text: string, bytes: Uint8Array | null): ReadBody {
  return { text, body: SplitText.of(text), bytes, heldBytes: 0 };
}
