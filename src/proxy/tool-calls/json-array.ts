/**
 * Tool calls forced by `tool_choice: "required"` or a named tool. SGLang constrains the output to a
 * JSON array `[{"name": …, "parameters": {…}}, …]` (constraint.ts) and reads it without the model's
 * markup parser (sgl-project/sglang python/sglang/srt/entrypoints/openai/serving_chat.py
 * `_process_tool_calls`: `orjson.loads(text)`, each item → name + `json.dumps(item["parameters"],
 * ensure_ascii=False)`; streaming: function_call/json_array_parser.py @8613c481, the base detector with "[" as
 * start token and "," between calls). Output that is not such an array stays content.
 *
 * Streamed, the calls are sent once the array is complete, all of it read as the non-stream answer
 * reads it: the output is nothing but the array, so nothing is held back that a client could use
 * earlier, and an array cut off by max_tokens or a stop string is never sent as calls with made-up
 * arguments (SGLang streams names and growing arguments: deliberate difference).
 */
import type { ToolDefinition } from "../../api/openai-schema.ts";
import { parsePyJson, type PyJson } from "./json.ts";
import { callsOfBlock, isJsonObject, type NonStreamToolResult, type StreamStep } from "./qwen25.ts";

/**
 * Non-stream: the whole output is the array; every item names an offered tool and has `parameters`,
 * or none is a call. (A tool name outside the offer cannot pass SGLang's constraint; an output that
 * was cut off does not parse.)
 */
export function parseJsonArrayToolCalls(text: string, tools: readonly ToolDefinition[]): NonStreamToolResult {
  let parsed: PyJson;
  try {
    parsed = parsePyJson(text);
  } catch {
    return { content: text, calls: [] };
  }
  if (!Array.isArray(parsed) || !parsed.every((t) => isJsonObject(t) && typeof t["name"] === "string" && t["parameters"] !== undefined)) {
    return { content: text, calls: [] };
  }
  const known = new Set(tools.map((t) => t.function.name));
  const items = parsed.map((t) => {
    const o = t as { [k: string]: PyJson };
    return { name: o["name"]!, arguments: o["parameters"]! };
  });
  const calls = callsOfBlock(items, known, false);
  if (calls.length !== items.length) return { content: text, calls: [] };
  return { content: "", calls };
}

/** Streaming: the output is kept until it ends, then read as the non-stream answer reads it. */
export class JsonArrayToolCallStream {
  private readonly tools: readonly ToolDefinition[];
  private text = "";
  private sent = 0;

  constructor(tools: readonly ToolDefinition[]) {
    this.tools = tools;
  }

  get callCount(): number {
    return this.sent;
  }

  push(delta: string): StreamStep {
    this.text += delta;
    return { content: "", calls: [] };
  }

  finish(): StreamStep {
    const parsed = parseJsonArrayToolCalls(this.text, this.tools);
    this.sent = parsed.calls.length;
    return { content: parsed.content, calls: parsed.calls.map((c, index) => ({ index, name: c.name, arguments: c.arguments })) };
  }
}
