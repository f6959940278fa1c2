/**
 * Stage 1, parse: who is calling, the rate-limit verdict, then the body read (bounded) and validated
 * into a chat request.
 */
import type { Limits } from "../../api/limits.ts";
import type { ChatCompletionRequest } from "../../api/openai-schema.ts";
import { parseChatRequest, readBodyText } from "../../api/validate.ts";
import type { EdgeConfig } from "../../config/config.ts";
import { parseToolsKeepingNumbers } from "../../prompt/index.ts";
import type { JsonLiteral } from "../../util/json-scan.ts";
import { authorizeClient, type ClientIdentity } from "../auth.ts";
import type { ClientRef } from "../client-label.ts";
import { clientNetwork } from "../rate-limit.ts";
import type { StageClock } from "../server-timing.ts";

export interface ParseDeps {
  config: EdgeConfig;
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
  /** The body as read: the prompt stage keys earlier turns' rendered text by its messages' raw JSON (prompt/turn-chain.ts). */
  bodyText: string;
  /** Long message texts whose JSON escaping can go to the worker as the client sent it (generate-body.ts). */
  literals: JsonLiteral[];
  /** The client's address (cf-connecting-ip); null outside Cloudflare. */
  address: string | null;
  /** Whose request it is (the media store's fair share); null when the edge cannot tell clients apart. */
  client: ClientRef | null;
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
  const bodyText = await readBodyText(request, limits);
  clock.mark("read");
  const literals: JsonLiteral[] = [];
  const req = parseChatBody(bodyText, limits, { sizeChecked: true, literals });
  clock.mark("parse");
  // Without a key or a client address (a local fleet) the edge cannot tell clients apart: no label.
  const address = request.headers.get("cf-connecting-ip");
  const client: ClientRef | null = caller.apiKey !== null ? { apiKey: caller.apiKey } : address ? { network: clientNetwork(address) } : null;
  return { caller, showRouting: caller.admin || config.debugHeaders, req, limitHeaders, bodyText, literals, address, client };
}

/**
 * The chat request as the handler reads it: validated, and when it has tools, each tool's
 * `parameters` (free-form JSON the template prints) re-read from the body keeping every number's
 * JSON lexeme. SGLang's `json.loads` keeps `0.0` a float and the template's `tojson` prints `0.0`
 * where a JS number would print `0` (a different prompt), so only the lexeme gives the worker's
 * tools block (docs/prompt.md, number policy). The rest of each tool stays as validated.
 */
export function parseChatBody(bodyText: string, limits: Limits, opts: { sizeChecked?: boolean; literals?: JsonLiteral[] } = {}): ChatCompletionRequest {
  const req = parseChatRequest(bodyText, limits, opts);
  if (req.tools && req.tools.length > 0) {
    const raw = parseToolsKeepingNumbers(bodyText);
    if (raw && raw.length === req.tools.length) {
      req.tools = req.tools.map((t, i) => {
        const params = (raw[i] as { function?: { parameters?: unknown } } | null)?.function?.parameters;
        return params && typeof params === "object" && !Array.isArray(params) ? { ...t, function: { ...t.function, parameters: params as Record<string, unknown> } } : t;
      });
    }
  }
  return req;
}
