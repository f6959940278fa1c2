/**
 * `POST /v1/store/held` `{digests}` (the edge's token): which of these digests the store still
 * holds, in one round trip. The edge asks it for the earlier media items of a conversation it has
 * already verified, instead of storing each again (src/edge/media.ts); a digest held is marked used
 * as a store call would mark it, and one that is not is stored again by its URL. Each held one is
 * also leased (media-store.ts): `leaseMs` says, per digest, for how long the store promises to
 * keep it (0: not held, or no lease granted), so the edge need not ask again before then.
 */
import { InvalidRequestError } from "../../src/api/errors.ts";
import { HeldRequestSchema, MAX_HELD_DIGESTS } from "../../src/media/store-result.ts";
import type { EdgeAuth } from "./edge-auth.ts";
import { edgeCaller } from "./edge-call.ts";
import { contentTypeOf, readJson, sendJson } from "./http-json.ts";
import type { MediaStore } from "./media-store.ts";
import type { Route } from "./route.ts";
import type { DecodeServiceStats } from "./stats.ts";

export interface HeldRouteDeps {
  auth: EdgeAuth;
  store: MediaStore;
  stats: DecodeServiceStats;
  log: (msg: string) => void;
}

export function heldRoute({ auth, store, stats, log }: HeldRouteDeps): Route {
  return {
    path: "/v1/store/held",
    method: "POST",
    async handle(call) {
      const { req, res } = call;
      edgeCaller(call, auth, log);
      stats.heldChecks++;
      if (contentTypeOf(req) !== "application/json") throw new InvalidRequestError("Content-Type must be application/json ({digests}).");
      const parsed = HeldRequestSchema.safeParse(await readJson(req));
      if (!parsed.success) throw new InvalidRequestError(`Body must be {"digests": [1-${MAX_HELD_DIGESTS} SHA-256 hex digests]}.`, "digests");
      const held = parsed.data.digests.map((d) => store.use(d) !== null);
      sendJson(res, 200, { held, leaseMs: parsed.data.digests.map((d, i) => (held[i] ? store.lease(d) : 0)) });
    },
  };
}
