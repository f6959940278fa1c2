/**
 * Tail skeletons: a turn chain's tail render without the interpreter on a repeated shape. A chat
 * turn renders [stand-in, assistant, user] with string contents (a vision turn: the user's a text
 * and an image), the same shape every turn; the template prints each text verbatim, once, and
 * tests it only in ways a placeholder answers the same (below), and an item's text depends only
 * on the shape and the counters the stand-in carries. So the tail is rendered once per scope,
 * item counts and shape with placeholder texts (by the real template: the library stays the
 * oracle), cut at the placeholders, and each turn joins the pieces with its texts (~1 µs, where a
 * render of two messages cost ~40 µs in Node).
 *
 * What each template reads of a user or assistant message whose keys are role and content (a
 * string, or up to eight parts {type: "text", text} and {type: "image" | "video"}), after a user
 * stand-in first (src/prompt/templates; checked against renders by
 * test/unit/prompt/tail-skeleton.test.ts):
 *  - qwen2vl, qwen3vl-instruct: `content is string`, then prints it; of a part, its keys and
 *    type, then a text part's text. No other read.
 *  - qwen3vl-thinking: render_content prints it; the last-query scan tests a user's content for
 *    starting with `<tool_response>` and ending with `</tool_response>`; an assistant's is tested
 *    for `</think>` and, after the last query, printed with `lstrip('\n')`. A content is taken
 *    only where those read as for the placeholder: not a `<tool_response>…</tool_response>`
 *    user text, no `</think>` and no leading newline in an assistant's, no assistant parts.
 * An agent step's tail (an assistant's tool calls, then tool results) too:
 *  - a tool message whose keys are role, content (a string), and optionally tool_call_id and name:
 *    every template prints the content verbatim and reads no other key (the thinking template's
 *    last-query scan tests user messages only); what opens and closes its block reads only its
 *    neighbours' roles, which the shape fixes.
 *  - qwen3vl-instruct and qwen3vl-thinking: an assistant message whose keys are role, content (a
 *    string) and tool_calls (one to MAX_CALLS calls of id, index, type and function, a function of
 *    name, a string, and arguments, a string or an object): `message.tool_calls` and
 *    `tool_call.function` are tested for truth (both are), the content for truth (its shape holds
 *    whether it is empty), a call's name is printed verbatim and its arguments verbatim when a
 *    string, else as `| tojson` prints them (template.ts tojsonText: the same filter); a call's
 *    other keys are not read. qwen2vl prints no tool calls: declined there.
 * Another template (an id added later) gets no skeleton until its reads are reviewed and listed.
 */
import type { TemplateMessage } from "./messages.ts";
import type { TemplateId } from "./model-profile.ts";
import { tojsonText } from "./template.ts";
import { ownString } from "../util/own-string.ts";
import { isRecord } from "../util/is-record.ts";

/** Messages a skeleton covers at most (a chat turn's tail is two after the stand-in). */
export const TAIL_SKELETON_MESSAGES = 4;

/** The templates whose reads of a content are reviewed above; tailShape declines any other. */
const REVIEWED: ReadonlySet<TemplateId> = new Set<TemplateId>(["qwen2vl", "qwen3vl-instruct", "qwen3vl-thinking"]);

/** Parts of a list content a skeleton covers at most. */
const MAX_PARTS = 8;

/** Tool calls of an assistant message a skeleton covers at most. */
const MAX_CALLS = 4;

/** The tail's text: pieces[0] + contents[0] + pieces[1] + … + pieces[n]. */
export type TailSkeleton = readonly string[];

/** Whether `id` (a reviewed template) prints a string `content` of a `role` message verbatim, reading nothing else of it than a placeholder would give. */
function verbatim(id: TemplateId, role: string, content: string): boolean {
  if (id === "qwen2vl" || id === "qwen3vl-instruct") return true;
  if (role === "user") return !(content.startsWith("<tool_response>") && content.endsWith("</tool_response>"));
  return !content.includes("</think>") && content.charCodeAt(0) !== 10;
}

