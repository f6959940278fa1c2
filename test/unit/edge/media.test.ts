/**
 * The edge's media verification (src/edge/media.ts) against real HTTP on 127.0.0.1 and a real
 * decode service: what a worker may receive is verified bytes only — inline data: URLs of bytes
 * the edge hashed, or signed store URLs — and a URL that cannot be verified is the client's 400.
 */
import { createHash } from "node:crypto";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mediaPolicyChecks, storeSignatures, verifyMedia, storeSigner, workerForwards, type MediaDeps } from "../../../src/edge/media.ts";
import { MediaMemo } from "../../../src/edge/media-memo.ts";
import { DecodeClient } from "../../../src/media/decode-client.ts";
import { decodeBase64Strict } from "../../../src/media/data-url.ts";
import { MediaError, MediaStoreUnavailableError } from "../../../src/media/errors.ts";
import { httpStatusOf } from "../../../src/api/errors.ts";
import { SafeFetcher } from "../../../src/media/safe-fetch.ts";
import { importMediaUrlKey, verifyMediaUrl, workerMediaCredential } from "../../../src/media/signed-url.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { startDecodeService, type DecodeService } from "../../../services/decode/server.ts";
import { makePng } from "../../helpers/png.ts";

const sha = (b: Uint8Array): string => createHash("sha256").update(b).digest("hex");
const KEY = "edge-media-test-key-0123456789abcdef";
const TOKEN = "edge-media-token-0123456789abcdef";
const png = makePng(40, 30, { seed: 5 });
/** Bytes no decoder reads as a video. */
const JUNK_VIDEO = new TextEncoder().encode("not a video, just some text ".repeat(64));
let server: http.Server;
let port = 0;
let svc: DecodeService;
let hits = 0;
const held = { open: 0, closed: 0 };
async function waitFor(cond: () => boolean, ms = 5_000): Promise<void> {
  const until = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > until) throw new Error("timed out waiting");
    await new Promise((r) => setTimeout(r, 10));
  }
}

