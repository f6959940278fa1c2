/**
 * The edge's colo for region-aware routing (src/edge/chat/route.ts edgeColoOf): read from
 * request.cf only where KVEDGE_REGIONS maps colos to regions (workerd builds request.cf on its first read).
 */
import { describe, expect, it } from "vitest";
import { parseEdgeConfig } from "../../../src/config/config.ts";
import { edgeColoOf } from "../../../src/edge/chat/route.ts";

/** A request as Cloudflare hands it over, counting reads of its `cf`. */
function cfRequest(cf: unknown): { request: Request; reads: () => number } {
  let reads = 0;
  const request = new Request("https://edge.example/v1/chat/completions", { method: "POST" });
  Object.defineProperty(request, "cf", { get: () => (reads++, cf) });
  return { request, reads: () => reads };
}

const regions = (r: unknown) => parseEdgeConfig({ KVEDGE_REGIONS: JSON.stringify(r) });

describe("edgeColoOf", () => {
  it("reads the colo where the regions config maps colos to regions", () => {
    const config = regions({ colos: { AMS: "eu" }, rttMs: { eu: { us: 90 } } });
    expect(config.regionsByColo).toBe(true);
    const { request, reads } = cfRequest({ colo: "AMS" });
    expect(edgeColoOf(request, config)).toBe("AMS");
    expect(reads()).toBe(1);
    expect(edgeColoOf(cfRequest(undefined).request, config)).toBeNull();
    expect(edgeColoOf(cfRequest({ colo: 7 }).request, config)).toBeNull();
  });

  it.each([
    ["without a regions config", parseEdgeConfig({})],
    ["with a region fixed by configuration", regions({ self: "eu", colos: { AMS: "eu" } })],
    ["with no colo map", regions({ rttMs: { eu: { us: 90 } } })],
  ])("leaves request.cf unread %s", (_why, config) => {
    expect(config.regionsByColo).toBe(false);
    const { request, reads } = cfRequest({ colo: "AMS" });
    expect(edgeColoOf(request, config)).toBeNull();
    expect(reads()).toBe(0);
  });
});
