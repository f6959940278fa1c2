/**
 * Stage 1, parse: who is calling, the rate-limit verdict, then the body read (bounded) and validated
 * into a chat request.
 */
import type { Limits } from "../../api/limits.ts";
import type { ChatCompletionRequest } from "../../api/openai-schema.ts";
import { decodeBodyBytes, parseChatRequest, readBody, type ParseWork, type ReadBody, type ReusedMessages } from "../../api/validate.ts";
import type { EdgeConfig } from "../../config/config.ts";
import { parseToolsKeepingNumbers, type ModelProfile } from "../../prompt/index.ts";
import { sharedTurnChain, type BodyLayout, type ChainFind, type TurnChainCache } from "../../prompt/turn-chain.ts";
import type { JsonLiteral } from "../../util/json-scan.ts";
import { SplitText } from "../../util/split-text.ts";
import { authorizeClient, type ClientIdentity } from "../auth.ts";
import { countCheck, countMismatch, sampledCheck } from "../exactness.ts";
import { edgeCachePartition } from "../cache-salt.ts";
import type { ClientRef } from "../client-label.ts";
import { clientNetwork } from "../rate-limit.ts";
import type { StageClock } from "../server-timing.ts";
import { cacheTenant, resolveModel } from "./resolve-model.ts";

export interface ParseDeps {
  config: EdgeConfig;
  /**
   * The body, when the caller wrote it (the Responses route, which seeds the caches from its scan):
   * the request carries none, and the text is parsed as given, its size checked as readBodyText
   * checks it, so the body is neither UTF-8 encoded and decoded nor scanned a second time.
   */
  scanned?: ScannedBody;
  /** Takes one request from the client's rate-limit bucket (null key = no API keys configured); rejects with 429; resolves to the bucket's `x-ratelimit-*-requests`. */
  rateLimit?: (apiKey: string | null) => Promise<Record<string, string> | void>;
}

export interface ParsedChat {
  caller: ClientIdentity;
  /** Routing headers reveal topology and other tenants' cached prefixes: admin callers or debug only. */
  showRouting: boolean;
  req: ChatCompletionRequest;
  /** The request bucket's `x-ratelimit-*-requests` for the answer (none with rate limiting off). */
  limitHeaders: Record<string, string>;
  /**
   * The body as read: the prompt stage keys earlier turns' rendered text by its messages' raw JSON
   * (prompt/turn-chain.ts). With a held prefix a rope of its parts, which no stage reads whole on a
   * hit (`turn.body` holds the parts).
   */
  bodyText: string;
  /** Long message texts whose JSON escaping can go to the worker as the client sent it (generate-body.ts). */
  literals: JsonLiteral[];
  /** The turn chain's lookup for this body (the prompt stage uses it), or null. */
  turn: ChainFind | null;
  /** What the parse read (the body less the messages the turn chain held). */
  work: ParseWork;
  /** The client's address (cf-connecting-ip); null outside Cloudflare. */
  address: string | null;
  /** Whose request it is (the media store's fair share); null when the edge cannot tell clients apart. */
  client: ClientRef | null;
  /** Whose entries of the edge's prompt caches the request may use (cache-salt.ts edgeCachePartition). */
  partition: string;
}

/** A body its caller wrote: the text and scanBodyLayout(text) (null for a text over maxBodyBytes, not scanned). */
export interface ScannedBody {
  text: string;
  layout: BodyLayout | null;
}

/** The configured request limits (parsed with the rest of the config, once per isolate). */
export function limitsOf(config: EdgeConfig): Limits {
  return config.limits;
}

