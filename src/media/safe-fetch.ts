/**
 * SSRF-safe media fetch, runtime-agnostic: the caller injects `fetch` and, where the runtime has
 * DNS, `resolve`. Every hop (the first URL and each redirect) is checked before it is requested:
 * scheme http(s) (data: only as the first URL), no credentials, host by name and literal address,
 * and, with a resolver, every resolved address; the validated addresses are handed to the fetch
 * as `pinned` so a pinning fetch (services/decode) connects to exactly what was checked.
 * Redirects are followed manually and capped; the body is a stream capped in bytes; one deadline
 * covers the whole operation, body included.
 */
import { z } from "zod";
import { parseDataUrl, isDataUrl } from "./data-url.ts";
import { MediaError, MediaTooLargeError, isMediaError } from "./errors.ts";
import { parseIp, type IpAddress } from "./ip-address.ts";
import { Allowlist, classifyHost, defaultPort, parseAllowRule } from "./ssrf.ts";

export const SafeFetchPolicySchema = z.object({
  /** Largest body accepted (bytes). */
  maxBytes: z.number().int().positive().default(20 * 1024 * 1024),
  /** Deadline for the whole fetch including the body. */
  timeoutMs: z.number().int().positive().default(10_000),
  maxRedirects: z.number().int().min(0).max(20).default(5),
  /** Local development only: "127.0.0.1:8080", "[::1]:8080", "localhost:8080", "10.0.0.0/8". Empty = off. */
  allowlist: z
    .array(
      z.string().min(1).superRefine((entry, ctx) => {
        try {
          parseAllowRule(entry);
        } catch (e) {
          ctx.addIssue({ code: "custom", message: e instanceof Error ? e.message : String(e) });
        }
      }),
    )
    .default([]),
  allowDataUrls: z.boolean().default(true),
  /** How `data:` base64 bodies are decoded (strict = SGLang's). */
  dataUrlBase64: z.enum(["strict", "forgiving"]).default("strict"),
});
export type SafeFetchPolicy = z.output<typeof SafeFetchPolicySchema>;
export type SafeFetchPolicyInput = z.input<typeof SafeFetchPolicySchema>;

/** Policies parsed by parseSafeFetchPolicy, with their allowlist: a fetcher built on one parses nothing. */
const PARSED = new WeakMap<SafeFetchPolicy, Allowlist>();

/** Parses a policy once (a config's): fetchers built on the result, one per request, take it as is. */
export function parseSafeFetchPolicy(input: SafeFetchPolicyInput): SafeFetchPolicy {
  const policy = Object.freeze(SafeFetchPolicySchema.parse(input));
  PARSED.set(policy, new Allowlist(policy.allowlist));
  return policy;
}

/** The destination a hop was validated for; a pinning fetch connects only to these addresses. */
export interface PinnedDestination {
  hostname: string;
  port: number;
  addresses: string[];
}

export type FetchLike = (url: string, init: RequestInit, pinned: PinnedDestination | null) => Promise<Response>;
export type Resolver = (hostname: string) => Promise<string[]>;

export interface SafeFetchDeps {
  fetch?: FetchLike;
  resolve?: Resolver;
}

export interface MediaResponse {
  /** Final URL after redirects (the data: URL itself for inline media). */
  url: string;
  /** 200-class, or 304 for a conditional request answered "not modified". */
  status: number;
  headers: Headers;
  /** Byte-capped, deadline-bound body. Empty for 304. */
  body: ReadableStream<Uint8Array>;
  contentLength: number | null;
  redirects: number;
  source: "http" | "data";
}

export interface OpenMediaOptions {
  headers?: Record<string, string>;
  signal?: AbortSignal;
  /** Names the request field in error messages (e.g. "messages[0].content[1].image_url"). */
  param?: string | null;
}

const REDIRECT = new Set([301, 302, 303, 307, 308]);

export class SafeFetcher {
  readonly policy: SafeFetchPolicy;
  readonly allowlist: Allowlist;
  private readonly fetchImpl: FetchLike;
  private readonly resolve: Resolver | null;

  constructor(policy: SafeFetchPolicyInput = {}, deps: SafeFetchDeps = {}) {
    const parsed = PARSED.get(policy as SafeFetchPolicy);
    this.policy = parsed ? (policy as SafeFetchPolicy) : SafeFetchPolicySchema.parse(policy);
    this.allowlist = parsed ?? new Allowlist(this.policy.allowlist);
    this.fetchImpl = deps.fetch ?? ((url, init) => fetch(url, init));
    this.resolve = deps.resolve ?? null;
  }

