/** The decode service's routes, in the order a request's path is matched against them (route.ts). */
import { healthzRoute } from "./healthz-route.ts";
import { heldRoute } from "./held-route.ts";
import { mediaRoute } from "./media-route.ts";
import { probeRoute } from "./probe-route.ts";
import type { Route } from "./route.ts";
import type { ServiceParts } from "./service-parts.ts";
import { storeRoute } from "./store-route.ts";

export function decodeRoutes(p: ServiceParts): Route[] {
  const { opts, store, stats, log } = p;
  return [
    healthzRoute({ token: opts.token, decoder: p.prober.kind, probes: p.probeSlots, downloads: p.downloadSlots, store }),
    mediaRoute({ urlKey: p.urlKey, maxUrlTtlSec: opts.store.maxUrlTtlSec, requireWorkerCredential: opts.store.requireWorkerCredential, store, stats, log }),
    storeRoute({ token: opts.token, intake: p.intake, store, stats, log }),
    heldRoute({ token: opts.token, store, stats, log }),
    probeRoute({ token: opts.token, intake: p.intake, probes: p.probes, maxBodyBytes: opts.maxBodyBytes, stats, log }),
  ];
}
