/**
 * `POST /v1/probe` (the edge's token): `{url}` (fetched, verified and stored as by /v1/store) or
 * raw bytes (probed, not stored) → the video's probe; X-Cache tells how it was come by.
 */
import { InvalidRequestError } from "../../src/api/errors.ts";
import { MediaTooLargeError } from "../../src/media/errors.ts";
import { ProbeRequestSchema } from "../../src/media/probe-result.ts";
import type { EdgeAuth } from "./edge-auth.ts";
import { edgeCaller } from "./edge-call.ts";
import { contentTypeOf, readJson, sendJson } from "./http-json.ts";
import type { ProbeCache, Probed } from "./probe-cache.ts";
import type { Route } from "./route.ts";
import type { DecodeServiceStats } from "./stats.ts";
import type { UrlIntake } from "./url-intake.ts";

export interface ProbeRouteDeps {
  auth: EdgeAuth;
  intake: UrlIntake;
  probes: ProbeCache;
  /** Largest raw-bytes body (options.ts maxBodyBytes). */
  maxBodyBytes: number;
  stats: DecodeServiceStats;
  log: (msg: string) => void;
}

export function probeRoute({ auth, intake, probes, maxBodyBytes, stats, log }: ProbeRouteDeps): Route {
  return {
    path: "/v1/probe",
    method: "POST",
    async handle(call) {
      const { req, res } = call;
      const caller = edgeCaller(call, auth, log);
      stats.probeCalls++;
      const type = contentTypeOf(req);
      let out: Probed;
      if (type === "application/json") {
        const parsed = ProbeRequestSchema.safeParse(await readJson(req));
        if (!parsed.success) throw new InvalidRequestError('Body must be {"url": string}.', "url");
        const stored = await intake.storeUrl(parsed.data.url, "video", caller);
        const d = await intake.describe(stored, "video", caller);
        // A fresh download reports whether its probe (while verifying it) was cached; otherwise the download's own outcome.
        out = { result: d.result.probe!, cache: stored.cache === "miss" ? (stored.probed ?? d.cache) : stored.cache };
      } else if (type === "application/octet-stream") {
        const len = Number(req.headers["content-length"] ?? NaN);
        if (Number.isFinite(len) && len > maxBodyBytes) throw new MediaTooLargeError(maxBodyBytes);
        out = await probes.probeBytes(req as AsyncIterable<Uint8Array>, caller);
      } else {
        throw new InvalidRequestError("Content-Type must be application/json ({url}) or application/octet-stream (bytes).");
      }
      res.setHeader("x-cache", out.cache);
      sendJson(res, 200, out.result);
    },
  };
}
