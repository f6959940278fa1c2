/**
 * Stage 6, build: the worker's `/generate` body for a chat request (prompt text, sampling, output
 * parsers, media, mm_hashes, cache namespace, adapter), streamed from chunks that keep long texts
 * as the client escaped them.
 */
import type { ChatCompletionRequest } from "../../api/openai-schema.ts";
import { bodyOfChunks, generateBodyParts } from "../../proxy/generate-body.ts";
import { buildGenerateBody } from "../../proxy/generate-request.ts";
import { requiresReasoning, type ModelParsers } from "../../proxy/chat-output.ts";
import { sharedTurnChain, type PromptPieces } from "../../prompt/turn-chain.ts";
import type { JsonLiteral } from "../../util/json-scan.ts";
import { needsWorkerForwards, workerForwards, type MediaSigner, type VerifiedMedia } from "../media.ts";
import { sampledCheck } from "../exactness.ts";
import { checkedBodyParts } from "./exactness-check.ts";
import type { RoutingPlan } from "./layout.ts";

export interface ChatBodyInput {
  req: ChatCompletionRequest;
  literals: readonly JsonLiteral[];
  promptText: string;
  /** The prompt in the turn chain's pieces: their escaping is sent as is, only the rest is escaped. */
  promptPieces?: PromptPieces | null;
  requestId: string;
  /** max_new_tokens when the client set none (generate-request.ts outputCap); null: the worker's. */
  defaultMaxNewTokens: number | null;
  parsers: ModelParsers;
  plan: RoutingPlan;
  media: readonly VerifiedMedia[];
  /** Signs a stored item's URL for one worker; null without a media store. */
  sign: MediaSigner | null;
  cacheSalt: string | null;
  adapter: string | null;
  /** Output tokens per stream frame (routing.streamInterval); null: the worker's own setting. */
  streamInterval: number | null;
}

/** The body for a given worker: one shared body, unless stored media go under URLs signed for each worker. */
export async function chatUpstreamBody(input: ChatBodyInput): Promise<(workerId: string) => Promise<Blob>> {
  const { req, plan } = input;
  const bodyFor = async (workerId: string): Promise<Blob> => {
    const body = buildGenerateBody(req, {
      text: input.promptText,
      rid: input.requestId,
      defaultMaxNewTokens: input.defaultMaxNewTokens,
      requireReasoning: requiresReasoning(req, input.parsers),
      toolCallParser: input.parsers.toolCallParser,
      streamInterval: input.streamInterval,
      media: {
        ...(await workerForwards(input.media, input.sign, workerId)),
        ...(plan.mmHashes ? { mmHashes: plan.mmHashes } : {}),
      },
    });
    if (input.cacheSalt !== null) {
      body.cache_salt = input.cacheSalt;
      // Older SGLang /generate has no cache_salt (dropped silently) but namespaces by extra_key.
      body.extra_key = input.cacheSalt;
    }
    if (input.adapter !== null) body.lora_path = input.adapter;
    const parts = generateBodyParts(body, input.literals, input.promptPieces ?? null);
    // A sampled share (the configured check rate, which the edge sets on the chain) is also compared with JSON.stringify (exactness-check.ts).
    const chain = sharedTurnChain();
    return bodyOfChunks(sampledCheck(chain.checkRate) ? checkedBodyParts(parts, body, input.promptPieces ?? null, chain) : parts);
  };
  if (needsWorkerForwards(input.media)) return bodyFor;
  const shared = await bodyFor("");
  return async () => shared;
}