/** A content part's code: "t" a text part ({type, text: string}), "i"/"v" an image/video item ({type}); null for others. */
function partCode(part: unknown): string | null {
  if (typeof part !== "object" || part === null) return null;
  const p = part as Record<string, unknown>;
  let keys = 0;
  for (const k in p) if (Object.hasOwn(p, k)) keys++;
  if (p["type"] === "text") return keys === 2 && typeof p["text"] === "string" ? "t" : null;
  if (keys !== 1) return null;
  return p["type"] === "image" ? "i" : p["type"] === "video" ? "v" : null;
}

/** Text of the text parts from `from` on (step 1) or back from `from` (step -1) until a media item. */
function textRun(parts: readonly Record<string, unknown>[], from: number, step: 1 | -1): string {
  const run: string[] = [];
  for (let i = from; i >= 0 && i < parts.length && parts[i]!["type"] === "text"; i += step) run.push(parts[i]!["text"] as string);
  return (step === 1 ? run : run.reverse()).join("");
}

/**
 * The codes of a list content's parts, or null where `id` would read it otherwise than a skeleton
 * with placeholder texts: the thinking template tests an assistant's joined content (declined) and
 * whether a user's starts with `<tool_response>` and ends with `</tool_response>` (media items
 * print as `<|vision_start|>…` or `Picture n: …`, so only the text runs at either end can).
 */
function partsShape(id: TemplateId, role: string, parts: readonly unknown[]): string | null {
  if (parts.length === 0 || parts.length > MAX_PARTS || (id === "qwen3vl-thinking" && role === "assistant")) return null;
  let shape = "";
  for (const part of parts) {
    const code = partCode(part);
    if (code === null) return null;
    shape += code;
  }
  const all = parts as readonly Record<string, unknown>[];
  if (id === "qwen3vl-thinking" && textRun(all, 0, 1).startsWith("<tool_response>") && textRun(all, all.length - 1, -1).endsWith("</tool_response>")) return null;
  return shape;
}

/** Whether every own enumerable key of `o` is one of `names`. */
function keysAmong(o: object, names: readonly string[]): boolean {
  for (const k in o) if (Object.hasOwn(o, k) && !names.includes(k)) return false;
  return true;
}

/** Whether `call` is a tool call the skeleton fills: a function of a string name and string or object arguments, no other key read. */
function isFilledCall(call: unknown): boolean {
  if (!isRecord(call) || !keysAmong(call, ["id", "index", "type", "function"])) return false;
  const fn = call["function"];
  if (!isRecord(fn) || !keysAmong(fn, ["name", "arguments"]) || typeof fn["name"] !== "string") return false;
  const args = fn["arguments"];
  return typeof args === "string" || isRecord(args);
}

/**
 * The code of an agent step's message (a tool result, or an assistant's tool calls: header), or
 * null where the skeleton does not take it.
 */
function agentCode(id: TemplateId, m: TemplateMessage): string | null {
  const { role, content } = m;
  if (typeof content !== "string") return null;
  if (role === "tool") return keysAmong(m, ["role", "content", "tool_call_id", "name"]) ? "os" : null;
  const calls = m["tool_calls"];
  if (role !== "assistant" || id === "qwen2vl" || !keysAmong(m, ["role", "content", "tool_calls"]) || !Array.isArray(calls)) return null;
  if (calls.length === 0 || calls.length > MAX_CALLS || !calls.every(isFilledCall)) return null;
  // An empty content is tested for truth: it has no text of its own ("e").
  if (content !== "" && !verbatim(id, role, content)) return null;
  return `a${content === "" ? "e" : "s"}c${calls.length}`;
}

/**
 * The skeleton key of `messages` under template `id` (per message its role and "s" for a string
 * content or its parts' codes; an agent step's messages as agentCode writes them), or null when
 * one is not a user or assistant message of role and content, or a message of an agent step,
 * whose texts the template prints verbatim, or the template is not a reviewed one.
 */
export function tailShape(id: TemplateId, messages: readonly TemplateMessage[]): string | null {
  if (messages.length === 0 || messages.length > TAIL_SKELETON_MESSAGES || !REVIEWED.has(id)) return null;
  let shape = "";
  for (const m of messages) {
    const { role, content } = m;
    let keys = 0;
    for (const k in m) if (Object.hasOwn(m, k)) keys++;
    if (keys !== 2 || (role !== "user" && role !== "assistant")) {
      const code = agentCode(id, m);
      if (code === null) return null;
      shape += `${code},`;
      continue;
    }
    const own = typeof content === "string" ? (verbatim(id, role, content) ? "s" : null) : Array.isArray(content) ? partsShape(id, role, content) : null;
    if (own === null) return null;
    shape += `${role === "user" ? "u" : "a"}${own},`;
  }
  return shape;
}

