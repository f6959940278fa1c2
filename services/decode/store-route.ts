/**
 * `POST /v1/store` `{url, kind}` (the edge's token): fetches a client's media URL once with the
 * SSRF-safe fetcher (pinned DNS, every redirect re-checked), stores the verified bytes under their
 * SHA-256 and answers what the layout needs (image header, or the video probe); X-Cache tells how.
 */
import { InvalidRequestError } from "../../src/api/errors.ts";
import { StoreRequestSchema } from "../../src/media/store-result.ts";
import { edgeCaller } from "./edge-call.ts";
import { contentTypeOf, readJson, sendJson } from "./http-json.ts";
import type { Route } from "./route.ts";
import type { DecodeServiceStats } from "./stats.ts";
import type { UrlIntake } from "./url-intake.ts";

export interface StoreRouteDeps {
  token: string | null;
  intake: UrlIntake;
  stats: DecodeServiceStats;
  log: (msg: string) => void;
}

export function storeRoute({ token, intake, stats, log }: StoreRouteDeps): Route {
  return {
    path: "/v1/store",
    method: "POST",
    async handle(call) {
      const { req, res } = call;
      const caller = edgeCaller(call, token, log);
      stats.storeCalls++;
      if (contentTypeOf(req) !== "application/json") throw new InvalidRequestError("Content-Type must be application/json ({url, kind}).");
      const parsed = StoreRequestSchema.safeParse(await readJson(req));
      if (!parsed.success) throw new InvalidRequestError('Body must be {"url": string, "kind": "image" | "video"}.', "url");
      const stored = await intake.storeUrl(parsed.data.url, parsed.data.kind, caller);
      res.setHeader("x-cache", stored.cache);
      sendJson(res, 200, (await intake.describe(stored, parsed.data.kind, caller)).result);
    },
  };
}
