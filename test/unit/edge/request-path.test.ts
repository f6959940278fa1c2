/**
 * The route-table path of a request URL (src/edge/request-path.ts): what parsing the URL gives,
 * whichever URL came before it (the last one's path is kept).
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { requestPath } from "../../../src/edge/request-path.ts";
import { stripTrailing } from "../../../src/util/strip-trailing.ts";

const parsed = (url: string) => stripTrailing(new URL(url).pathname, "/") || "/";

const URLS = [
  "https://edge.example/v1/chat/completions",
  "https://edge.example/v1/chat/completions/",
  "https://edge.example/v1/chat/completions///",
  "https://edge.example/v1/chat/completions?x=1",
  "https://edge.example/v1/chat/completions/?x=1#f",
  "https://edge.example/v1/chat/completions#frag",
  "https://edge.example/v1/chat/%63ompletions",
  "https://edge.example/v1/chat/completions%2F",
  "https://edge.example/v1/./chat/../chat/completions",
  "https://edge.example/v1/chat/%2e%2e/chat/completions",
  "https://edge.example/v1\\chat\\completions",
  "https://edge.example/v1/chat/com pletions",
  "https://edge.example/v1/chat/com\tpletions",
  "https://edge.example/v1/chat/complétions",
  "https://edge.example",
  "https://edge.example/",
  "https://edge.example//",
  "https://edge.example?q",
  "http://edge.example:8787/v1/models",
  "HTTP://EDGE.EXAMPLE/V1/models",
  "http:///v1/models",
  "http://user:pw@edge.example/v1/models",
];

describe("requestPath", () => {
  it("is the parsed URL's pathname less trailing slashes, whatever came before", () => {
    // Each URL after every other (and after itself): a kept path never answers for another URL.
    for (const before of URLS)
      for (const url of URLS) {
        requestPath(before);
        expect(requestPath(url), `${before} then ${url}`).toBe(parsed(url));
      }
  });

  it("agrees with parsing on arbitrary paths, queries and fragments", () => {
    const part = fc.array(fc.constantFrom("a", "v1", "/", ".", "..", "%2e", "%2F", "%", "?", "#", "\\", " ", "\t", "é", "\u0000"), { maxLength: 12 }).map((xs) => xs.join(""));
    fc.assert(
      fc.property(part, part, (a, b) => {
        for (const url of [`https://edge.example/${a}`, `https://edge.example/${b}`, `https://edge.example/${a}`]) expect(requestPath(url)).toBe(parsed(url));
      }),
    );
  });

  it("throws for a URL that does not parse, as parsing does, and keeps nothing of it", () => {
    requestPath("https://edge.example/v1/models");
    for (const bad of ["not a url", "http://999.1.1.1/v1/models", "http://edge.example:99999/v1/models"]) {
      expect(() => requestPath(bad)).toThrow(TypeError);
      expect(() => requestPath(bad)).toThrow(TypeError);
    }
    expect(requestPath("https://edge.example/v1/models")).toBe("/v1/models");
  });
});
