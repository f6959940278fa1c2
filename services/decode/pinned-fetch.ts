/**
 * A fetch for the SSRF-safe fetcher in Node: it connects only to the addresses the fetcher
 * validated for the hop (`pinned`), so a DNS answer cannot change between check and connect.
 * It asks for identity encoding so the bytes hashed are the bytes served.
 */
import http from "node:http";
import https from "node:https";
import { Readable } from "node:stream";
import type { LookupFunction } from "node:net";
import { lookup as dnsLookup } from "node:dns/promises";
import { MediaError } from "../../src/media/errors.ts";
import type { FetchLike, PinnedDestination, Resolver } from "../../src/media/safe-fetch.ts";

const NULL_BODY = new Set([204, 205, 304]);

/** The origin's answer as a fetch Response; statuses the fetch API cannot carry are a media error. */
function toResponse(res: http.IncomingMessage): Response {
  const status = res.statusCode ?? 0;
  if (!Number.isInteger(status) || status < 200 || status > 599) throw new MediaError("http_status", `Media server answered ${status}.`);
  const h = new Headers();
  const raw = res.rawHeaders;
  for (let i = 0; i + 1 < raw.length; i += 2) h.append(raw[i]!, raw[i + 1]!);
  if (NULL_BODY.has(status)) {
    res.resume();
    return new Response(null, { status, headers: h });
  }
  return new Response(Readable.toWeb(res) as ReadableStream<Uint8Array>, { status, headers: h });
}

function pinnedLookup(pinned: PinnedDestination): LookupFunction {
  const entries = pinned.addresses.map((address) => ({ address, family: address.includes(":") ? 6 : 4 }));
  return ((_host: string, options: { all?: boolean }, cb: (...args: unknown[]) => void) => {
    if (options?.all) cb(null, entries);
    else cb(null, entries[0]!.address, entries[0]!.family);
  }) as unknown as LookupFunction;
}

export const pinnedFetch: FetchLike = (url, init, pinned) =>
  new Promise<Response>((resolve, reject) => {
    const u = new URL(url);
    const mod = u.protocol === "https:" ? https : http;
    const headers: Record<string, string> = { "accept-encoding": "identity", "user-agent": "kvedge-decode/1" };
    new Headers(init.headers).forEach((v, k) => (headers[k] = v));
    const req = mod.request(
      u,
      {
        method: init.method ?? "GET",
        headers,
        signal: init.signal ?? undefined,
        ...(pinned ? { lookup: pinnedLookup(pinned) } : {}),
      },
      (res) => {
        // Runs outside any promise: whatever the origin sent must end as a rejection, never a throw
        // (a status the Response constructor refuses, 101 or 600-999, would otherwise exit the process).
        try {
          resolve(toResponse(res));
        } catch (e) {
          res.destroy();
          reject(e instanceof MediaError ? e : new MediaError("fetch_failed", `The media server's answer could not be read: ${(e as Error).message}`));
        }
      },
    );
    // A 101 answer to a GET switches protocols on a socket nobody asked to upgrade.
    req.on("upgrade", (_res, socket) => {
      socket.destroy();
      reject(new MediaError("http_status", "Media server answered 101 Switching Protocols."));
    });
    req.on("error", reject);
    req.end();
  });

/** node:dns resolver for the fetcher: every A and AAAA answer (the OS resolver, as a connect would use). */
export const nodeResolver: Resolver = async (hostname) => {
  const h = hostname.startsWith("[") ? hostname.slice(1, -1) : hostname;
  const all = await dnsLookup(h, { all: true, verbatim: true });
  return all.map((a) => a.address);
};
