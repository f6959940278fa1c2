/**
 * `/v1/responses` at the edge. POST translates the request into the chat request with the same
 * messages (src/api/responses-schema.ts) and runs it through the chat handler, so routing, media,
 * limits, proxying and settling are the chat path's own and the prompt is the same prompt; the answer
 * is translated back (response-output.ts). `previous_response_id` prepends the stored conversation
 * of the caller's own tenant, and seeds the isolate's prompt caches with its stored prompt state
 * (conversation-state.ts), so only the new items are rendered, tokenized and hashed; GET and DELETE
 * `/v1/responses/{id}` read and remove it there.
 */
import { InvalidRequestError, MethodNotAllowedError, NotFoundError } from "../../api/errors.ts";
import { parseSchemaBody, readBodyText } from "../../api/validate.ts";
import { inputToMessages, refuseUnsupported, ResponseCreateSchema, toChatRequest, type ChatMessage, type InputItem, type ResponseCreateRequest } from "../../api/responses-schema.ts";
import { authorizeClient } from "../auth.ts";
import { handleChatCompletions, type ChatDeps } from "../chat.ts";
import { limitsOf } from "../chat/parse.ts";
import { cacheTenant, resolveModel } from "../chat/resolve-model.ts";
import { edgeCachePartition } from "../cache-salt.ts";
import { scanBodyLayout, type StablePrefix } from "../../prompt/turn-chain.ts";
import { mediaSeeds, StoredMediaSchema, turnMedia, type StoredMedia } from "./stored-media.ts";
import { assembleState, hydrate, nextPiece, PromptPieceSchema, type ConversationState, type PromptPiece, type PromptTokens } from "./conversation-state.ts";
import type { AdmissionFrontDoor } from "../../routing-index/front-door.ts";

type IndexClient = ReturnType<ChatDeps["index"]>;
import { chatStreamToResponses, newItemId, outputItems, responseObject, responsesUsage, statusOf, type ChatCompletionLike, type OutputItem } from "./response-output.ts";
import { isResponseId, MAX_CONVERSATION_BYTES, MAX_STORED_RECORD_BYTES, STORED_BYTES_PER_TENANT, STORED_RESPONSE_TTL_MS, storeNameOf, type ResponseStoreClient, type StoredResponse } from "./stored-response.ts";

export interface ResponsesDeps extends ChatDeps {
  /** The tenant's response store (one object per tenant name); absent: storing is off. */
  responseStore?: (name: string) => ResponseStoreClient;
}

const RESPONSE_PATH = /^\/v1\/responses\/([^/]{1,128})$/;

/** Serves `/v1/responses` and `/v1/responses/{id}`; null for any other path. */
export async function handleResponsesRoute(request: Request, path: string, deps: ResponsesDeps): Promise<Response | null> {
  if (path === "/v1/responses") {
    if (request.method !== "POST") throw new MethodNotAllowedError(["POST"]);
    return createResponse(request, deps);
  }
  const m = RESPONSE_PATH.exec(path);
  if (!m) return null;
  if (request.method !== "GET" && request.method !== "DELETE") throw new MethodNotAllowedError(["GET", "DELETE"]);
  const caller = authorizeClient(request, deps.config);
  await deps.rateLimit?.(caller.apiKey);
  // Decoded once the caller is known: a malformed escape (%ZZ) names no stored response, so it is the 404.
  const id = decodedSegment(m[1]!);
  const store = storeFor(request, deps, caller);
  const notFound = () => new NotFoundError(`Response with id '${(id ?? m[1]!).slice(0, 64)}' not found.`, null, "response_not_found");
  if (!store || id === null || !isResponseId(id)) throw notFound();
  if (request.method === "DELETE") {
    if (!(await store.delete(id))) throw notFound();
    return json({ id, object: "response", deleted: true });
  }
  const body = await store.get(id, Date.now());
  if (body === null) throw notFound();
  return json((JSON.parse(body) as StoredResponse).response);
}

function decodedSegment(segment: string): string | null {
  try {
    return decodeURIComponent(segment);
  } catch {
    return null;
  }
}

