/**
 * POST /v1/completions at the edge: the prompt is routed as it is (no chat template) by the same
 * index, namespace and retry loop as chat (src/edge/chat/ stages: resolve model → route → forward),
 * and the worker's `/generate` answer is shaped as a text completion (completion-answer.ts). A list of
 * prompts is a batch: each prompt is routed on its own (each may be cached elsewhere) and the
 * choices are numbered prompt × n, as SGLang and OpenAI number them.
 */
import { InvalidRequestError } from "../../api/errors.ts";
import { CompletionRequestSchema, promptsOf, refuseUnsupportedCompletion, samplingRequestOf, type CompletionPrompt, type CompletionRequest } from "../../api/completions-schema.ts";
import { parseSchemaBody, readBodyText } from "../../api/validate.ts";
import { checkSamplingLimits, checkSamplingTokenIds, checkTokenIdsInVocab } from "../../api/sampling-limits.ts";
import { localBlockHashes } from "../../blocks/block-hash.ts";
import { contextTokensOf, type ModelConfig } from "../../config/config.ts";
import { getQwenTokenizer } from "../../prompt/tokenizer/index.ts";
import { buildGenerateBody, newRequestId } from "../../proxy/generate-request.ts";
import type { OpenAIUsage } from "../../proxy/usage.ts";
import { startEdgeTrace } from "../../util/trace-context.ts";
import { authorizeClient } from "../auth.ts";
import { edgeCachePartition, namespacedHashes } from "../cache-salt.ts";
import type { ChatDeps } from "../chat.ts";
import { forward } from "../chat/forward.ts";
import { costlyLogprobStream } from "../chat/chat-answer.ts";
import { PLAIN_OUTPUT } from "../../proxy/chat-output.ts";
import { limitsOf } from "../chat/parse.ts";
import { cacheTenant, resolveChatModel } from "../chat/resolve-model.ts";
import { edgeColoOf, routeTarget } from "../chat/route.ts";
import { admissionTicket, type AdmissionInput } from "../chat/admission.ts";
import { affinityKeyOf } from "../chat/affinity.ts";
import type { ClientRef } from "../client-label.ts";
import { clientNetwork } from "../rate-limit.ts";
import { StageClock } from "../server-timing.ts";
import { takeTokenQuota, withLimitHeaders } from "../token-quota.ts";
import { completionAnswer, type TextCompletion } from "./completion-answer.ts";

