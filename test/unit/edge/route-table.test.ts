/**
 * The route table (src/edge/route-table.ts): exact, prefix and pattern paths; the first match
 * serves; 404 and 405 come out of it as the API's errors, in the OpenAI shape with `Allow`.
 */
import { describe, expect, it } from "vitest";
import { errorResponse } from "../../../src/api/errors.ts";
import { dispatch, type Route } from "../../../src/edge/route-table.ts";

const text = (s: string) => new Response(s);
const TABLE: readonly Route<string>[] = [
  { path: "/v1/models", methods: { GET: (c) => text(`models ${c}`), HEAD: () => text(""), OPTIONS: () => text("preflight") } },
  { path: /^\/admin\/workers\/([^/]+)\/local-hashes$/, methods: { GET: (_c, [id]) => text(`worker ${id}`) } },
  { path: "/admin/declined", methods: { "*": () => null } },
  { path: "/admin/*", methods: { "*": (_c) => text("any admin") } },
];

async function answer(method: string, path: string): Promise<{ status: number; body: string; allow: string | null }> {
  const res = await dispatch(TABLE, method, path, "ctx").catch((e: unknown) => errorResponse(e));
  return { status: res.status, body: await res.text(), allow: res.headers.get("allow") };
}

describe("route table", () => {
  it("serves exact paths per method, passes the context and the pattern's groups", async () => {
    expect(await answer("GET", "/v1/models")).toMatchObject({ status: 200, body: "models ctx" });
    expect(await answer("GET", "/admin/workers/w%201/local-hashes")).toMatchObject({ status: 200, body: "worker w%201" });
  });

  it("the first matching route wins over a later prefix; a prefix takes any path under it", async () => {
    expect((await answer("GET", "/admin/workers/w1/local-hashes")).body).toBe("worker w1");
    expect((await answer("DELETE", "/admin/anything/else")).body).toBe("any admin");
    expect((await answer("GET", "/admin")).status).toBe(404);
  });

  it("a known path's other method is 405 with Allow in table order, in the OpenAI error shape", async () => {
    const r = await answer("POST", "/v1/models");
    expect([r.status, r.allow]).toEqual([405, "GET, HEAD, OPTIONS"]);
    expect(JSON.parse(r.body)).toEqual({ error: { message: "Use GET or HEAD or OPTIONS.", type: "invalid_request_error", param: null, code: "method_not_allowed" } });
  });

  it("an unknown path, or a handler that declines it, is 404 unknown_route naming the request", async () => {
    for (const path of ["/nope", "/admin/declined"]) {
      const r = await answer("GET", path);
      expect(r.status).toBe(404);
      expect(JSON.parse(r.body)).toEqual({ error: { message: `No route for GET ${path}.`, type: "not_found_error", param: null, code: "unknown_route" } });
    }
  });
});