  /**
   * Checks one hop without resolving: returns the parsed URL, or throws a MediaError. Exposed for
   * callers that only need the static check (and for the tests' table of spellings).
   */
  checkUrl(raw: string | URL, param: string | null = null): { url: URL; port: number; literal: IpAddress | null; needsResolve: boolean } {
    let url: URL;
    try {
      url = typeof raw === "string" ? new URL(raw) : raw;
    } catch {
      throw new MediaError("bad_url", "Media URL is not a valid absolute URL.", param);
    }
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      throw new MediaError("bad_scheme", `Media URL scheme ${url.protocol} is not allowed (http, https, data only).`, param);
    }
    if (url.username !== "" || url.password !== "") {
      throw new MediaError("credentials_in_url", "Media URLs may not carry credentials.", param);
    }
    const port = url.port === "" ? defaultPort(url.protocol) : Number(url.port);
    const host = classifyHost(url.hostname);
    const literal = host.kind === "ip" ? host.address : null;
    if (host.blocked && !this.allowlist.allows({ hostname: url.hostname, port, address: literal })) {
      throw new MediaError("blocked_address", `Media host ${url.hostname} is not allowed (${host.blocked}).`, param);
    }
    const allowedByName = this.allowlist.allows({ hostname: url.hostname, port, address: literal });
    return { url, port, literal, needsResolve: host.kind === "name" && !allowedByName };
  }

  /** Resolves (where a resolver exists) and validates every address of one hop. */
  private async pin(url: URL, port: number, literal: IpAddress | null, needsResolve: boolean, param: string | null, signal: AbortSignal): Promise<PinnedDestination | null> {
    if (literal) return { hostname: url.hostname, port, addresses: [stripBrackets(url.hostname)] };
    if (!needsResolve || !this.resolve) return null;
    let addresses: string[];
    try {
      addresses = await abortable(this.resolve(url.hostname), signal);
    } catch (e) {
      if (signal.aborted) throw timeoutError(param);
      throw new MediaError("dns_failed", `Could not resolve ${url.hostname}: ${(e as Error).message}`, param);
    }
    if (addresses.length === 0) throw new MediaError("dns_failed", `${url.hostname} has no addresses.`, param);
    for (const a of addresses) {
      const ip = parseIp(a);
      if (!ip) throw new MediaError("dns_failed", `Resolver returned a non-address for ${url.hostname}.`, param);
      const host = classifyHost(a.includes(":") ? `[${a}]` : a);
      // Any bad record refuses the host: rebinding tricks mix public and private answers.
      if (host.blocked && !this.allowlist.allows({ hostname: url.hostname, port, address: ip })) {
        throw new MediaError("blocked_address", `Media host ${url.hostname} resolves to a refused address (${host.blocked}).`, param);
      }
    }
    return { hostname: url.hostname, port, addresses };
  }

  /** Opens a media URL (http(s) or data:) and returns a capped, deadline-bound body stream. */
  async open(rawUrl: string, opts: OpenMediaOptions = {}): Promise<MediaResponse> {
    const param = opts.param ?? null;
    const { maxBytes } = this.policy;
    if (isDataUrl(rawUrl)) {
      if (!this.policy.allowDataUrls) throw new MediaError("bad_scheme", "data: URLs are not allowed.", param);
      const d = parseDataUrl(rawUrl, { maxBytes, base64Mode: this.policy.dataUrlBase64, param });
      const bytes = d.bytes;
      return {
        url: rawUrl,
        status: 200,
        headers: new Headers({ "content-type": d.mimeType }),
        body: new ReadableStream<Uint8Array>({
          start(c) {
            if (bytes.length) c.enqueue(bytes);
            c.close();
          },
        }),
        contentLength: bytes.length,
        redirects: 0,
        source: "data",
      };
    }

    const deadline = new AbortController();
    const timer = setTimeout(() => deadline.abort(), this.policy.timeoutMs);
    const onOuterAbort = (): void => deadline.abort();
    opts.signal?.addEventListener("abort", onOuterAbort, { once: true });
    const done = (): void => {
      clearTimeout(timer);
      opts.signal?.removeEventListener("abort", onOuterAbort);
    };
    const signal = deadline.signal;
    try {
      let current = rawUrl;
      for (let hop = 0; ; hop++) {
        const { url, port, literal, needsResolve } = this.checkUrl(current, param);
        const pinned = await this.pin(url, port, literal, needsResolve, param, signal);
        let res: Response;
        try {
          res = await this.fetchImpl(url.href, { method: "GET", redirect: "manual", headers: opts.headers ?? {}, signal }, pinned);
        } catch (e) {
          if (isMediaError(e)) throw e;
          if (signal.aborted) throw timeoutError(param);
          throw new MediaError("fetch_failed", `Fetching media failed: ${(e as Error).message}`, param);
        }
        if (REDIRECT.has(res.status)) {
          await res.body?.cancel().catch(() => {});
          const loc = res.headers.get("location");
          if (!loc) throw new MediaError("bad_redirect", `Redirect ${res.status} without a Location header.`, param);
          if (hop + 1 > this.policy.maxRedirects) {
            throw new MediaError("too_many_redirects", `More than ${this.policy.maxRedirects} redirects.`, param);
          }
          try {
            current = new URL(loc, url).href;
          } catch {
            throw new MediaError("bad_redirect", "Redirect Location is not a valid URL.", param);
          }
          continue;
        }
        const conditional = opts.headers && Object.keys(opts.headers).some((k) => /^if-(none-match|modified-since)$/i.test(k));
        if (res.status === 304 && conditional) {
          await res.body?.cancel().catch(() => {});
          done();
          return { url: url.href, status: 304, headers: res.headers, body: emptyStream(), contentLength: 0, redirects: hop, source: "http" };
        }
        if (res.status < 200 || res.status > 299) {
          await res.body?.cancel().catch(() => {});
          throw new MediaError("http_status", `Media server answered ${res.status}.`, param);
        }
        const lenHeader = res.headers.get("content-length");
        const contentLength = lenHeader !== null && /^\d+$/.test(lenHeader) ? Number(lenHeader) : null;
        if (contentLength !== null && contentLength > maxBytes) {
          await res.body?.cancel().catch(() => {});
          throw new MediaTooLargeError(maxBytes, param);
        }
        const body = capStream(res.body ?? emptyStream(), maxBytes, param, signal, done);
        return { url: url.href, status: res.status, headers: res.headers, body, contentLength, redirects: hop, source: "http" };
      }
    } catch (e) {
      done();
      throw e;
    }
  }

  /** Fetches the whole body (capped) into memory. */
  async fetchBytes(rawUrl: string, opts: OpenMediaOptions = {}): Promise<{ response: MediaResponse; bytes: Uint8Array }> {
    const response = await this.open(rawUrl, opts);
    return { response, bytes: await readAll(response.body) };
  }
}

