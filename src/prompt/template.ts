/**
 * Chat-template rendering with @huggingface/jinja: a tree-walking interpreter (no eval, no
 * new Function), so it runs in workerd. Each template is parsed once per isolate.
 *
 * Gaps against transformers' Jinja2 environment handled here (docs/prompt.md; the oracle test
 * test/unit/prompt/jinja2-oracle.test.ts renders with Jinja2 itself):
 *  - `tojson` number text: numbers carried as PyNumber (py-json.ts) whose Python text differs from
 *    what the library prints are swapped for per-render sentinel strings, and the sentinels are
 *    replaced by the Python text after rendering. Valid because the Qwen-VL templates only ever
 *    pass tools and tool-call arguments through `tojson`; a template that computed with those
 *    numbers would see strings.
 *  - `str.strip/lstrip/rstrip(chars)` get Python semantics (jinja-compat.ts).
 *  - missing `content` is set to "" by preprocessing (messages.ts), as SGLang does.
 */
import { Template } from "@huggingface/jinja";
import { InvalidRequestError } from "../api/errors.ts";
import { CHAT_TEMPLATES } from "../generated/templates.js";
import { COMPAT_FUNCTIONS, patchPythonStringMethods } from "./jinja-compat.ts";
import type { ContentFormat } from "./messages.ts";
import type { TemplateId } from "./model-profile.ts";
import { jinjaNumberText, PyNumber } from "./py-json.ts";

const parsed = new Map<TemplateId, Template>();

export function templateSource(id: TemplateId): { text: string; sha256: string; bytes: number } {
  const t = CHAT_TEMPLATES[id];
  if (!t) throw new Error(`unknown chat template ${String(id)}`);
  return t;
}

/** The parsed template, built on first use and kept for the isolate's lifetime. */
export function getTemplate(id: TemplateId): Template {
  let t = parsed.get(id);
  if (!t) {
    t = new Template(templateSource(id).text);
    patchPythonStringMethods(t);
    parsed.set(id, t);
  }
  return t;
}

