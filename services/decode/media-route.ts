/**
 * `GET /v1/media/<digest>?exp&w&sig`: stored bytes for workers, only under a valid, unexpired HMAC
 * signature from the edge (src/media/signed-url.ts) and only to the worker `w` it names (its media
 * credential as Basic auth); no bearer token.
 */
import { createReadStream } from "node:fs";
import { KvedgeError, NotFoundError } from "../../src/api/errors.ts";
import { presentsWorkerCredential, verifyMediaUrl } from "../../src/media/signed-url.ts";
import type { MediaStore } from "./media-store.ts";
import type { Route } from "./route.ts";
import type { DecodeServiceStats } from "./stats.ts";

export interface MediaRouteDeps {
  /** The key shared with the edge (null: every URL is refused). */
  urlKey: CryptoKey | null;
  maxUrlTtlSec: number;
  requireWorkerCredential: boolean;
  store: MediaStore;
  stats: DecodeServiceStats;
  log: (msg: string) => void;
}

export function mediaRoute(deps: MediaRouteDeps): Route {
  const { urlKey, store, stats, log } = deps;
  const refuse = (why: string): never => {
    stats.mediaRefused++;
    log(`media refused: ${why}`);
    // One answer for every refusal: a worker (or anyone) learns nothing about what is stored.
    throw new KvedgeError("Media URL is not valid.", "invalid_request_error", "media_url_refused");
  };
  return {
    path: "/v1/media/",
    prefix: true,
    method: "GET",
    async handle({ req, res, url }) {
      if (!urlKey) return refuse("no URL key configured");
      const check = await verifyMediaUrl(urlKey, url.pathname, url.searchParams, Math.floor(Date.now() / 1000), deps.maxUrlTtlSec);
      if (!check.ok) return refuse(check.reason);
      // The URL names the worker it was issued for: only that worker's credential fetches it.
      if (deps.requireWorkerCredential && !(await presentsWorkerCredential(urlKey, req.headers.authorization, check.workerId))) refuse(`not worker ${check.workerId}'s credential`);
      const f = store.use(check.digest);
      if (!f) throw new NotFoundError("Media is no longer stored.");
      stats.mediaServed++;
      res.writeHead(200, { "content-type": "application/octet-stream", "content-length": f.size, "cache-control": "no-store", "x-content-type-options": "nosniff" });
      await new Promise<void>((resolve, reject) => {
        const s = createReadStream(f.path);
        s.on("error", reject);
        res.on("close", () => {
          s.destroy();
          resolve();
        });
        s.pipe(res);
      });
    },
  };
}
