// Suite "media-store": the cost of moving media once through the regional media store,
// side by side with the direct path (the worker fetching the client's URL itself), for a 5 MB
// image and a 50 MB video, first request and repeat; plus the store's ingest and serve throughput.
// All on 127.0.0.1: an origin server (with ETag), the real decode service/store, a fetch like the
// simulated worker's. No native ffmpeg: the video comes from @ffmpeg/core (wasm), padded to size
// with an MP4 `free` box (the same video to every decoder, 50 MB on the wire).
//
// direct path (the baseline: no store): the edge fetches + hashes the item (identity), then the worker
//   fetches the client's URL again from the origin;
// store path (kvedge's): POST /v1/store (the store fetches, hashes, spools, describes; a repeat is a
//   conditional GET answered 304), then the worker fetches the signed store URL.
// "first" = a URL with bytes the store has not seen; "repeat" = the same URL again; "fresh repeat" =
// a URL whose origin sends Cache-Control: max-age, asked again within it (the store answers without
// contacting the origin; the origin's request count is checked).
// "added" = store path − direct path, medians.
// Fair share: one client holds every download it can with URLs that stall (their bytes stop after
// the headers until the store's idle timeout cuts them); another client then stores an image. The
// time it waits is measured with the per-client share (default, half the slots) and without it
// (clientShare 1: one client may hold them all, as first come, first served allowed).
import { createHash } from "node:crypto";
import http from "node:http";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { ROOT } from "../lib/workerd.mjs";
import { makePng } from "../../test/helpers/png.ts";
import { startDecodeService } from "../../services/decode/server.ts";
import { SafeFetcher, readAll } from "../../src/media/safe-fetch.ts";
import { importMediaUrlKey, signMediaPath, workerMediaCredential } from "../../src/media/signed-url.ts";
import { nodeResolver, pinnedFetch } from "../../services/decode/pinned-fetch.ts";

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** A valid PNG of about `bytes` bytes (random RGB rows, barely compressible); `seed` picks the bytes. */
const bigPng = (bytes, seed) => Buffer.from(makePng(1024, Math.ceil(bytes / (1024 * 3)), { seed }));

async function wasmVideo(bytes) {
  const req = createRequire(ROOT + "/package.json");
  const coreJs = req.resolve("@ffmpeg/core");
  globalThis.self ??= { location: { href: "file://" + coreJs } };
  const { default: create } = await import(coreJs);
  const core = await create({ wasmBinary: readFileSync(coreJs.replace(/\.js$/, ".wasm")) });
  core.exec("-f", "lavfi", "-i", "testsrc2=size=640x360:rate=30", "-t", "10", "-pix_fmt", "yuv420p", "-c:v", "libx264", "-preset", "ultrafast", "/v.mp4");
  const mp4 = Buffer.from(core.FS.readFile("/v.mp4"));
  const pad = Math.max(8, bytes - mp4.length);
  const box = Buffer.alloc(pad);
  box.writeUInt32BE(pad, 0);
  box.write("free", 4, "latin1");
  return Buffer.concat([mp4, box]);
}