beforeAll(async () => {
  await initHashing();
  server = http.createServer((req, res) => {
    hits++;
    if (req.url?.startsWith("/slow.png?")) {
      // Slow enough that a request's items are all in flight at once unless the edge paces them.
      setTimeout(() => {
        res.writeHead(200, { "content-type": "image/png" });
        res.end(png);
      }, 100);
    } else if (req.url === "/a.png") {
      res.writeHead(200, { "content-type": "image/png" });
      res.end(png);
    } else if (req.url?.startsWith("/hold")) {
      // Never answers; counts the connections the store gave up on.
      held.open++;
      res.on("close", () => {
        held.open--;
        held.closed++;
      });
    } else if (req.url === "/junk.mp4") {
      res.writeHead(200, { "content-type": "video/mp4" });
      res.end(JUNK_VIDEO);
    } else if (req.url === "/empty.mp4") {
      res.writeHead(200, { "content-type": "video/mp4", "content-length": "0" });
      res.end();
    } else {
      res.writeHead(404);
      res.end();
    }
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  port = (server.address() as AddressInfo).port;
  svc = await startDecodeService({ token: TOKEN, concurrency: 1, fetch: { allowlist: [`127.0.0.1:${port}`] }, store: { urlKey: KEY } });
});
afterAll(async () => {
  await svc?.close();
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});

function deps(over: Partial<MediaDeps> = {}): MediaDeps {
  return {
    fetcher: new SafeFetcher({ allowlist: [`127.0.0.1:${port}`] }),
    decode: new DecodeClient({}),
    inlineMaxBytes: 1 << 20,
    sign: null,
    forwardClientUrls: false,
    ...over,
  };
}
const part = (kind: "image" | "video", url: string) => ({ kind, url, param: "messages[0].content[0]" });

describe("edge media verification", () => {
  it("without a store: an image URL is fetched once and forwarded inline as exactly the bytes hashed", async () => {
    const [m] = await verifyMedia([part("image", `http://127.0.0.1:${port}/a.png`)], deps());
    expect(m!.forward).toMatch(/^data:image\/png;base64,/);
    expect(sha(decodeBase64Strict(m!.forward!.split(",")[1]!))).toBe(sha(png));
    expect(m).toMatchObject({ digest: sha(png), metadata: { modality: "image", width: 40, height: 30 } });
  });

  it("without a store: video URLs are refused (400) unless the operator opted into forwarding URLs", async () => {
    await expect(verifyMedia([part("video", `http://127.0.0.1:${port}/v.mp4`)], deps())).rejects.toMatchObject({ reason: "store_unavailable" });
    const [m] = await verifyMedia([part("video", `http://127.0.0.1:${port}/v.mp4`)], deps({ forwardClientUrls: true }));
    expect(m).toMatchObject({ forward: `http://127.0.0.1:${port}/v.mp4`, metadata: null });
  });

  it("images above the inline cap are refused, never forwarded by URL", async () => {
    await expect(verifyMedia([part("image", `http://127.0.0.1:${port}/a.png`)], deps({ inlineMaxBytes: 100 }))).rejects.toMatchObject({ limitBytes: 100 });
  });

  it("fetch failures are the client's 400, whatever the routing would have been", async () => {
    await expect(verifyMedia([part("image", `http://127.0.0.1:${port}/missing.png`)], deps())).rejects.toMatchObject({ reason: "http_status" });
    await expect(verifyMedia([part("image", "http://10.0.0.1/a.png")], deps({ forwardClientUrls: true }))).rejects.toMatchObject({ reason: "blocked_address" });
  });

  it("client data: URLs: forwarded as received when SGLang decodes them alike, else re-encoded from the bytes hashed", async () => {
    const b64 = Buffer.from(png).toString("base64");
    const strict = `data:image/png;base64,${b64}`;
    const [a] = await verifyMedia([part("image", strict)], deps());
    expect(a!.forward).toBe(strict);
    // Whitespace inside base64: a forgiving parser accepts it, SGLang's strict decoder would not.
    const loose = `data:image/png;base64,${b64.slice(0, 8)} ${b64.slice(8)}`;
    const [b] = await verifyMedia([part("image", loose)], deps({ fetcher: new SafeFetcher({ dataUrlBase64: "forgiving" }) }));
    expect(b!.forward).toBe(strict);
    expect(b!.digest).toBe(sha(png));
    const [c] = await verifyMedia([part("image", ` DATA:image/png;base64,${b64}`)], deps());
    expect(c!.forward).toBe(strict);
  });

  it("an empty data: video is the client's 400 naming the part (no bytes are a video for no decoder)", async () => {
    await expect(verifyMedia([part("video", "data:video/mp4;base64,")], deps())).rejects.toMatchObject({ reason: "truncated", param: "messages[0].content[0]" });
  });

  it("with a store: an empty video at a URL is the client's 400 too, as an empty data: video is", async () => {
    const sign = storeSigner(svc.url, importMediaUrlKey(KEY), 60);
    await expect(verifyMedia([part("video", `http://127.0.0.1:${port}/empty.mp4`)], deps({ decode: new DecodeClient({ url: svc.url, token: TOKEN }), sign }))).rejects.toMatchObject({ reason: "truncated", param: "messages[0].content[0]" });
  });

  it("a video the store cannot probe is the client's 4xx, by URL or as a data: URL, and never forwarded", async () => {
    const decode = new DecodeClient({ url: svc.url, token: TOKEN });
    const sign = storeSigner(svc.url, importMediaUrlKey(KEY), 60);
    const before = svc.store().items;
    const byUrl = verifyMedia([part("video", `http://127.0.0.1:${port}/junk.mp4`)], deps({ decode, sign }));
    await expect(byUrl).rejects.toMatchObject({ reason: "unprobeable_media", param: "messages[0].content[0]" });
    expect(httpStatusOf((await byUrl.catch((e: unknown) => e)) as MediaError)).toBe(400);
    // Not kept either: the store holds only bytes verified as what they were sent as.
    expect(svc.store().items).toBe(before);
    const inline = `data:video/mp4;base64,${Buffer.from(JUNK_VIDEO).toString("base64")}`;
    await expect(verifyMedia([part("video", inline)], deps({ decode }))).rejects.toMatchObject({ reason: "unprobeable_media" });
  });

  it("a data: video the decode service could not check is not forwarded: 400 without one, 503 when it is down; forwarded unresolved only when opted in", async () => {
    const inline = part("video", `data:video/mp4;base64,${Buffer.from(JUNK_VIDEO).toString("base64")}`);
    const none = await verifyMedia([inline], deps()).catch((e: unknown) => e);
    expect(none).toMatchObject({ reason: "store_unavailable", param: "messages[0].content[0]" });
    expect(httpStatusOf(none as MediaError)).toBe(400);
    const down = await verifyMedia([inline], deps({ decode: new DecodeClient({ url: "http://127.0.0.1:1", token: TOKEN }) })).catch((e: unknown) => e);
    expect(down).toBeInstanceOf(MediaStoreUnavailableError);
    expect(httpStatusOf(down as MediaStoreUnavailableError)).toBe(503);
    const [m] = await verifyMedia([inline], deps({ decode: new DecodeClient({ url: "http://127.0.0.1:1", token: TOKEN }), forwardClientUrls: true }));
    expect(m).toMatchObject({ kind: "video", metadata: null, unresolved: { reason: "decode_unreachable" } });
  });

  it("with a store: each worker gets a store URL for the digest signed for it alone, valid for a short time only", async () => {
    const key = importMediaUrlKey(KEY);
    const sign = storeSigner(svc.url, key, 60);
    const before = hits;
    const verified = await verifyMedia([part("image", `http://127.0.0.1:${port}/a.png`)], deps({ decode: new DecodeClient({ url: svc.url, token: TOKEN }), sign }));
    const [m] = verified;
    expect(hits).toBe(before + 1);
    expect(m).toMatchObject({ digest: sha(png), stored: true, forward: null });
    const [w1, w2] = await Promise.all(["w1", "w2"].map(async (w) => new URL((await workerForwards(verified, sign, w)).imageData[0]!)));
    expect(w1!.origin).toBe(svc.url);
    const now = Math.floor(Date.now() / 1000);
    expect(await verifyMediaUrl(await key, w1!.pathname, w1!.searchParams, now, 60)).toEqual({ ok: true, digest: sha(png), workerId: "w1" });
    expect(await verifyMediaUrl(await key, w2!.pathname, w2!.searchParams, now, 60)).toEqual({ ok: true, digest: sha(png), workerId: "w2" });
    expect(await verifyMediaUrl(await key, w1!.pathname, w1!.searchParams, now + 120, 3600)).toEqual({ ok: false, reason: "expired" });
    const as = async (w: string): Promise<RequestInit> => ({ headers: { authorization: `Basic ${btoa(`${w}:${await workerMediaCredential(await key, w)}`)}` } });
    const got = new Uint8Array(await (await fetch(w1!, await as("w1"))).arrayBuffer());
    expect(sha(got)).toBe(sha(png));
    // w1's URL is w1's alone.
    expect((await fetch(w1!, await as("w2"))).status).toBe(400);
    // The store's refusal keeps its reason; its absence is named as such.
    await expect(verifyMedia([part("image", `http://127.0.0.1:${port}/missing.png`)], deps({ decode: new DecodeClient({ url: svc.url, token: TOKEN }), sign }))).rejects.toMatchObject({ reason: "http_status" });
    const down = await verifyMedia([part("image", `http://127.0.0.1:${port}/a.png`)], deps({ decode: new DecodeClient({ url: "http://127.0.0.1:1", token: TOKEN }), sign })).catch((e: unknown) => e);
    // The store's own trouble is a 503 the client may retry, not the request's fault.
    expect(down).toBeInstanceOf(MediaStoreUnavailableError);
    expect(httpStatusOf(down as MediaStoreUnavailableError)).toBe(503);
    expect((down as MediaStoreUnavailableError).code).toBe("media_store_unavailable");
  });

  it("a worker's store URL is signed again once a quarter of its lifetime has passed, and reused before (a conversation's earlier items are not signed every turn)", async () => {
    const key = importMediaUrlKey(KEY);
    let now = 1_000_000_000_000;
    const sign = storeSigner(svc.url, key, 60, () => now);
    const digest = sha(png);
    const first = await sign(digest, "w1");
    now += 14_000;
    expect(await sign(digest, "w1")).toBe(first);
    expect(await sign(digest, "w2")).not.toBe(first);
    now += 2_000;
    const second = await sign(digest, "w1");
    expect(second).not.toBe(first);
    const u = new URL(second);
    // Still valid for the whole lifetime from the moment it was signed again.
    expect(await verifyMediaUrl(await key, u.pathname, u.searchParams, Math.floor(now / 1000) + 59, 60)).toEqual({ ok: true, digest, workerId: "w1" });
  });

  it("a kept store URL is given back without an await; the signer signs only what it does not keep", async () => {
    let now = 1_000_000_000_000;
    const sign = storeSigner(svc.url, importMediaUrlKey(KEY), 60, () => now);
    const digests = ["a", "b", "c"].map((c) => c.repeat(64));
    const media = digests.map((digest) => ({ kind: "image" as const, forward: null, stored: true, digest, metadata: { modality: "image" as const, width: 8, height: 8 }, unresolved: null }));
    const before = storeSignatures();
    const first = await workerForwards(media, sign, "w1");
    expect(storeSignatures() - before).toBe(3);
    now += 10_000;
    expect(typeof sign(digests[1]!, "w1")).toBe("string");
    const again = await workerForwards(media, sign, "w1");
    expect(again).toEqual(first);
    expect(storeSignatures() - before).toBe(3);
    // A new item and another worker are signed; past a quarter of the lifetime, everything is signed again.
    await workerForwards([...media, { ...media[0]!, digest: "d".repeat(64) }], sign, "w1");
    await workerForwards(media.slice(0, 1), sign, "w2");
    expect(storeSignatures() - before).toBe(5);
    now += 6_000;
    expect(sign(digests[0]!, "w1")).toBeInstanceOf(Promise);
  });

  it("a request's forwards read the signer's clock once, not once per item", async () => {
    let reads = 0;
    const sign = storeSigner(svc.url, importMediaUrlKey(KEY), 60, () => (reads++, 1_000_000_000_000));
    const stored = ["a", "b", "c"].map((c) => ({ kind: "image" as const, forward: null, stored: true, digest: c.repeat(64), metadata: { modality: "image" as const, width: 8, height: 8 }, unresolved: null }));
    const inline = { kind: "image" as const, forward: "data:image/png;base64,AA==", stored: false, digest: null, metadata: null, unresolved: null };
    const first = await workerForwards([...stored, inline], sign, "w1");
    expect(reads).toBe(1);
    expect(first.imageData.at(-1)).toBe(inline.forward);
    expect(await workerForwards([...stored, inline], sign, "w1")).toEqual(first);
    expect(reads).toBe(2);
    await workerForwards([inline], sign, "w1");
    expect(reads).toBe(2);
  });

  it("a conversation's remembered items are not checked against the policy again, also where a new message names them; a seed is checked at its first use (refused when the policy refuses it)", async () => {
    const d = deps({ decode: new DecodeClient({ url: svc.url, token: TOKEN }), sign: storeSigner(svc.url, importMediaUrlKey(KEY), 60) });
    const memo = new MediaMemo();
    const url = `http://127.0.0.1:${port}/a.png`;
    const inline = `data:image/png;base64,${Buffer.from(png).toString("base64")}`;
    const turn = (urls: string[], earlier: boolean[]) => verifyMedia(urls.map((u) => part("image", u)), d, { client: "c-memo", signal: null }, { memo, scope: "c-memo", earlier, leased: [] });
    let checks = mediaPolicyChecks();
    const [first] = await turn([url, inline], [false, false]);
    expect(mediaPolicyChecks() - checks).toBe(2);
    checks = mediaPolicyChecks();
    const [kept, keptInline, added] = await turn([url, inline, `http://127.0.0.1:${port}/slow.png?memo`], [true, true, false]);
    expect(kept).toBe(first);
    expect(keptInline!.digest).toBe(sha(png));
    expect(added!.digest).toBe(sha(png));
    expect(mediaPolicyChecks() - checks).toBe(1);
    // Seeds (verified in another isolate): checked when first used, then like any entry.
    const seeded = { ...first! };
    memo.seed("c-memo", "image", `http://127.0.0.1:${port}/a.png?seeded`, seeded);
    memo.seed("c-memo", "image", "http://10.0.0.1/x.png", seeded);
    checks = mediaPolicyChecks();
    expect(await turn([`http://127.0.0.1:${port}/a.png?seeded`], [true])).toEqual([seeded]);
    expect(await turn([`http://127.0.0.1:${port}/a.png?seeded`], [true])).toEqual([seeded]);
    expect(mediaPolicyChecks() - checks).toBe(1);
    await expect(turn(["http://10.0.0.1/x.png"], [true])).rejects.toMatchObject({ reason: "blocked_address" });
    // A new message naming a remembered URL (not fresh) is stored again, its URL not checked again;
    // a seed's URL in a new message is checked first (refused when the policy refuses it).
    memo.get("c-memo", "image", url)!.freshUntil = 0;
    checks = mediaPolicyChecks();
    const [again] = await turn([url], [false]);
    expect(again).toBe(first);
    expect(mediaPolicyChecks() - checks).toBe(0);
    memo.seed("c-memo", "image", `http://127.0.0.1:${port}/slow.png?seeded-new`, seeded);
    expect((await turn([`http://127.0.0.1:${port}/slow.png?seeded-new`], [false]))[0]!.digest).toBe(sha(png));
    expect(mediaPolicyChecks() - checks).toBe(1);
    memo.seed("c-memo", "image", "http://10.0.0.2/y.png", seeded);
    await expect(turn(["http://10.0.0.2/y.png"], [false])).rejects.toMatchObject({ reason: "blocked_address" });
  });

  it("a request with 64 media URLs (the item limit) is verified in full: the edge resolves a few at a time, within its client's share of the store", async () => {
    const sign = storeSigner(svc.url, importMediaUrlKey(KEY), 60);
    const d = deps({ decode: new DecodeClient({ url: svc.url, token: TOKEN }), sign });
    const parts = Array.from({ length: 64 }, (_, i) => part("image", `http://127.0.0.1:${port}/slow.png?i=${i}`));
    const out = await verifyMedia(parts, d, { client: "c-many", signal: null });
    expect(out).toHaveLength(64);
    expect(out.every((m) => m.digest === sha(png))).toBe(true);
  });

  it("a URL the policy refuses stops the request before any of its items is fetched, wherever it stands", async () => {
    const sign = storeSigner(svc.url, importMediaUrlKey(KEY), 60);
    const d = deps({ decode: new DecodeClient({ url: svc.url, token: TOKEN }), sign });
    const before = hits;
    const parts = [...Array.from({ length: 6 }, (_, i) => part("image", `http://127.0.0.1:${port}/slow.png?p=${i}`)), part("image", "http://10.0.0.1/x.png")];
    await expect(verifyMedia(parts, d, { client: "c-pre", signal: null })).rejects.toMatchObject({ reason: "blocked_address" });
    await new Promise((r) => setTimeout(r, 200));
    expect(hits).toBe(before);
  });

  it("one failed item, or the client leaving, cancels the request's other store calls (they would hold the store's slots for nobody)", async () => {
    const sign = storeSigner(svc.url, importMediaUrlKey(KEY), 60);
    const d = deps({ decode: new DecodeClient({ url: svc.url, token: TOKEN }), sign });
    const closed = held.closed;
    // The hold never answers (the store's idle timeout is 15 s); the second item fails at once.
    const t = Date.now();
    const failed = verifyMedia([part("image", `http://127.0.0.1:${port}/hold-1.png`), part("image", `http://127.0.0.1:${port}/missing.png`)], d, { client: "c-test", signal: null });
    await expect(failed).rejects.toMatchObject({ reason: "http_status" });
    await waitFor(() => held.closed === closed + 1 && held.open === 0);
    expect(Date.now() - t).toBeLessThan(5_000);
    // The client leaves while its item is being fetched.
    const gone = new AbortController();
    const left = verifyMedia([part("image", `http://127.0.0.1:${port}/hold-2.png`)], d, { client: "c-test", signal: gone.signal });
    await waitFor(() => held.open === 1);
    gone.abort(new Error("client left"));
    // Named as what it is, not as a store outage.
    await expect(left).rejects.toMatchObject({ code: "cancelled" });
    await waitFor(() => held.closed === closed + 2 && held.open === 0);
  });
});

describe("media store configuration", () => {
  it("a decode service URL without the signed-URL key stops the Worker, naming the field", async () => {
    const { parseEdgeConfig } = await import("../../../src/config/config.ts");
    expect(() => parseEdgeConfig({ KVEDGE_DECODE_URL: "https://decode.example" })).toThrow(/KVEDGE_MEDIA_URL_KEY/);
    expect(() => parseEdgeConfig({ KVEDGE_DECODE_URL: "https://decode.example", KVEDGE_MEDIA_URL_KEY: "short" })).toThrow(/KVEDGE_MEDIA_URL_KEY/);
    const c = parseEdgeConfig({ KVEDGE_DECODE_URL: "https://decode.example", KVEDGE_MEDIA_URL_KEY: KEY, KVEDGE_MEDIA_STORE_URL: "https://store.internal" });
    expect(c.mediaStore).toMatchObject({ publicUrl: "https://store.internal", urlKey: KEY, forwardClientUrls: false });
    expect(parseEdgeConfig({}).mediaStore).toMatchObject({ publicUrl: null, forwardClientUrls: false, inlineMaxBytes: 8 * 1024 * 1024 });
    expect(parseEdgeConfig({ KVEDGE_FORWARD_CLIENT_URLS: "true" }).mediaStore.forwardClientUrls).toBe(true);
  });
});
