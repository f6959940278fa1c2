/**
 * The fetcher against real HTTP servers on 127.0.0.1. Server A is allowlisted (the local
 * development case); server B is another loopback port that is NOT, and counts its hits so a
 * refused redirect is shown to have never connected. Runs with both fetch implementations: the
 * runtime's fetch without DNS (as in workerd) and the Node pinning fetch with a resolver (the
 * decode service), where a public-looking name is mapped to loopback.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MediaError, MediaTooLargeError } from "../../../src/media/errors.ts";
import { SafeFetcher, readAll, type SafeFetchDeps } from "../../../src/media/safe-fetch.ts";
import { pinnedFetch } from "../../../services/decode/pinned-fetch.ts";

let a: http.Server;
let b: http.Server;
let pa = 0;
let pb = 0;
let bHits = 0;
const hostsSeen: string[] = [];
const BODY = Buffer.from("media-bytes-0123456789");

function listen(s: http.Server): Promise<number> {
  return new Promise((r) => s.listen(0, "127.0.0.1", () => r((s.address() as AddressInfo).port)));
}

beforeAll(async () => {
  b = http.createServer((_req, res) => {
    bHits++;
    res.end("should never be reached");
  });
  pb = await listen(b);
  a = http.createServer((req, res) => {
    hostsSeen.push(req.headers.host ?? "");
    const u = new URL(req.url!, "http://x");
    const redirect = (loc: string, code = 302): void => {
      res.writeHead(code, { location: loc });
      res.end();
    };
    switch (u.pathname) {
      case "/media":
        res.writeHead(200, { "content-type": "application/octet-stream", etag: '"v1"' });
        res.end(BODY);
        return;
      case "/redirect": {
        const to = u.searchParams.get("to")!;
        redirect(to.replace("PB", String(pb)).replace("PA", String(pa)), Number(u.searchParams.get("code") ?? 302));
        return;
      }
      case "/chain": {
        const n = Number(u.searchParams.get("n"));
        if (n === 0) redirect("/media");
        else redirect(`/chain?n=${n - 1}`, 301);
        return;
      }
      case "/no-location":
        res.writeHead(302);
        res.end();
        return;
      case "/big":
        res.writeHead(200); // chunked: no content-length to check up front
        for (let i = 0; i < 64; i++) res.write(Buffer.alloc(1024, i));
        res.end();
        return;
      case "/big-declared":
        res.writeHead(200, { "content-length": String(10_000_000) });
        res.end();
        return;
      case "/slow":
        res.writeHead(200);
        res.write("partial");
        return; // never ends
      case "/404":
        res.writeHead(404);
        res.end("nope");
        return;
      case "/conditional":
        if (req.headers["if-none-match"] === '"v1"') {
          res.writeHead(304, { etag: '"v1"' });
          res.end();
        } else {
          res.writeHead(200, { etag: '"v1"' });
          res.end(BODY);
        }
        return;
      default:
        res.writeHead(500);
        res.end();
    }
  });
  pa = await listen(a);
});

afterAll(async () => {
  a.closeAllConnections();
  b.closeAllConnections();
  await Promise.all([new Promise((r) => a.close(r)), new Promise((r) => b.close(r))]);
});

const REFUSED_REDIRECTS = [
  "http://127.0.0.1:PB/x", // loopback, other port
  "http://2130706433:PB/x",
  "http://0x7f.1:PB/x",
  "http://[::1]:PB/x",
  "http://[::ffff:127.0.0.1]:PB/x",
  "http://localhost:PB/x",
  "http://10.0.0.1/x",
  "http://169.254.169.254/latest/meta-data/",
  "http://metadata.google.internal/",
  "http://[fd00:ec2::254]/",
  "file:///etc/passwd",
  "gopher://127.0.0.1:PB/_x",
  "data:text/plain,hi",
  "http://user:pw@127.0.0.1:PA/media",
];

const variants: [string, (allow: string[]) => SafeFetchDeps][] = [
  ["runtime fetch, no DNS (workerd-like)", () => ({})],
  [
    "Node pinning fetch + resolver",
    () => ({
      fetch: pinnedFetch,
      resolve: async (h: string) => {
        if (h === "media.example.com" || h === "localhost") return ["127.0.0.1"];
        throw new Error(`NXDOMAIN ${h}`);
      },
    }),
  ],
];

for (const [label, deps] of variants) {
  describe(`safe fetch over loopback: ${label}`, () => {
    const allow = (): string[] => [`127.0.0.1:${pa}`];
    const mk = (policy: Record<string, unknown> = {}) => new SafeFetcher({ allowlist: allow(), ...policy }, deps(allow()));

    it("fetches allowlisted loopback media", async () => {
      const { bytes, response } = await mk().fetchBytes(`http://127.0.0.1:${pa}/media`);
      expect(Buffer.from(bytes).equals(BODY)).toBe(true);
      expect(response.status).toBe(200);
    });

    it("refuses the same server without the allowlist", async () => {
      const f = new SafeFetcher({}, deps([]));
      await expect(f.open(`http://127.0.0.1:${pa}/media`)).rejects.toMatchObject({ reason: "blocked_address" });
    });

    for (const to of REFUSED_REDIRECTS) {
      it(`refuses a redirect to ${to} without connecting`, async () => {
        const before = bHits;
        const err = await mk()
          .open(`http://127.0.0.1:${pa}/redirect?to=${encodeURIComponent(to)}`)
          .then(() => null, (e: unknown) => e);
        expect(err).toBeInstanceOf(MediaError);
        expect(["blocked_address", "bad_scheme", "credentials_in_url"]).toContain((err as MediaError).reason);
        expect(bHits).toBe(before);
      });
    }

    it("follows allowed redirects (301/302/303/307/308) and reports the final URL", async () => {
      for (const code of [301, 302, 303, 307, 308]) {
        const r = await mk().fetchBytes(`http://127.0.0.1:${pa}/redirect?code=${code}&to=${encodeURIComponent("/media")}`);
        expect(Buffer.from(r.bytes).equals(BODY)).toBe(true);
        expect(r.response.url).toBe(`http://127.0.0.1:${pa}/media`);
        expect(r.response.redirects).toBe(1);
      }
    });

    it("caps redirects (default 5)", async () => {
      // /chain?n=k answers k+1 redirects before the media.
      await expect(mk().fetchBytes(`http://127.0.0.1:${pa}/chain?n=4`)).resolves.toBeTruthy();
      await expect(mk().open(`http://127.0.0.1:${pa}/chain?n=5`)).rejects.toMatchObject({ reason: "too_many_redirects" });
      await expect(mk({ maxRedirects: 0 }).open(`http://127.0.0.1:${pa}/chain?n=0`)).rejects.toMatchObject({ reason: "too_many_redirects" });
      await expect(mk().open(`http://127.0.0.1:${pa}/no-location`)).rejects.toMatchObject({ reason: "bad_redirect" });
    });

    it("caps bytes while streaming and from Content-Length", async () => {
      const f = mk({ maxBytes: 10_000 });
      const r = await f.open(`http://127.0.0.1:${pa}/big`);
      await expect(readAll(r.body)).rejects.toBeInstanceOf(MediaTooLargeError);
      await expect(f.open(`http://127.0.0.1:${pa}/big-declared`)).rejects.toBeInstanceOf(MediaTooLargeError);
      await expect(mk({ maxBytes: 65536 }).fetchBytes(`http://127.0.0.1:${pa}/big`)).resolves.toBeTruthy();
    });

    it("bounds time, body included", async () => {
      const r = await mk({ timeoutMs: 300 }).open(`http://127.0.0.1:${pa}/slow`);
      await expect(readAll(r.body)).rejects.toMatchObject({ reason: "timeout" });
    });

    it("turns HTTP errors into media errors", async () => {
      await expect(mk().open(`http://127.0.0.1:${pa}/404`)).rejects.toMatchObject({ reason: "http_status" });
    });

    it("passes conditional headers and reports 304", async () => {
      const r = await mk().open(`http://127.0.0.1:${pa}/conditional`, { headers: { "if-none-match": '"v1"' } });
      expect(r.status).toBe(304);
      expect((await readAll(r.body)).length).toBe(0);
    });
  });
}

describe("public-looking host names in the loopback harness (Node pinning fetch)", () => {
  const resolve = async (h: string): Promise<string[]> => {
    if (h === "media.example.com") return ["127.0.0.1"];
    throw new Error(`NXDOMAIN ${h}`);
  };

  it("a name resolving to loopback is refused unless the address is allowlisted (DNS-rebinding guard)", async () => {
    const strict = new SafeFetcher({}, { fetch: pinnedFetch, resolve });
    await expect(strict.open(`http://media.example.com:${pa}/media`)).rejects.toMatchObject({ reason: "blocked_address" });
  });

  it("connects to the pinned address and sends the original Host", async () => {
    const f = new SafeFetcher({ allowlist: [`127.0.0.1:${pa}`] }, { fetch: pinnedFetch, resolve });
    hostsSeen.length = 0;
    const { bytes } = await f.fetchBytes(`http://media.example.com:${pa}/media`);
    expect(Buffer.from(bytes).equals(BODY)).toBe(true);
    expect(hostsSeen).toEqual([`media.example.com:${pa}`]);
  });

  it("re-checks every hop: a public-looking host redirecting to loopback elsewhere is refused", async () => {
    const f = new SafeFetcher({ allowlist: [`127.0.0.1:${pa}`] }, { fetch: pinnedFetch, resolve });
    const before = bHits;
    await expect(f.open(`http://media.example.com:${pa}/redirect?to=${encodeURIComponent("http://127.0.0.1:PB/")}`)).rejects.toMatchObject({
      reason: "blocked_address",
    });
    expect(bHits).toBe(before);
  });
});
