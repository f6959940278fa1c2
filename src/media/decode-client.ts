/**
 * The edge's client for the regional decode service. It never throws for service trouble: every
 * failure (not configured, timeout, unreachable, refused, bad answer) becomes a typed fallback
 * reason the edge records while routing that request by text prefix.
 */
import { z } from "zod";
import { ProbeResultSchema, type ProbeResult } from "./probe-result.ts";

export const DecodeServiceConfigSchema = z.object({
  /** Base URL, e.g. "http://127.0.0.1:7070". Unset = video identity disabled. */
  url: z.url().optional(),
  token: z.string().min(1).optional(),
  /** Budget for one probe call, fetch of the media by the service included. */
  timeoutMs: z.number().int().positive().default(8_000),
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
  | "decode_bad_response";

export type ProbeOutcome =
  | { ok: true; probe: ProbeResult; cache: string | null }
  | { ok: false; reason: DecodeFallbackReason; detail: string; status: number | null };

export type ProbeInput = { url: string } | { bytes: Uint8Array };

type Fetch = (input: string, init: RequestInit) => Promise<Response>;

export class DecodeClient {
  private readonly config: DecodeServiceConfig;
  private readonly fetchImpl: Fetch;

  constructor(config: z.input<typeof DecodeServiceConfigSchema>, fetchImpl?: Fetch) {
    this.config = DecodeServiceConfigSchema.parse(config);
    this.fetchImpl = fetchImpl ?? ((u, i) => fetch(u, i));
  }

  get configured(): boolean {
    return this.config.url !== undefined;
  }

  async probe(input: ProbeInput, signal?: AbortSignal): Promise<ProbeOutcome> {
    const base = this.config.url;
    if (!base) return { ok: false, reason: "decode_not_configured", detail: "no decode service URL configured", status: null };
    const ctrl = new AbortController();
    const timer = setTimeout(() => ctrl.abort(), this.config.timeoutMs);
    const onAbort = (): void => ctrl.abort();
    signal?.addEventListener("abort", onAbort, { once: true });
    const headers: Record<string, string> = {};
    if (this.config.token) headers.authorization = `Bearer ${this.config.token}`;
    let body: BodyInit;
    if ("url" in input) {
      headers["content-type"] = "application/json";
      body = JSON.stringify({ url: input.url });
    } else {
      headers["content-type"] = "application/octet-stream";
      body = input.bytes;
    }
    try {
      const res = await this.fetchImpl(`${base.replace(/\/+$/, "")}/v1/probe`, { method: "POST", headers, body, signal: ctrl.signal });
      const text = await res.text();
      if (!res.ok) {
        const detail = errorMessage(text) ?? `HTTP ${res.status}`;
        const reason: DecodeFallbackReason =
          res.status === 401 || res.status === 403 ? "decode_auth"
          : res.status === 400 || res.status === 413 || res.status === 422 ? "decode_media_rejected"
          : res.status === 429 || res.status === 503 ? "decode_overloaded"
          : res.status === 504 ? "decode_timeout"
          : "decode_error";
        return { ok: false, reason, detail, status: res.status };
      }
      let json: unknown;
      try {
        json = JSON.parse(text);
      } catch {
        return { ok: false, reason: "decode_bad_response", detail: "response is not JSON", status: res.status };
      }
      const parsed = ProbeResultSchema.safeParse(json);
      if (!parsed.success) {
        return { ok: false, reason: "decode_bad_response", detail: parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; "), status: res.status };
      }
      return { ok: true, probe: parsed.data, cache: res.headers.get("x-cache") };
    } catch (e) {
      if (ctrl.signal.aborted) return { ok: false, reason: "decode_timeout", detail: `no answer within ${this.config.timeoutMs} ms`, status: null };
      return { ok: false, reason: "decode_unreachable", detail: (e as Error).message, status: null };
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
    }
  }
}

function errorMessage(text: string): string | null {
  try {
    const j = JSON.parse(text) as { error?: { message?: unknown } };
    return typeof j.error?.message === "string" ? j.error.message : null;
  } catch {
    return null;
  }
}
