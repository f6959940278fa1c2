/** The decode service's routes, in the order a request's path is matched against them (route.ts). */
import { EdgeAuth } from "./edge-auth.ts";
import { healthzRoute } from "./healthz-route.ts";
import { heldRoute } from "./held-route.ts";
import { mediaRoute } from "./media-route.ts";
import { probeRoute } from "./probe-route.ts";
import type { Route } from "./route.ts";
import type { ServiceParts } from "./service-parts.ts";
import { storeRoute } from "./store-route.ts";

export function decodeRoutes(p: ServiceParts): Route[] {
  const { opts, store, stats, log } = p;
  // One failure budget for every route that takes the edge's token.
  const auth = new EdgeAuth(opts.token);
  return [
    healthzRoute({ auth, decoder: p.prober.kind, probes: p.probeSlots, downloads: p.downloadSlots, store }),
    mediaRoute({ urlKey: p.urlKey, maxUrlTtlSec: opts.store.maxUrlTtlSec, requireWorkerCredential: opts.store.requireWorkerCredential, store, stats, log }),
    storeRoute({ auth, intake: p.intake, store, stats, log }),
    heldRoute({ auth, store, stats, log }),
    probeRoute({ auth, intake: p.intake, probes: p.probes, maxBodyBytes: opts.maxBodyBytes, stats, log }),
  ];
}
