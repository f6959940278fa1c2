/**
 * The chat path's answer → a Responses answer. A chat completion becomes a `response` object
 * (reasoning, message and function_call output items); a chat SSE stream becomes the Responses event
 * sequence the official SDKs accumulate (openai-node `lib/responses/ResponseStream.ts`): created,
 * in_progress, per item output_item.added → content_part.added → deltas → done events →
 * output_item.done, then completed / incomplete, every event with a strictly increasing
 * `sequence_number` from 0. An error frame of the chat stream becomes an `error` event and a
 * `response.failed`.
 */
import { createSseParser } from "../../proxy/sse.ts";
import type { ResponseCreateRequest } from "../../api/responses-schema.ts";
import { bytesToHex } from "../../util/hex.ts";

export interface ChatUsage {
  prompt_tokens: number;
  completion_tokens: number;
  prompt_tokens_details?: { cached_tokens?: number } | null;
  reasoning_tokens?: number;
  completion_tokens_details?: { reasoning_tokens?: number } | null;
}

interface ChatToolCall {
  id?: string;
  index?: number;
  function?: { name?: string; arguments?: string };
}

export interface ChatCompletionLike {
  choices: { message: { content: string | null; reasoning_content?: string | null; tool_calls?: ChatToolCall[] | null }; finish_reason: string | null }[];
  usage?: ChatUsage | null;
}

export type OutputItem =
  | { type: "reasoning"; id: string; summary: []; content: { type: "reasoning_text"; text: string }[]; status: "completed" | "in_progress" }
  | { type: "message"; id: string; role: "assistant"; status: "completed" | "in_progress"; content: { type: "output_text"; text: string; annotations: []; logprobs: [] }[] }
  | { type: "function_call"; id: string; call_id: string; name: string; arguments: string; status: "completed" | "in_progress" };

export interface ResponsesUsage {
  input_tokens: number;
  input_tokens_details: { cached_tokens: number; cache_write_tokens: number };
  output_tokens: number;
  output_tokens_details: { reasoning_tokens: number };
  total_tokens: number;
}

/** `<prefix>_` + 32 hex digits (unguessable: stored responses are looked up by id within a tenant). */
export function newItemId(prefix: "resp" | "msg" | "rs" | "fc"): string {
  const b = new Uint8Array(16);
  crypto.getRandomValues(b);
  return `${prefix}_${bytesToHex(b)}`;
}

export function responsesUsage(u: ChatUsage | null | undefined): ResponsesUsage | null {
  if (!u) return null;
  return {
    input_tokens: u.prompt_tokens,
    input_tokens_details: { cached_tokens: u.prompt_tokens_details?.cached_tokens ?? 0, cache_write_tokens: 0 },
    output_tokens: u.completion_tokens,
    output_tokens_details: { reasoning_tokens: u.completion_tokens_details?.reasoning_tokens ?? u.reasoning_tokens ?? 0 },
    total_tokens: u.prompt_tokens + u.completion_tokens,
  };
}

/** The response object around `output` (request parameters echoed, as OpenAI does). */
export function responseObject(
  id: string,
  req: ResponseCreateRequest,
  createdAt: number,
  status: "in_progress" | "completed" | "incomplete" | "failed",
  output: OutputItem[],
  usage: ResponsesUsage | null,
  error: { code: string; message: string } | null = null,
): Record<string, unknown> {
  return {
    id,
    object: "response",
    created_at: createdAt,
    status,
    completed_at: status === "completed" ? Math.floor(Date.now() / 1000) : null,
    error,
    incomplete_details: status === "incomplete" ? { reason: "max_output_tokens" } : null,
    instructions: req.instructions ?? null,
    max_output_tokens: req.max_output_tokens ?? null,
    metadata: req.metadata ?? {},
    model: req.model,
    output,
    parallel_tool_calls: req.parallel_tool_calls ?? true,
    previous_response_id: req.previous_response_id ?? null,
    prompt_cache_key: req.prompt_cache_key ?? null,
    reasoning: { effort: req.reasoning?.effort ?? null, summary: null },
    safety_identifier: req.safety_identifier ?? null,
    service_tier: "default",
    store: req.store,
    temperature: req.temperature ?? null,
    text: { format: req.text?.format ?? { type: "text" } },
    tool_choice: req.tool_choice ?? "auto",
    tools: req.tools ?? [],
    top_p: req.top_p ?? null,
    truncation: "disabled",
    usage,
    user: req.user ?? null,
  };
}

