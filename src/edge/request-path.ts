/**
 * A request's path as the route table matches it: the URL's pathname (as the WHATWG URL parser
 * gives it: percent-encoding, dot segments and all) without trailing slashes, "/" when nothing is
 * left. A client sends the same URL request after request, so the last URL's path is kept: the
 * same string gives the same path without parsing it again (one entry, as long as that URL).
 */
import { stripTrailing } from "../util/strip-trailing.ts";

let lastUrl: string | null = null;
let lastPath = "/";

/** The route-table path of the request URL `url` (throws as `new URL(url)` does for one that does not parse). */
export function requestPath(url: string): string {
  if (url === lastUrl) return lastPath;
  const path = stripTrailing(new URL(url).pathname, "/") || "/";
  lastUrl = url;
  lastPath = path;
  return path;
}
