/**
 * The edge's client for the regional decode service. It never throws for service trouble: every
 * failure (not configured, timeout, unreachable, refused, bad answer) becomes a typed fallback
 * reason the edge records while routing that request by text prefix.
 */
import { z } from "zod";
import { ProbeResultSchema, type ProbeResult } from "./probe-result.ts";
import { fastStoreResult, HeldResultSchema, StoreResultSchema, type StoreResult } from "./store-result.ts";

export const DecodeServiceConfigSchema = z.object({
  /** Base URL, e.g. "http://127.0.0.1:7070". Unset = no media store (images inline, video URLs refused). */
  url: z.url().optional(),
  token: z.string().min(1).optional(),
  /** Budget for one store/probe call, the service's fetch of the media included. */
  timeoutMs: z.number().int().positive().default(15_000),
});
export type DecodeServiceConfig = z.output<typeof DecodeServiceConfigSchema>;

export type DecodeFallbackReason =
  | "decode_not_configured"
  | "decode_timeout"
  | "decode_unreachable"
  | "decode_auth"
  | "decode_media_rejected"
  | "decode_overloaded"
  | "decode_error"
  | "decode_bad_response"
  /** The caller's request ended (client gone, or another item of it failed): nothing is routed on this. */
  | "decode_cancelled";

export type ProbeOutcome =
  | { ok: true; probe: ProbeResult; cache: string | null }
  | { ok: false; reason: DecodeFallbackReason; detail: string; status: number | null };

export type HeldOutcome = { ok: true; held: boolean[]; leaseMs: number[] | null } | { ok: false; reason: DecodeFallbackReason; detail: string; status: number | null };

export type ProbeInput = { url: string } | { bytes: Uint8Array };

/**
 * The store's answer, or why there is none. `clientError` marks refusals about the media itself
 * (the service's 4xx: blocked address, fetch failed, too large, …) with the service's code and
 * message; the rest are the service's own trouble.
 */
export type StoreOutcome =
  | { ok: true; result: StoreResult; cache: string | null }
  | { ok: false; reason: DecodeFallbackReason; detail: string; status: number | null; code: string | null };

type Fetch = (input: string, init: RequestInit) => Promise<Response>;

/**
 * Whose call it is and when to stop: `client` is the edge's opaque label of its client (sent as
 * `x-kvedge-client`; the service gives each client at most a share of its slots), `signal` ends
 * the call when the client's request has gone, `traceparent` is the request's W3C trace context
 * at the edge (src/util/trace-context.ts), which the service logs.
 */
export interface DecodeCallOptions {
  client?: string | null;
  signal?: AbortSignal | null;
  traceparent?: string | null;
}

export class DecodeClient {
  private readonly config: DecodeServiceConfig;
  private readonly fetchImpl: Fetch;
  /** The configured URL without trailing slashes (routes are appended). */
  private readonly base: string | undefined;

  constructor(config: z.input<typeof DecodeServiceConfigSchema>, fetchImpl?: Fetch) {
    this.config = DecodeServiceConfigSchema.parse(config);
    this.fetchImpl = fetchImpl ?? ((u, i) => fetch(u, i));
    this.base = this.config.url?.replace(/\/+$/, "");
  }

  get configured(): boolean {
    return this.config.url !== undefined;
  }

  /** Has the media store fetch `url` (SSRF-safe, once) and keep its bytes; answers their digest and metadata. */
  async store(url: string, kind: "image" | "video", call: DecodeCallOptions = {}): Promise<StoreOutcome> {
    const out = await this.call("/v1/store", "application/json", JSON.stringify({ url, kind }), call);
    if (!out.ok) return out;
    const fast = fastStoreResult(out.json);
    if (fast !== null) return { ok: true, result: fast, cache: out.cache };
    const parsed = StoreResultSchema.safeParse(out.json);
    if (!parsed.success) return { ok: false, reason: "decode_bad_response", detail: issues(parsed.error), status: out.status, code: null };
    return { ok: true, result: parsed.data, cache: out.cache };
  }