/** A chat completion's first choice → output items (reasoning, message, function calls, in that order). */
export function outputItems(completion: ChatCompletionLike): OutputItem[] {
  const choice = completion.choices[0];
  if (!choice) return [];
  const items: OutputItem[] = [];
  const m = choice.message;
  if (m.reasoning_content) items.push({ type: "reasoning", id: newItemId("rs"), summary: [], content: [{ type: "reasoning_text", text: m.reasoning_content }], status: "completed" });
  if (m.content) items.push({ type: "message", id: newItemId("msg"), role: "assistant", status: "completed", content: [{ type: "output_text", text: m.content, annotations: [], logprobs: [] }] });
  for (const tc of m.tool_calls ?? [])
    items.push({ type: "function_call", id: newItemId("fc"), call_id: tc.id ?? newItemId("fc"), name: tc.function?.name ?? "", arguments: tc.function?.arguments ?? "", status: "completed" });
  return items;
}

export function statusOf(finishReason: string | null | undefined): "completed" | "incomplete" {
  return finishReason === "length" ? "incomplete" : "completed";
}

/** What the stream produced, for storing once it has completed. */
export interface StreamOutcome {
  response: Record<string, unknown>;
  output: OutputItem[];
  status: "completed" | "incomplete" | "failed";
}

interface ChatChunk {
  choices?: { delta?: { content?: string | null; reasoning_content?: string | null; tool_calls?: ChatToolCall[] | null }; finish_reason?: string | null }[];
  usage?: ChatUsage | null;
  error?: { message?: string; type?: string; code?: string | null; param?: string | null };
}

/**
 * Chat SSE bytes in, Responses SSE bytes out. `onEnd` gets the final response once (completed,
 * incomplete or failed) — the caller stores it.
 */
