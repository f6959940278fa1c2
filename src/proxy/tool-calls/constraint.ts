/**
 * The constraints SGLang decodes a tool call under (sgl-project/sglang python/sglang/srt/
 * function_call/function_call_parser.py @00828e56 `get_structure_constraint`, called from
 * serving_chat.py `_prepare_tools`):
 * - with a tool-call parser whose format has a structural tag (qwen25 has: `structure_info`, and no
 *   XGrammar model-native tag), `tool_choice` "required" or a named tool gets the legacy structural
 *   tag with `at_least_one`, so the forced call is written in the model's own `<tool_call>` format
 *   and read by the same parser as any other; "auto" gets the tag without it only when a tool is
 *   strict;
 * - without a tool-call parser, a forced call is constrained to a JSON array
 *   `[{"name": …, "parameters": {…}}, …]` (function_call/utils.py `get_json_schema_constraint`), and
 *   the array comes back as text.
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
 * The legacy structural tag from qwen25's structure_info (qwen25_detector.py `structure_info`:
 * begin `<tool_call>\n{"name":"NAME", "arguments":`, end `}\n</tool_call>`, trigger `<tool_call>`;
 * function_call_parser.py `get_legacy_structural_tag`): one structure per tool, whose arguments
 * follow the tool's schema only when it is strict (`{}` accepts any). "required" covers every tool
 * and a named choice only that tool (the template is shown only that tool too: serving_chat.py
 * `_prepare_tools`), both with `at_least_one`; "auto" is constrained only when a tool is strict.
 * Null when nothing is constrained. The field order is the pydantic model's, as SGLang dumps it.
 */
export function qwenStructuralTag(tools: readonly ToolDefinition[], choice: ToolChoice): Record<string, unknown> | null {
  let offered: readonly ToolDefinition[];
  if (typeof choice === "object") {
    offered = tools.filter((t) => t.function.name === choice.function.name);
    if (offered.length === 0) return null;
  } else if (choice === "required") offered = tools;
  else if (choice === "auto" && tools.some((t) => t.function.strict)) offered = tools;
  else return null;
  const forced = choice !== "auto";
  // get_legacy_structural_tag validates the $defs first (_get_tool_schema_defs): conflicts are a 400.
  if (forced) toolDefs(offered);
  return {
    type: "structural_tag",
    structures: offered.map((t) => ({
      begin: `<tool_call>\n{"name":"${t.function.name}", "arguments":`,
      schema: t.function.strict ? (t.function.parameters ?? {}) : {},
      end: "}\n</tool_call>",
    })),
    triggers: ["<tool_call>"],
    at_least_one: forced,
  };
}