  /** Which of `digests` (at most MAX_HELD_DIGESTS) the media store still holds, one per digest in order; each held is marked used and leased (`leaseMs`, null from a store without leases). */
  async held(digests: readonly string[], call: DecodeCallOptions = {}): Promise<HeldOutcome> {
    const out = await this.call("/v1/store/held", "application/json", JSON.stringify({ digests }), call);
    if (!out.ok) return { ok: false, reason: out.reason, detail: out.detail, status: out.status };
    const parsed = HeldResultSchema.safeParse(out.json);
    if (!parsed.success) return { ok: false, reason: "decode_bad_response", detail: issues(parsed.error), status: out.status };
    const { held, leaseMs } = parsed.data;
    if (held.length !== digests.length) return { ok: false, reason: "decode_bad_response", detail: `${held.length} answers for ${digests.length} digests`, status: out.status };
    if (leaseMs && leaseMs.length !== digests.length) return { ok: false, reason: "decode_bad_response", detail: `${leaseMs.length} lease lengths for ${digests.length} digests`, status: out.status };
    return { ok: true, held, leaseMs: leaseMs ?? null };
  }

  async probe(input: ProbeInput, call: DecodeCallOptions = {}): Promise<ProbeOutcome> {
    const out = "url" in input
      ? await this.call("/v1/probe", "application/json", JSON.stringify({ url: input.url }), call)
      : await this.call("/v1/probe", "application/octet-stream", input.bytes, call);
    if (!out.ok) return { ok: false, reason: out.reason, detail: out.detail, status: out.status };
    const parsed = ProbeResultSchema.safeParse(out.json);
    if (!parsed.success) return { ok: false, reason: "decode_bad_response", detail: issues(parsed.error), status: out.status };
    return { ok: true, probe: parsed.data, cache: out.cache };
  }

  private async call(
    route: string,
    contentType: string,
    body: BodyInit,
    { client = null, signal = null, traceparent = null }: DecodeCallOptions,
  ): Promise<{ ok: true; json: unknown; status: number; cache: string | null } | { ok: false; reason: DecodeFallbackReason; detail: string; status: number | null; code: string | null }> {
    const base = this.base;
    if (!base) return { ok: false, reason: "decode_not_configured", detail: "no decode service URL configured", status: null, code: null };
    const ctrl = new AbortController();
    const timer = setTimeout(() => ctrl.abort(), this.config.timeoutMs);
    const onAbort = (): void => ctrl.abort();
    signal?.addEventListener("abort", onAbort, { once: true });
    const headers: Record<string, string> = { "content-type": contentType };
    if (this.config.token) headers.authorization = `Bearer ${this.config.token}`;
    if (client) headers["x-kvedge-client"] = client;
    if (traceparent) headers.traceparent = traceparent;
    try {
      const res = await this.fetchImpl(base + route, { method: "POST", headers, body, signal: ctrl.signal });
      const text = await res.text();
      if (!res.ok) {
        const err = errorOf(text);
        const detail = err?.message ?? `HTTP ${res.status}`;
        const reason: DecodeFallbackReason =
          res.status === 401 || res.status === 403 ? "decode_auth"
          : res.status === 400 || res.status === 413 || res.status === 422 ? "decode_media_rejected"
          : res.status === 429 || res.status === 503 ? "decode_overloaded"
          : res.status === 504 ? "decode_timeout"
          : "decode_error";
        return { ok: false, reason, detail, status: res.status, code: err?.code ?? null };
      }
      let json: unknown;
      try {
        json = JSON.parse(text);
      } catch {
        return { ok: false, reason: "decode_bad_response", detail: "response is not JSON", status: res.status, code: null };
      }
      return { ok: true, json, status: res.status, cache: res.headers.get("x-cache") };
    } catch (e) {
      if (signal?.aborted) return { ok: false, reason: "decode_cancelled", detail: "the request was cancelled", status: null, code: null };
      if (ctrl.signal.aborted) return { ok: false, reason: "decode_timeout", detail: `no answer within ${this.config.timeoutMs} ms`, status: null, code: null };
      return { ok: false, reason: "decode_unreachable", detail: (e as Error).message, status: null, code: null };
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
    }
  }
}

function issues(e: z.ZodError): string {
  return e.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ");
}

function errorOf(text: string): { message: string; code: string | null } | null {
  try {
    const j = JSON.parse(text) as { error?: { message?: unknown; code?: unknown } };
    if (typeof j.error?.message !== "string") return null;
    return { message: j.error.message, code: typeof j.error.code === "string" ? j.error.code : null };
  } catch {
    return null;
  }
}
