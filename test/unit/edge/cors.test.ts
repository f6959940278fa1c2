/**
 * KVEDGE_CORS parsing and the CORS module on its own (the default "*" runs through the real Worker
 * in test/workers/edge.test.ts): an origin list is echoed with Vary, "off" adds nothing, and a bad
 * value stops the Worker with the variable's name.
 */
import { describe, expect, it } from "vitest";
import { parseEdgeConfig } from "../../../src/config/config.ts";
import { preflightResponse, withCors } from "../../../src/edge/cors.ts";

const corsOf = (v: string | undefined) => parseEdgeConfig(v === undefined ? {} : { KVEDGE_CORS: v }).cors;
const req = (origin: string | null, method = "GET") => new Request("https://edge/v1/models", { method, headers: origin ? { origin } : {} });

describe("CORS", () => {
  it("parses KVEDGE_CORS: default *, off, an origin list; anything else names the variable", () => {
    expect(corsOf(undefined)).toEqual({ origins: "*" });
    expect(corsOf("off")).toBeNull();
    expect(corsOf("https://a.example, http://localhost:3000")).toEqual({ origins: new Set(["https://a.example", "http://localhost:3000"]) });
    for (const bad of ["yes", "https://a.example/path", "javascript:x", ""]) expect(() => corsOf(bad), bad).toThrow(/KVEDGE_CORS/);
  });

  it("an origin list: listed origins echoed with Vary: Origin, others get no CORS headers", () => {
    const policy = corsOf("https://a.example");
    const ok = withCors(new Response("x"), req("https://a.example"), "/v1/models", policy);
    expect(ok.headers.get("access-control-allow-origin")).toBe("https://a.example");
    expect(ok.headers.get("vary")).toBe("Origin");
    expect(withCors(new Response("x"), req("https://b.example"), "/v1/models", policy).headers.get("access-control-allow-origin")).toBeNull();
    const pre = preflightResponse(req("https://b.example", "OPTIONS"), "/v1/models", policy)!;
    expect(pre.status).toBe(204);
    expect(pre.headers.get("access-control-allow-origin")).toBeNull();
    // A listed origin's preflight: Vary once (the preflight is not wrapped again).
    const listed = req("https://a.example", "OPTIONS");
    const answered = withCors(preflightResponse(listed, "/v1/models", policy)!, listed, "/v1/models", policy);
    expect([answered.headers.get("access-control-allow-origin"), answered.headers.get("vary")]).toEqual(["https://a.example", "Origin"]);
  });

  it("sets the headers on the answer itself; one whose headers are immutable is copied, status, headers and body kept", async () => {
    const own = new Response("x", { status: 201, headers: { "x-request-id": "r1" } });
    const out = withCors(own, req("https://a.example"), "/v1/models", corsOf(undefined));
    expect(out).toBe(own);
    expect([out.headers.get("access-control-allow-origin"), out.headers.get("access-control-expose-headers"), out.headers.get("vary")]).toEqual(["*", "x-request-id, retry-after, traceresponse", null]);
    // Response.redirect's headers are immutable, as fetch()'s answers are.
    const fixed = Response.redirect("https://b.example/next", 307);
    const copied = withCors(fixed, req("https://a.example"), "/v1/models", corsOf("https://a.example"));
    expect(copied).not.toBe(fixed);
    expect([copied.status, copied.headers.get("location"), copied.headers.get("access-control-allow-origin"), copied.headers.get("vary")]).toEqual([307, "https://b.example/next", "https://a.example", "Origin"]);
    expect(fixed.headers.get("access-control-allow-origin")).toBeNull();
    const withBody = withCors(new Response("body text", { headers: { vary: "Accept" } }), req("https://a.example"), "/v1/models", corsOf("https://a.example"));
    expect([withBody.headers.get("vary"), await withBody.text()]).toEqual(["Accept, Origin", "body text"]);
  });

  it("off: nothing added anywhere; a preflight still gets its 204 with Allow", () => {
    expect(withCors(new Response("x"), req("https://a.example"), "/v1/models", null).headers.get("access-control-allow-origin")).toBeNull();
    const pre = preflightResponse(req("https://a.example", "OPTIONS"), "/v1/models", null)!;
    expect([pre.status, pre.headers.get("allow"), pre.headers.get("access-control-allow-origin")]).toEqual([204, "GET, HEAD, OPTIONS", null]);
  });
});
