/**
 * Tool calls forced by `tool_choice: "required"` or a named tool. SGLang constrains the output to a
 * JSON array `[{"name": …, "parameters": {…}}, …]` (constraint.ts) and reads it without the model's
 * markup parser (sgl-project/sglang python/sglang/srt/entrypoints/openai/serving_chat.py
 * `_process_tool_calls`: `orjson.loads(text)`, each item → name + `json.dumps(item["parameters"],
 * ensure_ascii=False)`; streaming: function_call/json_array_parser.py @8613c481, the base detector with "[" as
 * start token and "," between calls). Output that is not such an array stays content.
 */
import type { ToolDefinition } from "../../api/openai-schema.ts";
import { MalformedJson, parsePartialJson, parsePyJson, pyJsonDumps, type PyJson } from "./json.ts";
import { commonPrefixLength, isJsonObject, type NonStreamToolResult, type StreamStep } from "./qwen25.ts";

/** Non-stream: the whole output is the array. */
export function parseJsonArrayToolCalls(text: string): NonStreamToolResult {
  let parsed: PyJson;
  try {
    parsed = parsePyJson(text);
  } catch {
    return { content: text, calls: [], hadMarkup: true };
  }
  if (!Array.isArray(parsed) || !parsed.every((t) => isJsonObject(t) && typeof t["name"] === "string" && t["parameters"] !== undefined)) {
    return { content: text, calls: [], hadMarkup: true };
  }
  const calls = parsed.map((t) => {
    const o = t as { [k: string]: PyJson };
    return { name: o["name"] as string, arguments: pyJsonDumps(o["parameters"], false) };
  });
  return { content: "", calls, hadMarkup: true };
}

/** Streaming: re-reads the growing array; names first, then arguments as a growing common prefix. */
export class JsonArrayToolCallStream {
  private readonly known: Set<string>;
  private text = "";
  private named = 0;
  /** Per call: argument text sent, and the previous dumps of its arguments. */
  private sent: string[] = [];
  private prev: (string | null)[] = [];
  private failed = false;

  constructor(tools: readonly ToolDefinition[]) {
    this.known = new Set(tools.map((t) => t.function.name));
  }

  get callCount(): number {
    return this.named;
  }

  push(delta: string): StreamStep {
    this.text += delta;
    return this.step(false);
  }

  finish(): StreamStep {
    const out = this.step(true);
    if (this.failed && this.named === 0) out.content += this.text;
    return out;
  }

  private step(final: boolean): StreamStep {
    const out: StreamStep = { content: "", calls: [] };
    if (this.failed || this.text.trim() === "") return out;
    let items: PyJson[];
    let itemsStrict: PyJson[];
    try {
      const loose = parsePartialJson(this.text.trimStart(), true).value;
      const strict = parsePartialJson(this.text.trimStart(), false).value;
      if (!Array.isArray(loose) || !Array.isArray(strict)) throw new MalformedJson("not an array");
      items = loose;
      itemsStrict = strict;
    } catch (e) {
      if (!(e instanceof MalformedJson)) throw e;
      this.failed = true;
      return out;
    }
    for (let i = 0; i < items.length; i++) {
      const item = items[i];
      if (!isJsonObject(item)) continue;
      if (i >= this.named) {
        // Names are sent only once complete (strict parse), in order.
        const strictItem = itemsStrict[i];
        const name = isJsonObject(strictItem) ? strictItem["name"] : undefined;
        if (i > this.named || typeof name !== "string") break;
        if (!this.known.has(name)) {
          this.failed = true;
          return out;
        }
        out.calls.push({ index: i, name, arguments: "" });
        this.named++;
        this.sent.push("");
        this.prev.push(null);
      }
      const params = item["parameters"];
      if (params === undefined) continue;
      const cur = pyJsonDumps(params);
      const closed = final || i < items.length - 1;
      const sent = this.sent[i]!;
      let next = sent;
      if (closed) next = cur;
      else if (this.prev[i] !== null && this.prev[i] !== cur) next = cur.slice(0, commonPrefixLength(this.prev[i]!, cur));
      if (next.length > sent.length && next.startsWith(sent)) {
        out.calls.push({ index: i, arguments: next.slice(sent.length) });
        this.sent[i] = next;
      }
      this.prev[i] = cur;
    }
    return out;
  }
}