function json(body: unknown, headers?: Headers): Response {
  const h = new Headers(headers);
  h.set("content-type", "application/json");
  return new Response(JSON.stringify(body), { status: 200, headers: h });
}

function storeFor(request: Request, deps: ResponsesDeps, caller: ReturnType<typeof authorizeClient>): ResponseStoreClient | null {
  if (!deps.responseStore) return null;
  return deps.responseStore(storeNameOf(cacheTenant(caller, request.headers.get("cf-connecting-ip"))));
}

function parseCreate(text: string, deps: ResponsesDeps): ResponseCreateRequest {
  const req = parseSchemaBody(text, limitsOf(deps.config), ResponseCreateSchema);
  refuseUnsupported(req);
  return req;
}

async function createResponse(request: Request, deps: ResponsesDeps): Promise<Response> {
  const caller = authorizeClient(request, deps.config);
  // The rate-limit verdict comes before the body is read and the store is asked; the chat handler
  // below is handed its headers instead of taking a second token. Token quotas are the chat
  // handler's own stage (deps.tokenQuota), so this route charges them exactly as chat does.
  const limitHeaders = (await deps.rateLimit?.(caller.apiKey)) ?? {};
  const req = parseCreate(await readBodyText(request, limitsOf(deps.config)), deps);
  const store = storeFor(request, deps, caller);
  let history: ChatMessage[] = [];
  let state: ConversationState | null = null;
  let storedMedia: StoredMedia[] = [];
  const parent = req.previous_response_id ?? null;
  if (parent !== null) {
    const bodies = store && isResponseId(parent) ? await store.chain(parent, Date.now(), MAX_CONVERSATION_BYTES) : null;
    if (bodies === null) throw new NotFoundError(`Previous response with id '${parent.slice(0, 64)}' not found.`, "previous_response_id", "previous_response_not_found");
    if (bodies === "too_large") throw new InvalidRequestError(`The conversation of '${parent.slice(0, 64)}' is longer than this endpoint continues (${MAX_CONVERSATION_BYTES} bytes stored).`, "previous_response_id", "context_length_exceeded");
    const records = bodies.map((b) => JSON.parse(b) as StoredResponse);
    history = records.flatMap((r) => r.messages);
    storedMedia = records.flatMap((r) => (Array.isArray(r.media) ? r.media.flatMap((m) => StoredMediaSchema.safeParse(m).data ?? []) : []));
    state = assembleState(records.map((r) => (r.prompt === null ? null : (PromptPieceSchema.safeParse(r.prompt).data ?? null))));
  }
  const input = inputToMessages(req.input);
  const chatBody = toChatRequest(req, history, input);
  const chatText = JSON.stringify(chatBody);
  const { model } = resolveModel(deps.config, req.model);
  // One layout scan of the chat body for the seeding below and the chat parse (which scans only a body within the cap).
  const scanned = { text: chatText, layout: chatText.length <= limitsOf(deps.config).maxBodyBytes ? scanBodyLayout(chatText) : null };
  // Another isolate served the earlier turns: their prompt state comes from the store, not from re-rendering
  // (other instructions render another prefix: nothing to seed).
  // Seeded in the caller's own partition of the prompt caches, as the chat path below reads them.
  const partition = await edgeCachePartition(deps.config, cacheTenant(caller, request.headers.get("cf-connecting-ip")));
  if (state !== null && state.instructions === (req.instructions ?? null)) hydrate(state, history, chatText, model, { checkRate: deps.config.turnCheckRate, layout: scanned.layout, partition });
  /** The stable prefix the turn chain holds for this request once its prompt is prepared, and this turn's verified media. */
  let stable: StablePrefix | null = null;
  /** A text prompt's ids and block hashes as the prefix cache gave them: the stored piece's are read from them, not made again. */
  let promptTokens: PromptTokens | null = null;
  let turnItems: StoredMedia[] = [];
  const lead = req.instructions ? 1 : 0;
  const onPrepared: ChatDeps["onPrepared"] = (prepared) => {
    if (!req.store || !store) return;
    stable = prepared.prompt.stable?.() ?? null;
    // A text prompt routes on its own local block hashes (prepare.ts); a media prompt's plan holds its view's.
    const ids = prepared.idPieces;
    promptTokens = ids && prepared.prompt.mediaParts.length === 0 ? { idPieces: ids, hashPieces: prepared.plan.hashPieces ?? [prepared.plan.localHashes] } : null;
    turnItems = turnMedia(prepared.prompt.mediaParts, prepared.media, lead + history.length, lead);
  };

  // The chat handler reads the caller's credentials, address and trace from these headers. No body:
  // the chat parse takes chatText and its layout from deps.scanned (one scan, no UTF-8 round trip).
  const chatRequest = new Request(request.url, { method: "POST", headers: request.headers, signal: request.signal });
  let worker: string | null = null;
  const index = (model: string, shard?: number): IndexClient => {
    const inner = deps.index(model, shard);
    return new Proxy(inner, {
      get(target, prop, receiver) {
        if (prop !== "route") return Reflect.get(target, prop, receiver) as unknown;
        const route: IndexClient["route"] = async (r) => {
          const d = await target.route(r);
          if (d) worker = d.workerId;
          return d;
        };
        return route;
      },
    });
  };
  // A first pick through the pool's admission queue names the worker too.
  const admitThrough = deps.admissionIndex;
  const admissionIndex = admitThrough
    ? (model: string, shard?: number): AdmissionFrontDoor => {
        const inner = admitThrough(model, shard);
        return {
          admit: async (r) => {
            const a = await inner.admit(r);
            if (a.kind === "routed") worker = a.decision.workerId;
            return a;
          },
          leaveQueue: (ticket) => inner.leaveQueue(ticket),
        };
      }
    : undefined;
  const chat = await handleChatCompletions(chatRequest, { ...deps, scanned, rateLimit: async () => limitHeaders, index, onPrepared, mediaSeeds: mediaSeeds(storedMedia, history), ...(admissionIndex ? { admissionIndex } : {}) });
  if (chat.status !== 200) return chat;

  const id = newItemId("resp");
  const createdAt = Math.floor(Date.now() / 1000);
  const keep = async (response: Record<string, unknown>, output: OutputItem[]): Promise<boolean> => {
    if (!store || !req.store) return false;
    const messages = [...input, ...inputToMessages(output as unknown as InputItem[])];
    const prompt: PromptPiece | null = stable === null ? null : nextPiece(state, stable, req.instructions ?? null, model, partition, promptTokens);
    // Too large with its prompt state: kept without it (a continuation then renders the history).
    let text = JSON.stringify({ response, messages, worker, prompt, media: turnItems } satisfies StoredResponse);
    if (prompt !== null && new TextEncoder().encode(text).byteLength > MAX_STORED_RECORD_BYTES) text = JSON.stringify({ response, messages, worker, prompt: null, media: turnItems } satisfies StoredResponse);
    if (new TextEncoder().encode(text).byteLength > MAX_STORED_RECORD_BYTES) return false;
    return store.put(id, parent, text, Date.now(), STORED_RESPONSE_TTL_MS, STORED_BYTES_PER_TENANT).catch((err: unknown) => {
      console.warn(JSON.stringify({ event: "response_store_failed", error: String(err).slice(0, 300) }));
      return false;
    });
  };

  const outHeaders = new Headers(chat.headers);
  outHeaders.delete("content-length");
  if (!req.stream) {
    const completion = (await chat.json()) as ChatCompletionLike;
    const output = outputItems(completion);
    const status = statusOf(completion.choices[0]?.finish_reason);
    const response = responseObject(id, req, createdAt, status, output, responsesUsage(completion.usage));
    // Not stored (too large, or the store failed): the answer says so, and a continuation would 404.
    if (req.store && !(await keep(response, output))) response.store = false;
    return json(response, outHeaders);
  }
  const translate = chatStreamToResponses(id, req, createdAt, (o) => (o.status === "failed" ? undefined : keep(o.response, o.output)));
  outHeaders.set("content-type", "text/event-stream");
  return new Response(chat.body!.pipeThrough(translate), { status: 200, headers: outHeaders });
}
