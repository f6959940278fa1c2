/**
 * The edge preparation's dependencies (`prepareRouting`) for vision tests against a real decode
 * service / media store: one qwen3_vl model (block size 16), the store at `decodeUrl` with its token
 * and URL key, media fetched from `originHost` only, and a routing index that answers only
 * `profile` (one worker up, the fixture's qwen3_vl processor contract); its other calls throw, as
 * preparation never makes them. Each call parses a new config object, so it starts a new media memo.
 * No sampled exactness check runs (KVEDGE_TURN_CHECK_RATE 0): the work each step does is exact.
 */
import { parseEdgeConfig } from "../../src/config/config.ts";
import type { PrepareDeps } from "../../src/edge/chat/prepare.ts";
import { cohortEligibility, SGLANG_CONTRACT_KEY } from "../../src/layout/index.ts";
import type { ChatFrontDoor } from "../../src/routing-index/front-door.ts";
import { fixtureContract } from "../fixtures/models/load.ts";

export interface MediaPrepareOptions {
  model: string;
  profile: { family: "qwen3_vl"; templateId: string };
  decodeUrl: string;
  token: string;
  urlKey: string;
  originHost: string;
}

export function mediaPrepareDeps(o: MediaPrepareOptions): PrepareDeps {
  const config = parseEdgeConfig({
    KVEDGE_MODELS: JSON.stringify([{ id: o.model, ...o.profile, blockSize: 16 }]),
    KVEDGE_DECODE_URL: o.decodeUrl,
    DECODE_TOKEN: o.token,
    KVEDGE_MEDIA_URL_KEY: o.urlKey,
    KVEDGE_MEDIA: JSON.stringify({ allowlist: [o.originHost] }),
    // No sampled whole recomputation (exactness.ts, 1% by default, drawn at random): it would add its
    // template, layout and hash work to the counts these tests pin (exactness-check.test.ts tests it).
    KVEDGE_TURN_CHECK_RATE: "0",
  });
  const cohort = cohortEligibility([{ [SGLANG_CONTRACT_KEY]: fixtureContract("qwen3_vl") }]);
  if (!cohort.ok) throw new Error(cohort.reason);
  const fail = (): never => {
    throw new Error("not used by prepareRouting");
  };
  const index: ChatFrontDoor = { profile: async () => ({ blockSize: null, workers: 1, workersUp: 1, cohort }), route: fail, settle: fail, quarantine: fail, markPrefillDone: fail, receipts: fail };
  return { config, index: () => index, fetch: (u, i) => fetch(u, i) };
}
