/**
 * Declarative routing: a table of paths, each with its handler per method. The one place that
 * answers an unknown path (404) and a known path's wrong method (405 with `Allow`), both thrown as
 * the API's errors so they go out in the OpenAI error shape.
 */
import { MethodNotAllowedError, NotFoundError } from "../api/errors.ts";

/** A handler's answer; null: the path is not one it serves after all (404). */
export type RouteHandler<C> = (c: C, params: readonly string[]) => Promise<Response | null> | Response | null;

export interface Route<C> {
  /** An exact path; `/prefix/*` for every path under the prefix; a RegExp whose groups are `params`. */
  path: string | RegExp;
  /** Handlers by method, in `Allow` order; `*` takes any method (the handler checks it). */
  methods: Readonly<Record<string, RouteHandler<C>>>;
}

function match(path: string, pattern: string | RegExp): readonly string[] | null {
  if (pattern instanceof RegExp) {
    const m = pattern.exec(path);
    return m ? m.slice(1) : null;
  }
  if (pattern.endsWith("/*")) return path.startsWith(pattern.slice(0, -1)) ? [] : null;
  return path === pattern ? [] : null;
}

/** The first route whose path matches, with its params; null when none does. */
export function routeFor<C>(table: readonly Route<C>[], path: string): { route: Route<C>; params: readonly string[] } | null {
  for (const route of table) {
    const params = match(path, route.path);
    if (params !== null) return { route, params };
  }
  return null;
}

/** The first route whose path matches serves the request. */
export async function dispatch<C>(table: readonly Route<C>[], method: string, path: string, c: C): Promise<Response> {
  const found = routeFor(table, path);
  if (found) {
    const { route, params } = found;
    const handler = route.methods[method] ?? route.methods["*"];
    if (!handler) throw new MethodNotAllowedError(Object.keys(route.methods));
    const res = await handler(c, params);
    if (res) return res;
  }
  throw new NotFoundError(`No route for ${method} ${path}.`, null, "unknown_route");
}