export function chatStreamToResponses(id: string, req: ResponseCreateRequest, createdAt: number, onEnd: (o: StreamOutcome) => Promise<unknown> | void): TransformStream<Uint8Array, Uint8Array> {
  const parser = createSseParser();
  const encoder = new TextEncoder();
  let seq = 0;
  const output: OutputItem[] = [];
  /** The text item (message or reasoning) receiving deltas. */
  let open: { item: Exclude<OutputItem, { type: "function_call" }>; index: number } | null = null;
  /** Function calls still receiving argument deltas, by chat tool-call index. */
  const calls = new Map<number, { item: Extract<OutputItem, { type: "function_call" }>; index: number }>();
  let finish: string | null = null;
  let usage: ResponsesUsage | null = null;
  let ended = false;

  const emit = (ctl: TransformStreamDefaultController<Uint8Array>, type: string, body: Record<string, unknown>) => {
    ctl.enqueue(encoder.encode(`event: ${type}\ndata: ${JSON.stringify({ type, ...body, sequence_number: seq++ })}\n\n`));
  };
  const addItem = (ctl: TransformStreamDefaultController<Uint8Array>, item: OutputItem): number => {
    const index = output.length;
    output.push(item);
    const empty = item.type === "function_call" ? { arguments: "" } : { content: [] };
    emit(ctl, "response.output_item.added", { output_index: index, item: { ...item, ...empty, status: "in_progress" } });
    return index;
  };
  const closeOpen = (ctl: TransformStreamDefaultController<Uint8Array>) => {
    if (!open) return;
    const { item, index } = open;
    open = null;
    item.status = "completed";
    if (item.type === "message") {
      const part = item.content[0]!;
      emit(ctl, "response.output_text.done", { item_id: item.id, output_index: index, content_index: 0, text: part.text, logprobs: [] });
      emit(ctl, "response.content_part.done", { item_id: item.id, output_index: index, content_index: 0, part });
    } else if (item.type === "reasoning") {
      const part = item.content[0]!;
      emit(ctl, "response.reasoning_text.done", { item_id: item.id, output_index: index, content_index: 0, text: part.text });
      emit(ctl, "response.content_part.done", { item_id: item.id, output_index: index, content_index: 0, part });
    }
    emit(ctl, "response.output_item.done", { output_index: index, item });
  };
  const closeCalls = (ctl: TransformStreamDefaultController<Uint8Array>) => {
    for (const { item, index } of [...calls.values()].sort((a, b) => a.index - b.index)) {
      item.status = "completed";
      emit(ctl, "response.function_call_arguments.done", { item_id: item.id, output_index: index, name: item.name, arguments: item.arguments });
      emit(ctl, "response.output_item.done", { output_index: index, item });
    }
    calls.clear();
  };
  const text = (ctl: TransformStreamDefaultController<Uint8Array>, kind: "message" | "reasoning", delta: string) => {
    if (open?.item.type !== kind) {
      closeOpen(ctl);
      closeCalls(ctl);
      const item: Exclude<OutputItem, { type: "function_call" }> =
        kind === "message"
          ? { type: "message", id: newItemId("msg"), role: "assistant", status: "in_progress", content: [{ type: "output_text", text: "", annotations: [], logprobs: [] }] }
          : { type: "reasoning", id: newItemId("rs"), summary: [], content: [{ type: "reasoning_text", text: "" }], status: "in_progress" };
      const index = addItem(ctl, item);
      open = { item, index };
      const part = kind === "message" ? { type: "output_text", text: "", annotations: [], logprobs: [] } : { type: "reasoning_text", text: "" };
      emit(ctl, "response.content_part.added", { item_id: item.id, output_index: index, content_index: 0, part });
    }
    const { item, index } = open!;
    item.content[0]!.text += delta;
    if (kind === "message") emit(ctl, "response.output_text.delta", { item_id: item.id, output_index: index, content_index: 0, delta, logprobs: [] });
    else emit(ctl, "response.reasoning_text.delta", { item_id: item.id, output_index: index, content_index: 0, delta });
  };
  const toolCall = (ctl: TransformStreamDefaultController<Uint8Array>, tc: ChatToolCall) => {
    const key = tc.index ?? 0;
    let call = calls.get(key);
    if (!call) {
      closeOpen(ctl);
      const item: Extract<OutputItem, { type: "function_call" }> = { type: "function_call", id: newItemId("fc"), call_id: tc.id ?? newItemId("fc"), name: tc.function?.name ?? "", arguments: "", status: "in_progress" };
      call = { item, index: addItem(ctl, item) };
      calls.set(key, call);
    }
    const delta = tc.function?.arguments ?? "";
    if (delta) {
      call.item.arguments += delta;
      emit(ctl, "response.function_call_arguments.delta", { item_id: call.item.id, output_index: call.index, delta });
    }
  };
  const fail = (ctl: TransformStreamDefaultController<Uint8Array>, e: { message?: string; code?: string | null; param?: string | null }) => {
    if (ended) return;
    ended = true;
    const code = e.code ?? "server_error";
    const message = e.message ?? "The response failed.";
    emit(ctl, "error", { code, message, param: e.param ?? null });
    const response = responseObject(id, req, createdAt, "failed", output, usage, { code, message });
    emit(ctl, "response.failed", { response });
    onEnd({ response, output, status: "failed" });
  };
  /** The terminal event goes out once onEnd has settled (stored): a client that reads it can retrieve the response. */
  const finishUp = async (ctl: TransformStreamDefaultController<Uint8Array>) => {
    if (ended) return;
    ended = true;
    closeOpen(ctl);
    closeCalls(ctl);
    const status = statusOf(finish);
    const response = responseObject(id, req, createdAt, status, output, usage);
    await onEnd({ response, output, status });
    emit(ctl, status === "completed" ? "response.completed" : "response.incomplete", { response });
  };
  const handle = async (ctl: TransformStreamDefaultController<Uint8Array>, data: string) => {
    if (ended) return;
    if (data === "[DONE]") return finishUp(ctl);
    let chunk: ChatChunk;
    try {
      chunk = JSON.parse(data) as ChatChunk;
    } catch {
      return fail(ctl, { message: "The worker's stream could not be read.", code: "upstream_malformed" });
    }
    if (chunk.error) return fail(ctl, chunk.error);
    for (const ch of chunk.choices ?? []) {
      const d = ch.delta;
      if (d?.reasoning_content) text(ctl, "reasoning", d.reasoning_content);
      if (d?.content) text(ctl, "message", d.content);
      for (const tc of d?.tool_calls ?? []) toolCall(ctl, tc);
      if (ch.finish_reason) finish = ch.finish_reason;
    }
    if (chunk.usage) usage = responsesUsage(chunk.usage);
  };

  return new TransformStream<Uint8Array, Uint8Array>({
    start(ctl) {
      const response = responseObject(id, req, createdAt, "in_progress", [], null);
      emit(ctl, "response.created", { response });
      emit(ctl, "response.in_progress", { response });
    },
    async transform(bytes, ctl) {
      let events;
      try {
        events = parser.push(bytes);
      } catch {
        return fail(ctl, { message: "The worker's stream could not be read.", code: "upstream_malformed" });
      }
      for (const e of events) await handle(ctl, e.data);
    },
    async flush(ctl) {
      for (const e of parser.end()) await handle(ctl, e.data);
      // A chat stream always ends with [DONE]; one cut before it failed.
      fail(ctl, { message: "The response stream ended early.", code: "upstream_incomplete" });
    },
  });
}
