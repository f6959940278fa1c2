/**
 * `POST /v1/store` `{url, kind}` (the edge's token): fetches a client's media URL once with the
 * SSRF-safe fetcher (pinned DNS, every redirect re-checked), stores the verified bytes under their
 * SHA-256 and answers what the layout needs (image header, or the video probe); X-Cache tells how.
 * The item is leased as a held call leases it (media-store.ts; `leaseMs`, 0 when a bound refused it):
 * the edge remembers it for the conversation's next turns, which then need no held call for it.
 * `freshMs`: how long this client's next call for the URL would be answered with the same bytes
 * from the store, without asking the origin (its HTTP freshness; 0: it would ask), so the edge can
 * take a URL a new message names again from its memo for that long.
 */
import { InvalidRequestError } from "../../src/api/errors.ts";
import { StoreRequestSchema } from "../../src/media/store-result.ts";
import type { EdgeAuth } from "./edge-auth.ts";
import { edgeCaller } from "./edge-call.ts";
import { contentTypeOf, readJson, sendJson } from "./http-json.ts";
import type { MediaStore } from "./media-store.ts";
import type { Route } from "./route.ts";
import type { DecodeServiceStats } from "./stats.ts";
import type { UrlIntake } from "./url-intake.ts";

export interface StoreRouteDeps {
  auth: EdgeAuth;
  intake: UrlIntake;
  store: MediaStore;
  stats: DecodeServiceStats;
  log: (msg: string) => void;
}

export function storeRoute({ auth, intake, store, stats, log }: StoreRouteDeps): Route {
  return {
    path: "/v1/store",
    method: "POST",
    async handle(call) {
      const { req, res } = call;
      const caller = edgeCaller(call, auth, log);
      stats.storeCalls++;
      if (contentTypeOf(req) !== "application/json") throw new InvalidRequestError("Content-Type must be application/json ({url, kind}).");
      const parsed = StoreRequestSchema.safeParse(await readJson(req));
      if (!parsed.success) throw new InvalidRequestError('Body must be {"url": string, "kind": "image" | "video"}.', "url");
      const stored = await intake.storeUrl(parsed.data.url, parsed.data.kind, caller);
      res.setHeader("x-cache", stored.cache);
      const { result } = await intake.describe(stored, parsed.data.kind, caller);
      sendJson(res, 200, { ...result, leaseMs: store.lease(result.digest), freshMs: intake.freshMsLeft(parsed.data.url, caller.client, result.digest) });
    },
  };
}
