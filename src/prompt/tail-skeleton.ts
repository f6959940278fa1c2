/**
 * Tail skeletons: a turn chain's tail render without the interpreter on a repeated shape. A chat
 * turn renders [stand-in, assistant, user] with string contents, the same shape every turn; the
 * template prints such a content verbatim, once, and tests it only in ways a placeholder answers
 * the same (below). So the tail is rendered once per scope, item counts and role sequence with
 * placeholder contents (by the real template: the library stays the oracle), cut at the
 * placeholders, and each turn joins the pieces with its contents (~1 µs, where a render of two
 * messages cost ~50 µs in workerd).
 *
 * What each template reads of a user or assistant message whose keys are role and content (a
 * string), after a user stand-in first (src/prompt/templates; checked against renders by
 * test/unit/prompt/tail-skeleton.test.ts):
 *  - qwen2vl, qwen3vl-instruct: `content is string`, then prints it. No other read.
 *  - qwen3vl-thinking: render_content prints it; the last-query scan tests a user's content for
 *    starting with `<tool_response>` and ending with `</tool_response>`; an assistant's is tested
 *    for `</think>` and, after the last query, printed with `lstrip('\n')`. A content is taken
 *    only where those read as for the placeholder: not a `<tool_response>…</tool_response>`
 *    user text, no `</think>` and no leading newline in an assistant's.
 */
import type { TemplateMessage } from "./messages.ts";
import type { TemplateId } from "./model-profile.ts";

/** Messages a skeleton covers at most (a chat turn's tail is two after the stand-in). */
export const TAIL_SKELETON_MESSAGES = 4;

/** The tail's text: pieces[0] + contents[0] + pieces[1] + … + pieces[n]. */
export type TailSkeleton = readonly string[];

/** Whether `id` prints `content` of a `role` message verbatim, reading nothing else of it than a placeholder would give. */
function verbatim(id: TemplateId, role: string, content: string): boolean {
  if (id !== "qwen3vl-thinking") return true;
  if (role === "user") return !(content.startsWith("<tool_response>") && content.endsWith("</tool_response>"));
  return !content.includes("</think>") && content.charCodeAt(0) !== 10;
}

/**
 * The skeleton key of `messages` under template `id` (their roles), or null when one is not a
 * user or assistant message of role and string content that the template prints verbatim.
 */
export function tailShape(id: TemplateId, messages: readonly TemplateMessage[]): string | null {
  if (messages.length === 0 || messages.length > TAIL_SKELETON_MESSAGES) return null;
  let shape = "";
  for (const m of messages) {
    const { role, content } = m;
    if ((role !== "user" && role !== "assistant") || typeof content !== "string") return null;
    let keys = 0;
    for (const k in m) if (Object.hasOwn(m, k)) keys++;
    if (keys !== 2 || !verbatim(id, role, content)) return null;
    shape += role === "user" ? "u" : "a";
  }
  return shape;
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
 * renders every time).
 */
export function buildTailSkeleton(shape: string, head: string, render: (messages: TemplateMessage[]) => string): TailSkeleton | null {
  const contents = placeholders(shape.length);
  const out = render(Array.from(shape, (r, i) => ({ role: r === "u" ? "user" : "assistant", content: contents[i]! })));
  if (!out.startsWith(head)) return null;
  const pieces: string[] = [];
  let at = head.length;
  for (const p of contents) {
    const found = out.indexOf(p, at);
    if (found < 0 || out.indexOf(p, found + p.length) >= 0) return null;
    pieces.push(out.slice(at, found));
    at = found + p.length;
  }
  pieces.push(out.slice(at));
  return pieces;
}

/** The tail of `messages` (of the skeleton's shape): its pieces joined with their contents. */
export function fillTailSkeleton(skeleton: TailSkeleton, messages: readonly TemplateMessage[]): string {
  let out = skeleton[0]!;
  for (let i = 0; i < messages.length; i++) out += (messages[i]!.content as string) + skeleton[i + 1]!;
  return out;
}
