/**
 * A mirror of the chat request's `messages` schema (openai-schema.ts `z.array(MessageSchema).min(1)`)
 * for the commonest shapes only, because zod never compiles its fast path in workerd (no eval:
 * `allowsEval` is false) and its uncompiled parse of a message was most of a warm turn's schema
 * work. It may only ACCEPT: a list it answers is exactly the list zod gives (same keys in the
 * same order, same defaults); anything else (an unknown or null-valued key, an upper-case role,
 * another part type, a non-plain object) answers null and zod reads the list as before, so zod
 * stays the single source of truth, refusals and their issues included.
 * test/unit/api/message-fast-path.test.ts is its guard: a differential property test against zod
 * over valid, near-valid and hostile messages.
 *
 * Accepted: a message whose role is one of the schema's in lower case, with `content` a string,
 * or (any role) a list of `text` and `image_url` parts, or (not `user`) null; a non-user message
 * may also carry `tool_call_id`, `name` and `reasoning_content` as strings, and `tool_calls` (an
 * agent's step) as a list of calls. A text part has only `type` and `text`; an image part only
 * `type` and `image_url`, which has `url` (an accepted media URL) and optionally `detail` (one of
 * the schema's values). A call has `function` and optionally `id` (a string), `index` (a safe
 * integer) and `type` ("function"); its `function` has optionally `name` (a string) and
 * `arguments` (a string holding a JSON object: the object form is left to zod).
 */
import { GENERIC_ROLES, IMAGE_DETAIL_DEFAULT, IMAGE_DETAILS, IMAGE_MODALITY_DEFAULT, isJsonObjectText, MEDIA_URL, type ChatCompletionRequest } from "./openai-schema.ts";

type ChatMessage = ChatCompletionRequest["messages"][number];
type ToolCall = NonNullable<Extract<ChatMessage, { tool_calls?: unknown }>["tool_calls"]>[number];

const GENERIC: ReadonlySet<string> = new Set(GENERIC_ROLES);
/** A non-user message's optional string members, in the schema's shape order. */
const GENERIC_STRINGS = ["tool_call_id", "name", "reasoning_content"] as const;
const DETAILS: ReadonlySet<string> = new Set(IMAGE_DETAILS);
type Detail = (typeof IMAGE_DETAILS)[number];

/** An object as JSON.parse makes it (the ordinary prototype), or one of no prototype: nothing inherited reads as a member. */
function isPlainRecord(v: unknown): v is Record<string, unknown> {
  if (typeof v !== "object" || v === null) return false;
  const proto: unknown = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}

/**
 * Whether every key of `o` zod could read is one of the names given (`b` repeated: fewer names).
 * zod reads each of its shape's keys as `input[key]`, enumerable, inherited or not, so a key this
 * mirror does not handle must be seen here however it is defined: the own names, non-enumerable
 * included (`for..in` skips those), and the enumerable inherited ones (a polluted prototype; `for..in`
 * sees those). Symbol keys are no schema's keys. JSON data has only own enumerable keys.
 */
function keysWithin(o: object, a: string, b: string, c = b, d = b, e = b, f = b): boolean {
  const own = Object.getOwnPropertyNames(o);
  for (let i = 0; i < own.length; i++) {
    const k = own[i]!;
    if (k !== a && k !== b && k !== c && k !== d && k !== e && k !== f) return false;
  }
  for (const k in o) if (k !== a && k !== b && k !== c && k !== d && k !== e && k !== f) return false;
  return true;
}

type Part = { type: "text"; text: string } | { type: "image_url"; image_url: { url: string; detail: Detail }; modalities: typeof IMAGE_MODALITY_DEFAULT };