export async function parseChat(request: Request, deps: ParseDeps, clock: StageClock): Promise<ParsedChat> {
  const { config } = deps;
  const caller = authorizeClient(request, config);
  // The rate-limit verdict comes before the body is read: a refused client cannot make the edge
  // read, buffer or parse up to maxBodyBytes (or wait on a body that never ends).
  const limitHeaders = (await deps.rateLimit?.(caller.apiKey)) ?? {};
  const limits = limitsOf(config);
  const given = deps.scanned ?? null;
  const address = request.headers.get("cf-connecting-ip");
  // Stages "auth" (the caller and its rate-limit verdict) and "partition" end before the body's "read".
  clock.mark("auth");
  const partition = await edgeCachePartition(config, cacheTenant(caller, address));
  clock.mark("partition");
  const chain = sharedTurnChain(config.turnCheckRate);
  // The turn chain's held bodies of the caller's partition give the text of a known prefix: only the rest is decoded.
  const read = given ? null : await readBody(request, limits, (bytes) => chain.heldBodyText(bytes, partition));
  const body = given ? SplitText.of(given.text) : checkedHeldRead(read!, chain, partition);
  const bodyText = body.joined;
  clock.mark("read");
  const literals: JsonLiteral[] = [];
  const work: ParseWork = { parsedChars: 0, validatedMessages: 0 };
  const { req, turn } = parseChatTurn(body, config, partition, { sizeChecked: given === null, literals, work, layout: given?.layout, bytes: read?.bytes ?? null }, chain);
  clock.mark("parse");
  // Without a key or a client address (a local fleet) the edge cannot tell clients apart: no label.
  const client: ClientRef | null = caller.apiKey !== null ? { apiKey: caller.apiKey } : address ? { network: clientNetwork(address) } : null;
  return { caller, showRouting: caller.admin || config.debugHeaders, req, limitHeaders, bodyText, literals, turn, work, address, client, partition };
}

/**
 * The read's text in its parts; a share of reads that took a held prefix's text (the chain's
 * checks: checkRate, sampled with its `random`) is also decoded whole and compared. A difference
 * is counted and logged (exactness.ts, kind `body_prefix`), drops the held body of `partition`
 * that gave the prefix and its entry (later reads do not take it again) and uses the whole decoding.
 */
export function checkedHeldRead(read: ReadBody, chain: TurnChainCache, partition: string): SplitText {
  if (read.heldBytes === 0 || read.bytes === null || !chain.sampled()) return read.body;
  countCheck("body_prefix");
  let whole: string | null;
  let invalid: unknown = null;
  try {
    whole = decodeBodyBytes(read.bytes);
  } catch (e) {
    whole = null;
    invalid = e;
  }
  if (whole === read.text) return read.body;
  countMismatch("body_prefix", { bytes: read.bytes.length, heldBytes: read.heldBytes });
  chain.dropHeldBody(read.bytes.subarray(0, read.heldBytes), partition);
  if (whole === null) throw invalid;
  return SplitText.of(whole);
}

/** The profile of the pool the body's `model` member names, read from its text alone; null when it names none. */
function profileOfModelMember(bodyText: SplitText, layout: BodyLayout, config: EdgeConfig): ModelProfile | null {
  const span = layout.members.get("model");
  if (!span || bodyText.charCodeAt(span[0]) !== 0x22 || span[1] - span[0] > config.limits.maxModelChars + 2) return null;
  try {
    const model: unknown = JSON.parse(bodyText.slice(span[0], span[1]));
    if (typeof model !== "string") return null;
    const { family, templateId } = resolveModel(config, model).model;
    return { family, templateId };
  } catch {
    return null;
  }
}

/**
 * parseChatBody reading only what the turn chain does not hold: the messages an earlier body of
 * the conversation already had (same raw text, same scope) come as that body's parse validated
 * them, with their counts towards the whole-body limits; the verdict is the whole body's
 * (validate.ts parseChatRequest, `reuse`). A share of such parses (the chain's check rate) is
 * also made whole and compared; a difference is counted and logged (exactness.ts, kind `parse`),
 * drops the entries the reused messages came from, and the whole parse is used. `partition`:
 * whose entries of the chain it may use (cache-salt.ts edgeCachePartition; "" the common one).
 */