const CONTENT_LOOP = /\{%-?\s*for\s+\w+\s+in\s+(?:message|msg|m)\s*(?:\.\s*content|\[\s*['"]content['"]\s*\])/;

/**
 * SGLang `detect_jinja_template_content_format`: "openai" when the template mentions image, audio,
 * video or vision, or loops over a message's content; otherwise "string". (Upstream inspects the
 * Jinja2 AST for the loop; a regex over the source covers the same `for x in message.content`
 * spellings.)
 */
export function detectContentFormat(templateText: string): ContentFormat {
  if (["image", "audio", "video", "vision"].some((k) => templateText.includes(k))) return "openai";
  return CONTENT_LOOP.test(templateText) ? "openai" : "string";
}

export function contentFormatOf(id: TemplateId): ContentFormat {
  return detectContentFormat(templateSource(id).text);
}

/** An `{% if add_vision_id %}` block holding text and expressions only (no other tag). */
const VISION_ID_BLOCK = /\{%-?\s*if\s+add_vision_id\s*-?%\}(?:(?!\{%)[\s\S])*?\{%-?\s*endif\s*-?%\}/g;
/** The counters' own bookkeeping: created at 0, one added per item. */
const COUNTER_UPDATE = /\{%-?\s*set\s+(image|video)_count\s*=\s*namespace\(\s*value\s*=\s*0\s*\)\s*-?%\}|\{%-?\s*set\s+(image|video)_count\.value\s*=\s*\2_count\.value\s*\+\s*1\s*-?%\}/g;

/**
 * Whether a template reads its image and video counters only inside `{% if add_vision_id %}`
 * blocks (to number items: "Picture {{ image_count.value }}: "), besides creating them and adding
 * one per item. Then, with add_vision_id unset, what it renders for a message does not depend on
 * how many items came before it. Read from the source, conservatively: any other mention of a
 * counter (a test, another variable) is a read.
 */
export function countersOnlyNumberItems(templateText: string): boolean {
  return !/\b(image|video)_count\b/.test(templateText.replace(VISION_ID_BLOCK, "").replace(COUNTER_UPDATE, ""));
}

const numbersOnly = new Map<TemplateId, boolean>();

/**
 * Whether template `id` under `kwargs` renders a message the same after any count of earlier
 * images and videos: add_vision_id unset (or false, None) and countersOnlyNumberItems.
 */
export function itemCountsIrrelevant(id: TemplateId, kwargs: Record<string, unknown>): boolean {
  const v = kwargs["add_vision_id"];
  if (v !== undefined && v !== false && v !== null) return false;
  let only = numbersOnly.get(id);
  if (only === undefined) numbersOnly.set(id, (only = countersOnlyNumberItems(templateSource(id).text)));
  return only;
}

/**
 * The roles (after preprocessing: developer → system, function → tool) whose image and video items
 * each template counts; "every" for all. qwen3vl-instruct prints only the text of system and
 * assistant messages and nothing of other roles, so it numbers items in user and tool messages
 * only. Checked against renders of each template (test/unit/prompt/template-item-counts.test.ts).
 */
const NUMBERED_ROLES: Readonly<Record<TemplateId, "every" | ReadonlySet<string>>> = {
  qwen2vl: "every",
  "qwen3vl-instruct": new Set(["user", "tool"]),
  "qwen3vl-thinking": "every",
};

/** Whether template `id` counts the image and video items of a `role` message. */
export function countsItemsOf(id: TemplateId, role: string): boolean {
  const roles = NUMBERED_ROLES[id];
  return roles === "every" || roles.has(role);
}

interface SentinelTable {
  /** Made with the first sentinel: a render with none (every chat turn without such numbers) draws no random nonce. */
  prefix: string | null;
  texts: string[];
}

function newSentinelPrefix(): string {
  const nonce = new Uint32Array(3);
  crypto.getRandomValues(nonce);
  return `@kvedge-pynum-${Array.from(nonce, (n) => n.toString(36)).join("")}-`;
}

/** Whether `x` holds a PyNumber anywhere (a walk that allocates nothing). */
function holdsPyNumber(x: unknown): boolean {
  if (x instanceof PyNumber) return true;
  if (typeof x !== "object" || x === null) return false;
  if (Array.isArray(x)) return x.some(holdsPyNumber);
  for (const k in x) if (Object.hasOwn(x, k) && holdsPyNumber((x as Record<string, unknown>)[k])) return true;
  return false;
}

/**
 * The template's view of `x`: PyNumbers become plain numbers, or sentinels where the text differs
 * (a deep copy); a value without any is given as it is (the library converts it for itself and
 * changes nothing: a chat turn's messages are not copied per render).
 */
function templateValueOf(x: unknown, table: SentinelTable): unknown {
  return holdsPyNumber(x) ? toTemplateValue(x, table) : x;
}

/** Deep copy for the template: PyNumbers become plain numbers, or sentinels where the text differs. */
function toTemplateValue(x: unknown, table: SentinelTable): unknown {
  if (x instanceof PyNumber) {
    if (x.pythonText === jinjaNumberText(x.value)) return x.value;
    table.prefix ??= newSentinelPrefix();
    table.texts.push(x.pythonText);
    return `${table.prefix}${table.texts.length - 1}@`;
  }
  if (Array.isArray(x)) return x.map((v) => toTemplateValue(v, table));
  if (typeof x === "object" && x !== null) {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(x)) out[k] = toTemplateValue(v, table);
    return out;
  }
  return x;
}

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

function restoreSentinels(rendered: string, table: SentinelTable): string {
  if (table.prefix === null) return rendered;
  const p = escapeRegExp(table.prefix);
  const put = (_m: string, i: string): string => table.texts[Number(i)] ?? _m;
  // tojson prints the sentinel as a JSON string: drop its quotes; a bare print keeps none.
  return rendered.replace(new RegExp(`"${p}(\\d+)@"`, "g"), put).replace(new RegExp(`${p}(\\d+)@`, "g"), put);
}

export interface RenderInput {
  messages: readonly Record<string, unknown>[];
  tools: readonly Record<string, unknown>[] | null;
  kwargs: Record<string, unknown>;
}

function renderOnce(template: Template, input: RenderInput, tools: readonly unknown[] | null): string {
  const table: SentinelTable = { prefix: null, texts: [] };
  const context: Record<string, unknown> = {
    ...input.kwargs,
    ...COMPAT_FUNCTIONS,
    messages: templateValueOf(input.messages, table),
    tools: tools === null ? null : templateValueOf(tools, table),
    add_generation_prompt: true,
  };
  return restoreSentinels(template.render(context), table);
}

let tojsonTemplate: Template | null = null;

/**
 * What a template's `x | tojson` prints for `x` inside renderTemplate (the same filter, the same
 * view of PyNumbers and their sentinels): tail-skeleton.ts fills a tool call's arguments with it.
 */
export function tojsonText(x: unknown): string {
  tojsonTemplate ??= new Template("{{- x | tojson }}");
  const table: SentinelTable = { prefix: null, texts: [] };
  return restoreSentinels(tojsonTemplate.render({ x: templateValueOf(x, table) }), table);
}

/**
 * apply_chat_template(messages, tools=tools, add_generation_prompt=True, **kwargs), tokenize=False.
 * Like SGLang, a failing render is retried once with tools flattened to their `function` objects;
 * a second failure is the client's (400).
 */
export function renderTemplate(id: TemplateId, input: RenderInput): string {
  const template = getTemplate(id);
  try {
    return renderOnce(template, input, input.tools);
  } catch (first) {
    const flat = input.tools?.map((t) => ("function" in t ? t["function"] : t)) ?? null;
    try {
      return renderOnce(template, input, flat);
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err ?? first);
      throw new InvalidRequestError(`Chat template rendering failed: ${message}`, "messages", "template_error");
    }
  }
}
