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
 * Another template (an id added later) gets no skeleton until its reads are reviewed and listed.
 */
import type { TemplateMessage } from "./messages.ts";
import type { TemplateId } from "./model-profile.ts";
import { ownString } from "../util/own-string.ts";

/** Messages a skeleton covers at most (a chat turn's tail is two after the stand-in). */
export const TAIL_SKELETON_MESSAGES = 4;

/** The templates whose reads of a content are reviewed above; tailShape declines any other. */
const REVIEWED: ReadonlySet<TemplateId> = new Set<TemplateId>(["qwen2vl", "qwen3vl-instruct", "qwen3vl-thinking"]);

/** Parts of a list content a skeleton covers at most. */
const MAX_PARTS = 8;

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

/**
 * The skeleton key of `messages` under template `id` (per message its role and "s" for a string
 * content or its parts' codes), or null when one is not a user or assistant message of role and
 * content whose texts the template prints verbatim, or the template is not a reviewed one.
 */
export function tailShape(id: TemplateId, messages: readonly TemplateMessage[]): string | null {
  if (messages.length === 0 || messages.length > TAIL_SKELETON_MESSAGES || !REVIEWED.has(id)) return null;
  let shape = "";
  for (const m of messages) {
    const { role, content } = m;
    if (role !== "user" && role !== "assistant") return null;
    let keys = 0;
    for (const k in m) if (Object.hasOwn(m, k)) keys++;
    if (keys !== 2) return null;
    const own = typeof content === "string" ? (verbatim(id, role, content) ? "s" : null) : Array.isArray(content) ? partsShape(id, role, content) : null;
    if (own === null) return null;
    shape += `${role === "user" ? "u" : "a"}${own},`;
  }
  return shape;
}

/** The messages of `shape` with `texts` (in order) for their string contents and text parts. */
function shapeMessages(shape: string, texts: readonly string[]): TemplateMessage[] {
  let t = 0;
  return shape
    .slice(0, -1)
    .split(",")
    .map((m) => {
      const role = m[0] === "u" ? "user" : "assistant";
      if (m[1] === "s") return { role, content: texts[t++]! };
      return { role, content: Array.from(m.slice(1), (c) => (c === "t" ? { type: "text", text: texts[t++]! } : { type: c === "i" ? "image" : "video" })) };
    });
}

/** How many texts a shape's messages hold. */
function textCount(shape: string): number {
  let n = 0;
  for (const c of shape) if (c === "s" || c === "t") n++;
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
    if (typeof content === "string") out += content + skeleton[k++]!;
    else for (const part of content as readonly Record<string, unknown>[]) if (part["type"] === "text") out += (part["text"] as string) + skeleton[k++]!;
  }
  return out;
}