/** A message code's parts: its role, its content's codes ("s", "e" or parts') and its tool calls. */
function codeParts(m: string): { role: string; content: string; calls: number } {
  const c = m.indexOf("c");
  return { role: m[0] === "u" ? "user" : m[0] === "o" ? "tool" : "assistant", content: m.slice(1, c < 0 ? m.length : c), calls: c < 0 ? 0 : Number(m.slice(c + 1)) };
}

/** The messages of `shape` with `texts` (in order) for their string contents, text parts and tool calls' names and arguments. */
function shapeMessages(shape: string, texts: readonly string[]): TemplateMessage[] {
  let t = 0;
  return shape
    .slice(0, -1)
    .split(",")
    .map((code) => {
      const { role, content, calls } = codeParts(code);
      const m: TemplateMessage = {
        role,
        content: content === "s" ? texts[t++]! : content === "e" ? "" : Array.from(content, (c) => (c === "t" ? { type: "text", text: texts[t++]! } : { type: c === "i" ? "image" : "video" })),
      };
      if (calls > 0) m["tool_calls"] = Array.from({ length: calls }, () => ({ type: "function", function: { name: texts[t++]!, arguments: texts[t++]! } }));
      return m;
    });
}

/** How many texts a shape's messages hold. */
function textCount(shape: string): number {
  let n = 0;
  for (const code of shape.slice(0, -1).split(",")) {
    const { content, calls } = codeParts(code);
    for (const c of content) if (c === "s" || c === "t") n++;
    n += 2 * calls;
  }
  return n;
}

/** Placeholder contents: a per-skeleton nonce keeps them apart from anything else the template prints. */
function placeholders(count: number): string[] {
  const nonce = new Uint32Array(2);
  crypto.getRandomValues(nonce);
  const tag = Array.from(nonce, (n) => n.toString(36)).join("");
  return Array.from({ length: count }, (_, i) => `\u0001kvedge-tail-${tag}-${i}\u0001`);
}

/**
 * The skeleton of `shape` (tailShape's): `render(messages)` renders the stand-in and `messages`,
 * `head` is what the stand-in alone renders before the generation prompt. Null when the render
 * does not start with `head` or does not hold each placeholder once, in order (then the caller
 * renders every time). The pieces are copies: a slice would keep the whole render (tools' text).
 */
export function buildTailSkeleton(shape: string, head: string, render: (messages: TemplateMessage[]) => string): TailSkeleton | null {
  const contents = placeholders(textCount(shape));
  const out = render(shapeMessages(shape, contents));
  if (!out.startsWith(head)) return null;
  const pieces: string[] = [];
  let at = head.length;
  for (const p of contents) {
    const found = out.indexOf(p, at);
    if (found < 0 || out.indexOf(p, found + p.length) >= 0) return null;
    pieces.push(ownString(out.slice(at, found)));
    at = found + p.length;
  }
  pieces.push(ownString(out.slice(at)));
  return pieces;
}

/** The tail of `messages` (of the skeleton's shape): its pieces joined with their texts. */
export function fillTailSkeleton(skeleton: TailSkeleton, messages: readonly TemplateMessage[]): string {
  let out = skeleton[0]!;
  let k = 1;
  for (const m of messages) {
    const content = m.content;
    const calls = m["tool_calls"] as readonly { function: { name: string; arguments: unknown } }[] | undefined;
    // An empty content beside tool calls has no text of its own (agentCode's "e").
    if (typeof content === "string") {
      if (content !== "" || calls === undefined) out += content + skeleton[k++]!;
    } else for (const part of content as readonly Record<string, unknown>[]) if (part["type"] === "text") out += (part["text"] as string) + skeleton[k++]!;
    if (calls === undefined) continue;
    for (const { function: fn } of calls) {
      out += fn.name + skeleton[k++]!;
      out += (typeof fn.arguments === "string" ? fn.arguments : tojsonText(fn.arguments)) + skeleton[k++]!;
    }
  }
  return out;
}
