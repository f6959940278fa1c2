/**
 * The JSON schema SGLang constrains decoding with when a tool call is forced
 * (sgl-project/sglang python/sglang/srt/function_call/utils.py `get_json_schema_constraint` and
 * `_get_tool_schema`, called from serving_chat.py `_process_messages` for `tool_choice: "required"`
 * or a named tool): an array of at least one `{"name": <enum of the tool name>, "parameters": <the
 * tool's parameters schema, or an empty object schema>}`; `maxItems: 1` when parallel_tool_calls is
 * false; for "required" the tools' `$defs` are merged at the top (conflicting definitions → 400).
 */
import { InvalidRequestError } from "../../api/errors.ts";
import type { ToolChoice, ToolDefinition } from "../../api/openai-schema.ts";

function toolSchema(tool: ToolDefinition): Record<string, unknown> {
  const params = tool.function.parameters;
  return {
    properties: {
      name: { type: "string", enum: [tool.function.name] },
      parameters: params !== undefined && Object.keys(params).length > 0 ? params : { type: "object", properties: {} },
    },
    required: ["name", "parameters"],
  };
}

function toolDefs(tools: readonly ToolDefinition[]): Record<string, unknown> {
  const all: Record<string, unknown> = {};
  for (const tool of tools) {
    const defs = tool.function.parameters?.["$defs"];
    if (typeof defs !== "object" || defs === null || Array.isArray(defs)) continue;
    for (const [name, schema] of Object.entries(defs as Record<string, unknown>)) {
      if (name in all && JSON.stringify(all[name]) !== JSON.stringify(schema)) {
        throw new InvalidRequestError(`Tool definition '${name}' has multiple schemas, which is not supported.`, "tools");
      }
      all[name] = schema;
    }
  }
  return all;
}

/** The schema for a forced tool call, or null when tool_choice does not force one. */
export function forcedToolCallSchema(
  tools: readonly ToolDefinition[],
  choice: ToolChoice,
  parallelToolCalls: boolean,
): Record<string, unknown> | null {
  if (typeof choice === "object") {
    const tool = tools.find((t) => t.function.name === choice.function.name);
    if (tool === undefined) return null;
    const schema: Record<string, unknown> = { type: "array", minItems: 1, items: toolSchema(tool) };
    if (!parallelToolCalls) schema["maxItems"] = 1;
    return schema;
  }
  if (choice !== "required") return null;
  const schema: Record<string, unknown> = {
    type: "array",
    minItems: 1,
    items: { type: "object", anyOf: tools.map(toolSchema) },
  };
  if (!parallelToolCalls) schema["maxItems"] = 1;
  const defs = toolDefs(tools);
  if (Object.keys(defs).length > 0) schema["$defs"] = defs;
  return schema;
}

/**
 * tool_choice "auto" with a strict tool: SGLang constrains each call's arguments with a structural tag
 * built from the parser's structure_info (function_call_parser.py `get_structure_tag` /
 * `get_structure_constraint`; qwen25_detector.py `structure_info`: begin `<tool_call>\n{"name":"NAME",
 * "arguments":`, end `}\n</tool_call>`, trigger `<tool_call>`). Non-strict tools accept any arguments
 * (schema `{}`). Null when no tool is strict.
 */
export function qwenStructuralTag(tools: readonly ToolDefinition[], choice: ToolChoice): Record<string, unknown> | null {
  if (choice !== "auto" || !tools.some((t) => t.function.strict)) return null;
  return {
    type: "structural_tag",
    structures: tools.map((t) => ({
      begin: `<tool_call>\n{"name":"${t.function.name}", "arguments":`,
      schema: t.function.strict ? (t.function.parameters ?? {}) : {},
      end: "}\n</tool_call>",
    })),
    triggers: ["<tool_call>"],
  };
}