export function parseChatTurn(
  given: string | SplitText,
  config: EdgeConfig,
  partition: string,
  opts: { sizeChecked?: boolean; literals?: JsonLiteral[]; work?: ParseWork; random?: () => number; layout?: BodyLayout | null; bytes?: Uint8Array | null } = {},
  chain: TurnChainCache = sharedTurnChain(config.turnCheckRate),
): { req: ChatCompletionRequest; turn: ChainFind | null } {
  const limits = limitsOf(config);
  // A split body (a held prefix's text, then the rest) is read in its parts: never joined on a hit.
  const bodyText = typeof given === "string" ? SplitText.of(given) : given;
  // The lookup hashes a window per message count: only for a body the message limit admits (it runs before validation).
  // A caller that scanned bodyText passes its layout (not scanned twice); the chain's scan takes a held prefix's spans from its entries.
  const scanned = bodyText.length <= limits.maxBodyBytes ? (opts.layout !== undefined ? opts.layout : chain.scanLayout(bodyText, partition)) : null;
  const layout = scanned && scanned.messages.length <= limits.maxMessages ? scanned : null;
  const profile = layout ? profileOfModelMember(bodyText, layout, config) : null;
  const turn = profile ? chain.find(bodyText, profile, partition, layout) : null;
  const reuse = chain.reusedMessages(turn);
  const req = parseChatBody(bodyText, limits, { sizeChecked: opts.sizeChecked, literals: opts.literals, work: opts.work, reuse, layout });
  if (reuse && sampledCheck(chain.checkRate, opts.random)) {
    countCheck("parse");
    const whole = parseChatBody(bodyText.joined, limits, { sizeChecked: opts.sizeChecked, layout });
    if (JSON.stringify(whole) !== JSON.stringify(req)) {
      // The entries that gave the reused messages go (with every entry extending them), so no later body reuses them.
      const dropped = turn?.hit ? chain.dropHolding(turn.hit.chain.map((n) => n.textId)) : 0;
      countMismatch("parse", { messages: whole.messages.length, reusedMessages: reuse.messages.length, dropped });
      return { req: whole, turn: null };
    }
  }
  // The chain's store takes the strings this parse decoded instead of decoding them again, and
  // keeps the hit's prefix of the body's bytes (`bytes`: what bodyText was decoded from) for the next body's read.
  if (!turn || (!opts.literals && !opts.bytes)) return { req, turn };
  return { req, turn: { ...turn, ...(opts.literals ? { decoded: opts.literals } : {}), ...(opts.bytes ? { bodyBytes: opts.bytes } : {}) } };
}

/**
 * The chat request as the handler reads it: validated, and when it has tools, each tool's
 * `parameters` (free-form JSON the template prints) re-read from the body keeping every number's
 * JSON lexeme. SGLang's `json.loads` keeps `0.0` a float and the template's `tojson` prints `0.0`
 * where a JS number would print `0` (a different prompt), so only the lexeme gives the worker's
 * tools block (docs/prompt.md, number policy). The rest of each tool stays as validated.
 */
export function parseChatBody(
  bodyText: string | SplitText,
  limits: Limits,
  opts: { sizeChecked?: boolean; literals?: JsonLiteral[]; work?: ParseWork; reuse?: ReusedMessages | null; layout?: BodyLayout | null } = {},
): ChatCompletionRequest {
  const req = parseChatRequest(bodyText, limits, opts);
  if (req.tools && req.tools.length > 0) {
    // Only the `tools` member is read (a split body's held messages never hold it).
    const span = opts.layout?.members.get("tools");
    const raw = typeof bodyText === "string" ? parseToolsKeepingNumbers(bodyText, span) : span ? parseToolsKeepingNumbers(bodyText.slice(span[0], span[1]), [0, span[1] - span[0]]) : parseToolsKeepingNumbers(bodyText.joined);
    if (raw && raw.length === req.tools.length) {
      req.tools = req.tools.map((t, i) => {
        const params = (raw[i] as { function?: { parameters?: unknown } } | null)?.function?.parameters;
        return params && typeof params === "object" && !Array.isArray(params) ? { ...t, function: { ...t.function, parameters: params as Record<string, unknown> } } : t;
      });
    }
  }
  return req;
}
