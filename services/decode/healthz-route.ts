/** `GET /healthz`: liveness for anyone; load and the store's contents for the edge's token only. */
import type { FairSlots } from "./fair-slots.ts";
import type { EdgeAuth } from "./edge-auth.ts";
import { sendJson } from "./http-json.ts";
import type { MediaStore } from "./media-store.ts";
import type { DecoderKind } from "./probers.ts";
import type { Route } from "./route.ts";

export interface HealthzDeps {
  auth: EdgeAuth;
  decoder: DecoderKind;
  probes: FairSlots;
  downloads: FairSlots;
  store: MediaStore;
}

export function healthzRoute({ auth, decoder, probes, downloads, store }: HealthzDeps): Route {
  return {
    path: "/healthz",
    method: "GET",
    async handle({ req, res }) {
      // Whether bytes are stored is the edge's business only.
      if (!auth.presents(req)) return sendJson(res, 200, { ok: true, decoder });
      sendJson(res, 200, {
        ok: true,
        decoder,
        concurrency: probes.limit,
        inUse: probes.inUse,
        waiting: probes.waiting,
        perClient: { probes: probes.perClient, downloads: downloads.perClient },
        downloads: { limit: downloads.limit, inUse: downloads.inUse, waiting: downloads.waiting, peak: downloads.peakInUse, clients: downloads.clients },
        store: store.stats,
      });
    },
  };
}