function stripBrackets(h: string): string {
  return h.startsWith("[") && h.endsWith("]") ? h.slice(1, -1) : h;
}

function timeoutError(param: string | null): MediaError {
  return new MediaError("timeout", "Fetching media timed out.", param);
}

function emptyStream(): ReadableStream<Uint8Array> {
  return new ReadableStream<Uint8Array>({ start: (c) => c.close() });
}

function abortable<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(new Error("aborted"));
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(new Error("aborted"));
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener("abort", onAbort);
        resolve(v);
      },
      (e: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(e);
      },
    );
  });
}

/** Wraps a body: errors with MediaTooLargeError past `maxBytes`, with a timeout MediaError on abort. */
function capStream(
  src: ReadableStream<Uint8Array>,
  maxBytes: number,
  param: string | null,
  signal: AbortSignal,
  onFinish: () => void,
): ReadableStream<Uint8Array> {
  const reader = src.getReader();
  let total = 0;
  let finished = false;
  const finish = (): void => {
    if (!finished) {
      finished = true;
      onFinish();
    }
  };
  const onAbort = (): void => {
    void reader.cancel().catch(() => {});
  };
  signal.addEventListener("abort", onAbort, { once: true });
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const { done, value } = await reader.read();
        if (done) {
          if (signal.aborted) throw timeoutError(param);
          finish();
          signal.removeEventListener("abort", onAbort);
          controller.close();
          return;
        }
        total += value.byteLength;
        if (total > maxBytes) {
          await reader.cancel().catch(() => {});
          throw new MediaTooLargeError(maxBytes, param);
        }
        controller.enqueue(value);
      } catch (e) {
        finish();
        signal.removeEventListener("abort", onAbort);
        controller.error(isMediaError(e) ? e : signal.aborted ? timeoutError(param) : new MediaError("fetch_failed", `Reading media failed: ${(e as Error).message}`, param));
      }
    },
    async cancel(reason) {
      finish();
      signal.removeEventListener("abort", onAbort);
      await reader.cancel(reason).catch(() => {});
    },
  });
}

/** Drains a stream into one buffer. */
export async function readAll(stream: ReadableStream<Uint8Array>): Promise<Uint8Array> {
  const chunks: Uint8Array[] = [];
  let n = 0;
  const reader = stream.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    n += value.byteLength;
  }
  if (chunks.length === 1) return chunks[0]!;
  const out = new Uint8Array(n);
  let o = 0;
  for (const c of chunks) {
    out.set(c, o);
    o += c.byteLength;
  }
  return out;
}