export default {
  name: "media-store",
  title: "Media store hop (issue 12): store path vs direct path, 5 MB image / 50 MB video",
  async run(ctx) {
    const runs = ctx.tiny ? 2 : ctx.quick ? 4 : 9;
    ctx.progress(0.02, "generating media");
    const items = { image: bigPng(5_000_000, 1), video: await wasmVideo(50_000_000) };
    // Each URL (/kind/i) has its own bytes, so a "first" request is new content for the store (no
    // dedup, the video probed again): the image is regenerated, the video's trailing free box differs.
    const variants = new Map();
    const bytesOf = (kind, i) => {
      const k = `${kind}/${i}`;
      if (!variants.has(k)) {
        if (kind === "image") variants.set(k, bigPng(5_000_000, variants.size + 2));
        else {
          const v = Buffer.from(items.video);
          v.writeUInt32BE(Number(i.replace(/\D/g, "") || 0) + 1, v.length - 4);
          variants.set(k, v);
        }
        if (variants.size > 4) variants.delete(variants.keys().next().value);
      }
      return variants.get(k);
    };
    const originRequests = new Map();
    const stalled = new Set();
    const origin = http.createServer((req, res) => {
      originRequests.set(req.url, (originRequests.get(req.url) ?? 0) + 1);
      const [, kind, i] = req.url.split("/");
      if (kind === "stall") {
        res.writeHead(200, { "content-type": "image/png" });
        res.write(items.image.subarray(0, 1000));
        stalled.add(res);
        res.on("close", () => stalled.delete(res));
        return;
      }
      const etag = `"${kind}-${i}"`;
      // URLs /kind/f<i> state a freshness lifetime, as CDNs serve most public media.
      const freshness = i.startsWith("f") ? { "cache-control": "max-age=600" } : {};
      if (req.headers["if-none-match"] === etag) {
        res.writeHead(304, { etag, ...freshness });
        return res.end();
      }
      const body = bytesOf(kind, i);
      res.writeHead(200, { "content-type": kind === "image" ? "image/png" : "video/mp4", "content-length": body.length, etag, ...freshness });
      res.end(body);
    });
    await new Promise((r) => origin.listen(0, "127.0.0.1", r));
    const originHost = `127.0.0.1:${origin.address().port}`;
    const key = "bench-media-url-key-0123456789abcdef";
    const token = "bench-token-0123456789abcdef0123";
    const svc = await startDecodeService({ token, concurrency: 2, fetch: { allowlist: [originHost] }, store: { urlKey: key } });
    const hmac = await importMediaUrlKey(key);
    // The worker presents its media credential, as a worker must (the store serves a URL only to the worker it names).
    const workerAuth = { headers: { authorization: `Basic ${btoa(`w1:${await workerMediaCredential(hmac, "w1")}`)}` } };
    // The worker's fetch (as the simulated worker's loader) and the edge's identity fetch.
    const worker = new SafeFetcher({ maxBytes: 64 << 20, timeoutMs: 60_000, allowlist: ["127.0.0.0/8"] }, { fetch: pinnedFetch, resolve: nodeResolver });
    const edge = new SafeFetcher({ maxBytes: 64 << 20, timeoutMs: 60_000, allowlist: [originHost] }, { fetch: pinnedFetch, resolve: nodeResolver });
    const timed = async (fn) => {
      const t = performance.now();
      await fn();
      return performance.now() - t;
    };
    const sha = (b) => createHash("sha256").update(b).digest("hex");
    const summary = [];
    const details = {};
    try {
      let step = 0;
      for (const kind of ["image", "video"]) {
        const samples = { direct: { first: [], repeat: [] }, store: { first: [], repeat: [], fresh: [] }, ingest: { first: [], repeat: [], fresh: [] }, serve: [], freshOriginRequests: 0 };
        for (let i = 0; i < runs; i++) {
          ctx.progress(0.05 + (0.8 * ++step) / (2 * runs), `${kind} run ${i + 1}/${runs}`);
          const url = `http://${originHost}/${kind}/${i}`;
          const freshUrl = `http://${originHost}/${kind}/f${i}`;
          for (const phase of ["first", "repeat", "fresh"]) {
            if (phase !== "fresh") {
              // direct: identity at the edge (fetch + SHA-256), then the worker fetches the client URL.
              const direct = await timed(async () => {
                sha(await readAll((await edge.open(url)).body));
                await readAll((await worker.open(url)).body);
              });
              samples.direct[phase].push(direct);
            }
            // store: the store fetches once (repeat: conditional GET → 304; fresh: no request to the origin), the worker reads the store.
            const target = phase === "fresh" ? freshUrl : url;
            const storeCall = async () => {
              const r = await fetch(`${svc.url}/v1/store`, { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${token}` }, body: JSON.stringify({ url: target, kind }) });
              if (r.status !== 200) throw new Error(`store ${r.status}: ${await r.text()}`);
              return (await r.json()).digest;
            };
            // The fresh URL's first request (new bytes, unmeasured): the measured one repeats it within its max-age.
            if (phase === "fresh") await storeCall();
            const before = originRequests.get(`/${kind}/f${i}`) ?? 0;
            let digest = "";
            const ingest = await timed(async () => {
              digest = await storeCall();
            });
            if (phase === "fresh") samples.freshOriginRequests += (originRequests.get(`/${kind}/f${i}`) ?? 0) - before;
            const path = await signMediaPath(hmac, digest, Math.floor(Date.now() / 1000) + 60, "w1");
            const serve = await timed(async () => {
              const got = await readAll((await worker.open(svc.url + path, workerAuth)).body);
              if (got.length !== items[kind].length) throw new Error("short read from the store");
            });
            samples.ingest[phase].push(ingest);
            samples.serve.push(serve);
            samples.store[phase].push(ingest + serve);
          }
        }
        const mb = items[kind].length / 1e6;
        for (const phase of ["first", "repeat", "fresh"]) {
          const d = median(samples.direct[phase === "fresh" ? "repeat" : phase]);
          const s = median(samples.store[phase]);
          const label = phase === "fresh" ? `repeat within the origin's max-age (${samples.freshOriginRequests} origin requests in ${runs} repeats)` : phase;
          summary.push({ metric: `${kind} ${mb.toFixed(0)} MB, ${label}: store path vs direct (added)`, value: `${s.toFixed(0)} vs ${d.toFixed(0)} ms (${s - d >= 0 ? "+" : ""}${(s - d).toFixed(0)})`, unit: "ms", goal: "", pass: null });
        }
        summary.push({ metric: `${kind}: store serve throughput (worker ← store, one stream)`, value: (mb / (median(samples.serve) / 1000)).toFixed(0), unit: "MB/s", goal: "", pass: null });
        summary.push({ metric: `${kind}: store ingest throughput (fetch + SHA-256 + spool + ${kind === "video" ? "probe" : "header"}, new bytes)`, value: (mb / (median(samples.ingest.first) / 1000)).toFixed(0), unit: "MB/s", goal: "", pass: null });
        details[kind] = { bytes: items[kind].length, runs, samplesMs: samples };
      }
      // Serve throughput under concurrency: 4 workers read the 50 MB video at once.
      ctx.progress(0.9, "concurrent serve");
      const r = await fetch(`${svc.url}/v1/store`, { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${token}` }, body: JSON.stringify({ url: `http://${originHost}/video/x`, kind: "video" }) });
      const path = await signMediaPath(hmac, (await r.json()).digest, Math.floor(Date.now() / 1000) + 60, "w1");
      const t = performance.now();
      await Promise.all(Array.from({ length: 4 }, async () => readAll((await worker.open(svc.url + path, workerAuth)).body)));
      const agg = (4 * items.video.length) / 1e6 / ((performance.now() - t) / 1000);
      summary.push({ metric: "store serve throughput, 4 concurrent readers of the 50 MB video", value: agg.toFixed(0), unit: "MB/s", goal: "", pass: null });
      details.concurrentServeMBps = agg;

      ctx.progress(0.95, "fair share");
      const idleMs = 2000;
      const waited = {};
      for (const share of [0.5, 1]) {
        const fair = await startDecodeService({ token, concurrency: 2, maxDownloads: 8, idleTimeoutMs: idleMs, clientShare: share, fetch: { allowlist: [originHost] }, store: { urlKey: key } });
        try {
          const store = (client, url) =>
            fetch(`${fair.url}/v1/store`, { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${token}`, "x-kvedge-client": client }, body: JSON.stringify({ url, kind: "image" }) }).then((x) => x.arrayBuffer());
          const hog = Array.from({ length: 8 }, (_, i) => store("c-hog", `http://${originHost}/stall/${share}-${i}`));
          const want = share < 1 ? 4 : 8;
          bytesOf("image", `fair-${share}`); // the origin's bytes made before the clock starts
          for (let i = 0; i < 500 && stalled.size < want; i++) await new Promise((r) => setTimeout(r, 5));
          waited[share] = await timed(() => store("c-other", `http://${originHost}/image/fair-${share}`));
          await Promise.all(hog);
        } finally {
          await fair.close();
        }
      }
      summary.push({
        metric: `a second client's 5 MB image while one client holds its stalled downloads (idle cut ${idleMs / 1000} s): with the per-client share / one client may hold every slot`,
        value: `${waited[0.5].toFixed(0)} / ${waited[1].toFixed(0)}`,
        unit: "ms",
        goal: "",
        pass: null,
      });
      details.fairShareWaitMs = waited;
    } finally {
      await svc.close();
      for (const res of stalled) res.destroy();
      origin.closeAllConnections();
      await new Promise((r) => origin.close(r));
    }
    return { summary, details, plots: [] };
  },
};
