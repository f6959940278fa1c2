/** KVEDGE_MEDIA is parsed once with the config: each request's SafeFetcher takes the parsed policy as is. */
import { describe, expect, it } from "vitest";
import { parseEdgeConfig } from "../../../src/config/config.ts";
import { SafeFetcher } from "../../../src/media/safe-fetch.ts";

describe("KVEDGE_MEDIA", () => {
  it("is the parsed policy (defaults applied), and a fetcher built on it parses nothing again", () => {
    const config = parseEdgeConfig({ KVEDGE_MEDIA: JSON.stringify({ maxBytes: 1024, allowlist: ["127.0.0.1:8080"] }) });
    expect(config.media).toEqual({ maxBytes: 1024, timeoutMs: 10_000, maxRedirects: 5, allowlist: ["127.0.0.1:8080"], allowDataUrls: true, dataUrlBase64: "strict" });
    const a = new SafeFetcher(config.media);
    const b = new SafeFetcher(config.media);
    expect(a.policy).toBe(config.media);
    expect(a.allowlist).toBe(b.allowlist);
    // A policy not parsed with a config is parsed by the fetcher, as before.
    const loose = { maxBytes: 10 };
    expect(new SafeFetcher(loose).policy).not.toBe(loose);
    expect(new SafeFetcher(loose).policy).toMatchObject({ maxBytes: 10, timeoutMs: 10_000 });
    expect(parseEdgeConfig({}).media).toMatchObject({ maxBytes: 20 * 1024 * 1024, allowlist: [] });
  });
});