function fastPart(p: unknown): Part | null {
  if (!isPlainRecord(p)) return null;
  if (p.type === "text") {
    return typeof p.text === "string" && keysWithin(p, "type", "text") ? { type: "text", text: p.text } : null;
  }
  if (p.type !== "image_url" || !keysWithin(p, "type", "image_url")) return null;
  const image = p.image_url;
  if (!isPlainRecord(image) || !keysWithin(image, "url", "detail")) return null;
  const { url } = image;
  if (typeof url !== "string" || url.length === 0 || !MEDIA_URL.test(url)) return null;
  const detail = "detail" in image ? image.detail : IMAGE_DETAIL_DEFAULT;
  if (typeof detail !== "string" || !DETAILS.has(detail)) return null;
  return { type: "image_url", image_url: { url, detail: detail as Detail }, modalities: IMAGE_MODALITY_DEFAULT };
}

/** A plain list (as JSON.parse makes it): anything else (a subclass, a proxy of another prototype) is zod's. */
function isPlainArray(v: unknown): v is unknown[] {
  return Array.isArray(v) && Object.getPrototypeOf(v) === Array.prototype;
}

/** A tool call in ToolCallSchema's output order (id, index, type, function), absent members left out as zod leaves them. */
function fastToolCall(c: unknown): ToolCall | null {
  if (!isPlainRecord(c) || !keysWithin(c, "function", "id", "index", "type")) return null;
  const fn = c.function;
  if (!isPlainRecord(fn) || !keysWithin(fn, "name", "arguments")) return null;
  const out: Record<string, unknown> = {};
  if ("id" in c) {
    if (typeof c.id !== "string") return null;
    out.id = c.id;
  }
  if ("index" in c) {
    if (!Number.isSafeInteger(c.index)) return null;
    out.index = c.index;
  }
  if ("type" in c && c.type !== "function") return null;
  out.type = "function";
  const call: Record<string, unknown> = {};
  if ("name" in fn) {
    if (typeof fn.name !== "string") return null;
    call.name = fn.name;
  }
  if ("arguments" in fn) {
    if (typeof fn.arguments !== "string" || !isJsonObjectText(fn.arguments)) return null;
    call.arguments = fn.arguments;
  }
  out.function = call;
  return out as ToolCall;
}

function fastContent(content: unknown): string | Part[] | null {
  if (typeof content === "string") return content;
  return Array.isArray(content) ? everyOrNull(content, fastPart) : null;
}

/** `read` of every item, or null as soon as one is not of a mirrored shape. */
function everyOrNull<T>(items: readonly unknown[], read: (item: unknown) => T | null): T[] | null {
  const out: T[] = [];
  for (let i = 0; i < items.length; i++) {
    const v = read(items[i]);
    if (v === null) return null;
    out.push(v);
  }
  return out;
}

function fastMessage(m: unknown): ChatMessage | null {
  if (!isPlainRecord(m)) return null;
  const { role } = m;
  if (!("content" in m)) return null;
  if (role === "user") {
    if (!keysWithin(m, "role", "content")) return null;
    const content = fastContent(m.content);
    return content === null ? null : ({ role, content } as ChatMessage);
  }
  if (typeof role !== "string" || !GENERIC.has(role) || !keysWithin(m, "role", "content", "tool_call_id", "name", "reasoning_content", "tool_calls")) return null;
  const content = m.content === null ? null : fastContent(m.content);
  if (content === null && m.content !== null) return null;
  const out: Record<string, unknown> = { role, content };
  for (const key of GENERIC_STRINGS) {
    if (!(key in m)) continue;
    const v = m[key];
    if (typeof v !== "string") return null;
    out[key] = v;
  }
  if ("tool_calls" in m) {
    const calls = isPlainArray(m.tool_calls) ? everyOrNull(m.tool_calls, fastToolCall) : null;
    if (calls === null) return null;
    out.tool_calls = calls;
  }
  return out as ChatMessage;
}

/** zod's output for the request's `messages` member when every message is of a shape mirrored here; null otherwise (parse with zod). */
export function fastMessages(input: unknown): ChatMessage[] | null {
  if (!Array.isArray(input) || input.length === 0 || Object.getPrototypeOf(input) !== Array.prototype) return null;
  return everyOrNull(input, fastMessage);
}
