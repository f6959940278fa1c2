/**
 * The regional decode service and media store: its lifecycle (build the parts, listen, close).
 * What each request does is read in order in:
 * - route.ts, route-table.ts: the route table and the dispatch of a path to its route;
 * - request.ts: each request's signal (caller gone, deadline) and its error answer;
 * - healthz-route.ts `GET /healthz`; media-route.ts `GET /v1/media/<digest>?exp&w&sig` (workers,
 *   signed URLs); store-route.ts `POST /v1/store`; probe-route.ts `POST /v1/probe`;
 * - edge-call.ts: the edge's token, its client's label, its trace context;
 * - url-intake.ts → url-download.ts → probe-cache.ts / image-size.ts → media-store.ts: a URL
 *   downloaded once, verified as its kind, stored, described.
 * Downloads run at most `maxDownloads` at once with a bounded queue (503 beyond it); a download is
 * cancelled when every caller waiting for it has gone, when it stalls (`idleTimeoutMs`) and at the
 * request deadline (`requestTimeoutMs`). Concurrent requests for one URL, or one digest, share one
 * download/probe. Probes run at most `concurrency` at once.
 */
import http from "node:http";
import { rm } from "node:fs/promises";
import { initHashing } from "../../src/util/hash.ts";
import { inRequestScope } from "./last-resort.ts";
import type { MediaStoreStats } from "./media-store.ts";
import { DecodeServiceOptionsSchema, type DecodeServiceOptionsInput } from "./options.ts";
import type { DecoderKind } from "./probers.ts";
import { failOutsideHandler, serveRequest } from "./request.ts";
import { decodeRoutes } from "./route-table.ts";
import { assembleParts, type DecodeServiceDeps } from "./service-parts.ts";
import type { DecodeServiceStats } from "./stats.ts";

export { FAILED_PROBE_TTL_MS } from "./probe-cache.ts";
export type { DecodeServiceDeps } from "./service-parts.ts";
export type { DecodeServiceStats } from "./stats.ts";

export interface DecodeService {
  url: string;
  decoder: DecoderKind;
  stats: DecodeServiceStats;
  store: () => MediaStoreStats;
  close(): Promise<void>;
}

export async function startDecodeService(input: DecodeServiceOptionsInput = {}, deps: DecodeServiceDeps = {}): Promise<DecodeService> {
  const opts = DecodeServiceOptionsSchema.parse(input);
  await initHashing();
  const parts = await assembleParts(opts, deps);
  const { prober, store, stats, log } = parts;
  const ctx = { routes: decodeRoutes(parts), requestTimeoutMs: opts.requestTimeoutMs, stats, log };
  const server = http.createServer((req, res) => inRequestScope(failOutsideHandler(req, res, log), () => serveRequest(req, res, ctx)));
  server.requestTimeout = opts.requestTimeoutMs;
  server.headersTimeout = Math.min(opts.requestTimeoutMs, 30_000);
  server.keepAliveTimeout = 5_000;
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(opts.port, opts.host, () => resolve());
  });
  const addr = server.address() as { port: number; address: string; family: string };
  const host = addr.family === "IPv6" ? `[${addr.address}]` : addr.address;
  log(`listening on http://${host}:${addr.port} (decoder ${prober.kind})`);
  return {
    url: `http://${host}:${addr.port}`,
    decoder: prober.kind,
    stats,
    store: () => store.stats,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
      await prober.close();
      await rm(parts.tmp, { recursive: true, force: true });
    },
  };
}