export async function handleCompletions(request: Request, deps: ChatDeps): Promise<Response> {
  const { config } = deps;
  const clock = new StageClock();
  const trace = deps.trace ?? startEdgeTrace(request.headers.get("traceparent"));
  const caller = authorizeClient(request, config);
  const limitHeaders = (await deps.rateLimit?.(caller.apiKey)) ?? {};
  const limits = limitsOf(config);
  const req = parseCompletion(await readBodyText(request, limits), limits);
  const sampling = samplingRequestOf(req);
  checkSamplingLimits(sampling, limits);
  clock.mark("parse");
  const prompts = promptsOf(req, limits);
  const address = request.headers.get("cf-connecting-ip");
  const tenant = cacheTenant(caller, address);
  const { model, adapter, namespace } = await resolveChatModel(config, req.model, tenant);
  // A prompt is one tokenizer segment: its cached ids are the caller's partition's (segment-cache.ts).
  const partition = await edgeCachePartition(config, tenant);
  const tokenizer = getQwenTokenizer(model.family);
  checkSamplingTokenIds(sampling, tokenizer.vocabSize);
  const showRouting = caller.admin || config.debugHeaders;
  // Streamed logprobs cost what chat's do (cumulative frames): past the bound, incremental workers only, else the 400.
  const costly = costlyLogprobStream(sampling, { ...PLAIN_OUTPUT, logprobs: sampling.logprobs }, req.max_tokens);
  // Admission's tenant, as chat names it (chat/parse.ts): the API key, else the client's network.
  const client: ClientRef | null = caller.apiKey !== null ? { apiKey: caller.apiKey } : address ? { network: clientNetwork(address) } : null;

  // Every prompt is counted (and checked) before any is routed: the batch takes its tokens from the
  // caller's quotas at once, as chat does (token-quota.ts); each prompt's n samples share its prefill.
  const encoded = prompts.map((prompt, i) => {
    const param = prompts.length > 1 ? `prompt[${i}]` : "prompt";
    if ("text" in prompt && prompt.text.length > limits.maxPromptChars) throw new InvalidRequestError(`The prompt is ${prompt.text.length} characters, more than this endpoint accepts (${limits.maxPromptChars}).`, param, "context_length_exceeded");
    if ("ids" in prompt) checkTokenIdsInVocab(prompt.ids, tokenizer.vocabSize, (j) => `${param}[${j}]`);
    const ids = "ids" in prompt ? prompt.ids : tokenizer.encode(prompt.text, partition, prompt.text.length);
    if (ids.length === 0) throw new InvalidRequestError("The prompt is empty.", param);
    checkFit(ids.length, req.max_tokens, model, param);
    return ids;
  });
  const quotaHeaders = await takeTokenQuota(deps, caller.apiKey, {
    input: encoded.reduce((sum, ids) => sum + ids.length, 0),
    output: req.max_tokens * req.n * prompts.length,
  });

  const one = async (prompt: CompletionPrompt, i: number): Promise<Response> => {
    const ids = encoded[i]!;
    const requestId = newRequestId();
    const body = buildGenerateBody(sampling, { text: "text" in prompt ? prompt.text : "", rid: requestId, streamInterval: config.routing.streamInterval ?? null });
    const wire: Record<string, unknown> = { ...body };
    if ("ids" in prompt) {
      delete wire.text;
      wire.input_ids = prompt.ids;
    }
    if (namespace.cacheSalt !== null) wire.cache_salt = wire.extra_key = namespace.cacheSalt;
    if (adapter !== null) wire.lora_path = adapter;
    const blob = new Blob([JSON.stringify(wire)], { type: "application/json" });
    // Each prompt waits in the pool's admission queue as a chat request does (its n samples share the prompt's KV).
    const ticket = admissionTicket({ requestId, serviceTier: undefined, client, priorityAllowed: false, decodeBudget: req.max_tokens * req.n });
    const admissionIndex = deps.admissionIndex;
    const admission: AdmissionInput | null = admissionIndex
      ? {
          index: (m, k) => admissionIndex(m, k),
          ticket,
          affinityKey: affinityKeyOf(ticket.tenant, { sessionHeader: request.headers.get("x-session-id"), user: req.user }),
          signal: request.signal ?? null,
          waitUntil: deps.waitUntil,
        }
      : null;
    const target = routeTarget({
      index: deps.index,
      shards: config.shards,
      model: model.id,
      localHashes: namespacedHashes(namespace, { localHashes: localBlockHashes(ids, model.blockSize) }),
      isl: ids.length,
      fallbackReason: null,
      edgeColo: edgeColoOf(request, config),
      traceId: trace.traceId,
      incrementalOnly: costly !== null,
      ...(admission ? { admission } : {}),
      receiptOutbox: deps.receiptOutbox,
      waitUntil: deps.waitUntil,
    });
    const echo = req.echo ? ("text" in prompt ? prompt.text : tokenizer.decode(prompt.ids)) : null;
    return forward(deps, {
      model: model.id,
      target,
      fallbackReason: null,
      bodyFor: async () => blob,
      answer: completionAnswer({ sampling, id: `cmpl-${requestId}`, echo, firstIndex: i * req.n }),
      requestId,
      trace,
      clientSignal: request.signal ?? null,
      showRouting,
      admin: caller.admin,
      clock,
      noneEligible: costly,
    });
  };

  if (prompts.length === 1) return withLimitHeaders(await one(prompts[0]!, 0), limitHeaders, quotaHeaders);
  const answers = await Promise.all(prompts.map(one));
  const failed = answers.find((r) => r.status !== 200);
  if (failed) return failed;
  const parts = (await Promise.all(answers.map((r) => r.json()))) as TextCompletion[];
  const first = parts[0]!;
  const merged: TextCompletion = { ...first, choices: parts.flatMap((p) => p.choices), usage: sumUsage(parts.map((p) => p.usage)) };
  const batch = new Response(JSON.stringify(merged), { status: 200, headers: { "content-type": "application/json", "x-request-id": first.id.replace(/^cmpl-/, "") } });
  return withLimitHeaders(batch, limitHeaders, quotaHeaders);
}

function parseCompletion(text: string, limits: ReturnType<typeof limitsOf>): CompletionRequest {
  const req = parseSchemaBody(text, limits, CompletionRequestSchema);
  refuseUnsupportedCompletion(req);
  return req;
}

/** SGLang refuses input + max_new_tokens ≥ context unless its workers clamp (--allow-auto-truncate). */
function checkFit(promptTokens: number, maxTokens: number, model: ModelConfig, param: string): void {
  if (model.allowAutoTruncate) return;
  const context = contextTokensOf(model);
  if (promptTokens + maxTokens >= context)
    throw new InvalidRequestError(`The prompt (${promptTokens} tokens) plus max_tokens (${maxTokens}) does not fit the model's context length (${context} tokens).`, param, "context_length_exceeded");
}

function sumUsage(list: readonly OpenAIUsage[]): OpenAIUsage {
  const out = structuredClone(list[0]!);
  for (const u of list.slice(1)) {
    out.prompt_tokens += u.prompt_tokens;
    out.completion_tokens += u.completion_tokens;
    out.total_tokens += u.total_tokens;
    out.prompt_tokens_details.cached_tokens += u.prompt_tokens_details.cached_tokens;
  }
  return out;
}
