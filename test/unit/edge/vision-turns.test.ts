/**
 * A multi-turn vision chat through the edge's preparation (`prepareRouting`, the code the chat
 * handler runs, turn chain on) against a real decode service / media store over HTTP and a real
 * origin: each turn does media work only for its new items (the store's own counters of store,
 * probe and held calls; the edge's count of items laid out and of view blocks hashed), while the prompt, the routed ids and
 * the block hashes equal a full preparation from scratch at every turn, across a store restart
 * (bytes kept: held; store emptied: the earlier items are stored again), and no entry is shared
 * across tenants. An item the store leased (when it stored it, store-route.ts, or when asked about
 * it, held-route.ts) is forwarded without asking it while the lease outlives the signed URL: after a restart that lost it the worker's fetch fails, the leases
 * are dropped (as the chat handler's recovery does first: lease-recovery.test.ts), and the next
 * preparation stores the items again; past the
 * store's lease bound it refuses leases and the edge asks every turn; a store answering no lease for a
 * remembered leased item (restarted, leases off) ends the remembered lease. A client changing an earlier item's bytes behind its URL: the conversation keeps
 * the bytes it was answered about; a new message naming the URL gets the new bytes.
 */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { EdgeConfig } from "../../../src/config/config.ts";
import { limitsOf, parseChatBody } from "../../../src/edge/chat/parse.ts";
import { prepareRouting, type PrepareDeps, type PreparedRouting } from "../../../src/edge/chat/prepare.ts";
import { routedItemStats } from "../../../src/edge/chat/routed-items.ts";
import { sharedViewHashes } from "../../../src/edge/chat/view-hashes.ts";
import { sharedPrefixCache } from "../../../src/prompt/prefix-cache.ts";
import { namespacedHashes, namespacedItemHash } from "../../../src/edge/cache-salt.ts";
import { dropLeases, mediaItems, mediaPolicyChecks, storeSigner, verifyMedia, workerForwards } from "../../../src/edge/media.ts";
import { mediaDeps } from "../../../src/edge/chat/media-deps.ts";
import { buildRoutingView, cohortEligibility, SGLANG_CONTRACT_KEY } from "../../../src/layout/index.ts";
import { localBlockHashes, namespacedLocalHashes, namespaceTag, type NamespaceTag } from "../../../src/blocks/block-hash.ts";
import { DecodeClient } from "../../../src/media/decode-client.ts";
import { SafeFetcher } from "../../../src/media/safe-fetch.ts";
import { importMediaUrlKey, workerMediaCredential } from "../../../src/media/signed-url.ts";
import { preparePrompt } from "../../../src/prompt/index.ts";
import { getQwenTokenizer } from "../../../src/prompt/tokenizer/index.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { startDecodeService, type DecodeService } from "../../../services/decode/server.ts";
import { fixtureContract } from "../../fixtures/models/load.ts";
import { mediaPrepareDeps } from "../../helpers/media-prepare-deps.ts";
import { makePng } from "../../helpers/png.ts";
import { startMediaOrigin, type MediaOrigin } from "../../helpers/media-origin.ts";
import { ffmpegToFile } from "../../helpers/wasm-media.ts";

const KEY = "vision-turns-media-url-key-0123456789";
const TOKEN = "vision-turns-decode-token-0123456789";
const MODEL = "Qwen/Qwen3-VL-8B-Instruct";
const profile = { family: "qwen3_vl", templateId: "qwen3vl-instruct" } as const;

/** What the origin serves (no freshness, `no-store`, unless a file names its Cache-Control). */
const files = new Map<string, { bytes: Uint8Array; type: string; cacheControl?: string }>();
let origin: MediaOrigin;
let originUrl = "";
let svc: DecodeService;
let storeDir = "";
let port = 0;
let config: EdgeConfig;
let deps: PrepareDeps;
let clip: Uint8Array;
let clip2: Uint8Array;

const startStore = async (dir: string, limits: { maxItems?: number; leaseShare?: number; clientShare?: number } = {}): Promise<DecodeService> =>
  startDecodeService({ token: TOKEN, port, fetch: { allowlist: [new URL(originUrl).host] }, store: { urlKey: KEY, dir, ...limits } });

/** HTTP status of each stored item's signed URL as worker w1 fetches it (its media credential as Basic auth). */
async function workerFetches(prep: PreparedRouting): Promise<number[]> {
  const { imageData, videoData } = await workerForwards(prep.media, mediaDeps(deps).sign, "w1");
  const auth = { authorization: `Basic ${btoa(`w1:${await workerMediaCredential(await importMediaUrlKey(KEY), "w1")}`)}` };
  const urls = [...imageData, ...videoData].filter((u) => u.startsWith(svc.url));
  return Promise.all(urls.map(async (u) => (await fetch(u, { headers: auth }).then(async (r) => (await r.arrayBuffer(), r.status)))));
}

beforeAll(async () => {
  await initHashing();
  files.set("/img-0.png", { bytes: makePng(640, 480, { seed: 1 }), type: "image/png" });
  files.set("/img-1.png", { bytes: makePng(300, 900, { seed: 2 }), type: "image/png" });
  files.set("/img-2.png", { bytes: makePng(1024, 768, { seed: 3 }), type: "image/png" });
  files.set("/img-3.png", { bytes: makePng(96, 64, { seed: 4 }), type: "image/png" });
  files.set("/mutable.png", { bytes: makePng(200, 100, { seed: 5, text: "version 1" }), type: "image/png" });
  const dir = mkdtempSync(join(tmpdir(), "kvedge-vision-turns-"));
  clip = new Uint8Array(await ffmpegToFile(["-f", "lavfi", "-i", "testsrc=size=160x120:rate=30", "-frames:v", "40", "-pix_fmt", "yuv420p", "-c:v", "libx264", "-preset", "ultrafast"], join(dir, "clip.mp4")));
  files.set("/clip.mp4", { bytes: clip, type: "video/mp4" });
  clip2 = new Uint8Array(await ffmpegToFile(["-f", "lavfi", "-i", "smptebars=size=128x96:rate=24", "-frames:v", "30", "-pix_fmt", "yuv420p", "-c:v", "libx264", "-preset", "ultrafast"], join(dir, "clip2.mp4")));
  origin = await startMediaOrigin(files);
  originUrl = origin.url;
  storeDir = mkdtempSync(join(tmpdir(), "kvedge-vision-store-"));
  svc = await startStore(storeDir);
  port = Number(new URL(svc.url).port);
  deps = mediaPrepareDeps({ model: MODEL, profile, decodeUrl: svc.url, token: TOKEN, urlKey: KEY, originHost: new URL(originUrl).host });
  config = deps.config;
}, 60_000);
afterAll(async () => {
  await svc?.close();
  await origin?.close();
});

const image = (url: string) => ({ type: "image_url", image_url: { url } });
const video = (url: string) => ({ type: "video_url", video_url: { url } });
const dataUrl = (bytes: Uint8Array, type: string) => `data:${type};base64,${Buffer.from(bytes).toString("base64")}`;

interface Counts {
  store: number;
  probe: number;
  held: number;
  laidOut: number;
  /** URLs checked against the media policy (the edge's SSRF rules). */
  checked: number;
  /** Layout memo keys built (a remembered item keeps its key). */
  keyed: number;
}
/** The edge's own work: view blocks hashed, template tokens expanded into the view, ids copied out of the prompt-prefix cache. */
interface EdgeWork {
  hashed: number;
  expanded: number;
  copied: number;
}
const counts = (): Counts & EdgeWork => ({
  store: svc.stats.storeCalls,
  probe: svc.stats.probeCalls,
  held: svc.stats.heldChecks,
  laidOut: routedItemStats().computed,
  checked: mediaPolicyChecks(),
  keyed: routedItemStats().keysBuilt,
  hashed: sharedViewHashes().stats().hashedBlocks,
  expanded: sharedViewHashes().stats().expandedTokens,
  copied: sharedPrefixCache().stats().copiedTokens,
});
const delta = (a: Counts & EdgeWork, b: Counts & EdgeWork): { work: Counts } & EdgeWork => ({
  work: { store: b.store - a.store, probe: b.probe - a.probe, held: b.held - a.held, laidOut: b.laidOut - a.laidOut, checked: b.checked - a.checked, keyed: b.keyed - a.keyed },
  hashed: b.hashed - a.hashed,
  expanded: b.expanded - a.expanded,
  copied: b.copied - a.copied,
});

/** One turn as the chat handler prepares it (turn chain on), and the media work it caused. */
async function turn(body: string, tenant: { key: string; tag: NamespaceTag }): Promise<{ prep: PreparedRouting; work: Counts } & EdgeWork> {
  const before = counts();
  const req = parseChatBody(body, limitsOf(config));
  const prep = await prepareRouting(req, deps, "", { client: { apiKey: tenant.key }, signal: null }, tenant.tag, body);
  return { prep, ...delta(before, counts()) };
}

/** The same request prepared from scratch, without any of the edge's caches: template, tokenizer, store, layout. */
async function fullPath(body: string, tag: NamespaceTag): Promise<{ text: string; routed: number[]; hashes: bigint[]; mmHashes: string[] }> {
  const req = parseChatBody(body, limitsOf(config));
  const prompt = preparePrompt(req, profile);
  const tokenizer = getQwenTokenizer("qwen3_vl");
  const tokens = tokenizer.encode(prompt.text, "");
  const key = importMediaUrlKey(KEY);
  const media = await verifyMedia(
    prompt.mediaParts.map((p) => ({ kind: p.kind, url: p.url, param: "x" })),
    { fetcher: new SafeFetcher({ allowlist: [new URL(originUrl).host] }), decode: new DecodeClient({ url: svc.url, token: TOKEN }), inlineMaxBytes: 1 << 20, sign: storeSigner(svc.url, key, 60), forwardClientUrls: false },
    { client: null, signal: null },
  );
  const cohort = cohortEligibility([{ [SGLANG_CONTRACT_KEY]: fixtureContract("qwen3_vl") }]);
  if (!cohort.ok) throw new Error(cohort.reason);
  const items = mediaItems(media, cohort.digest).items.map((it) => (it.hash === null ? it : { ...it, hash: namespacedItemHash(it.hash, tag) }));
  const view = buildRoutingView(cohort.contract, tokens, items, (t) => tokenizer.encode(t, ""));
  if (!view.ok) throw new Error(view.reason);
  return { text: prompt.text, routed: Array.from(view.tokens), hashes: localBlockHashes(view.tokens, 16), mmHashes: view.mmHashes };
}

async function expectFullPath(prep: PreparedRouting, body: string, tag: NamespaceTag): Promise<void> {
  const full = await fullPath(body, tag);
  expect(prep.plan.fallbackReason).toBeNull();
  expect(prep.prompt.text).toBe(full.text);
  expect(Array.from(prep.plan.view!.tokens)).toEqual(full.routed);
  expect(prep.plan.localHashes).toEqual(full.hashes);
  expect(prep.plan.mmHashes).toEqual(full.mmHashes);
}

describe("vision turns: media work for the new items only", () => {
  it("images and videos each turn, by URL and data: URL, across store restarts, never across tenants", async () => {
    const tenant = { key: "key-a", tag: namespaceTag("tenant-a") };
    const messages: unknown[] = [{ role: "system", content: "You look at pictures." }];
    const add = (parts: unknown[]) => {
      if (messages.length > 1) messages.push({ role: "assistant", content: `Answer number ${messages.length}: it shows shapes and colours.` });
      messages.push({ role: "user", content: [{ type: "text", text: `Question ${messages.length}: what is here?` }, ...parts] });
      return JSON.stringify({ model: MODEL, messages, max_tokens: 8 });
    };
    // `leased`: earlier items forwarded on the store's lease (no held call for them); `fetched`: the
    // worker's fetch of each stored item's URL (the lost ones 404).
    const ok = (n: number) => Array<number>(n).fill(200);
    const steps: { parts: unknown[] | null; work: Counts; leased: number; fetched: number[]; restart?: "keep" | "empty" }[] = [
      // First turn: its one image is stored (and leased by the store) and laid out.
      { parts: [image(`${originUrl}/img-0.png`)], work: { store: 1, probe: 0, held: 0, laidOut: 1, checked: 1, keyed: 1 }, leased: 0, fetched: ok(1) },
      // An http image and a data: image: one store call; the earlier item is leased (no held call).
      { parts: [image(`${originUrl}/img-1.png`), image(dataUrl(files.get("/img-3.png")!.bytes, "image/png"))], work: { store: 1, probe: 0, held: 0, laidOut: 2, checked: 2, keyed: 2 }, leased: 1, fetched: ok(2) },
      { parts: [video(`${originUrl}/clip.mp4`)], work: { store: 1, probe: 0, held: 0, laidOut: 1, checked: 1, keyed: 1 }, leased: 2, fetched: ok(3) },
      // A data: video is probed once (the decode service), never again.
      { parts: [video(dataUrl(clip2, "video/mp4"))], work: { store: 0, probe: 1, held: 0, laidOut: 1, checked: 1, keyed: 1 }, leased: 3, fetched: ok(3) },
      // The store restarts with its bytes: every earlier stored item is leased, none asked about, all fetched.
      { parts: [image(`${originUrl}/img-2.png`)], work: { store: 1, probe: 0, held: 0, laidOut: 1, checked: 1, keyed: 1 }, leased: 3, fetched: ok(4), restart: "keep" },
      // The store restarts empty: the leased items (img-0, img-1, img-2, clip) are forwarded without
      // asking and the worker cannot fetch them; the new image has the bytes of turn 2's data: image
      // (its layout is that one's).
      { parts: [image(`${originUrl}/img-3.png`)], work: { store: 1, probe: 0, held: 0, laidOut: 0, checked: 1, keyed: 1 }, leased: 4, fetched: [404, 404, 404, 200, 404], restart: "empty" },
      // The request prepared again once those leases are dropped: the store is asked about them and
      // the lost ones (4) are stored again, none laid out again. Their URLs passed the policy when
      // they were remembered, as did the new message's img-3 (remembered since the turn before): none
      // is checked; img-3 is stored again (the same bytes: its remembered item stays, key and all).
      // Items verified again are new objects: their layout memo keys are built again (4).
      { parts: null, work: { store: 5, probe: 0, held: 1, laidOut: 0, checked: 0, keyed: 4 }, leased: 0, fetched: ok(5) },
      // Every earlier stored item is leased (the store leased those it stored again): no call to the store at all.
      { parts: [{ type: "text", text: "And now without a picture." }], work: { store: 0, probe: 0, held: 0, laidOut: 0, checked: 0, keyed: 0 }, leased: 5, fetched: ok(5) },
      { parts: [{ type: "text", text: "And once more." }], work: { store: 0, probe: 0, held: 0, laidOut: 0, checked: 0, keyed: 0 }, leased: 5, fetched: ok(5) },
    ];
    let body = "";
    let previousBlocks = 0;
    let previousSplit = 0;
    for (const [i, step] of steps.entries()) {
      if (step.restart) {
        await svc.close();
        if (step.restart === "empty") storeDir = mkdtempSync(join(tmpdir(), "kvedge-vision-store-"));
        svc = await startStore(storeDir);
      }
      if (step.parts) body = add(step.parts);
      const { prep, work, hashed, expanded, copied } = await turn(body, tenant);
      expect(work, `turn ${i + 1}`).toEqual(step.work);
      expect(prep.mediaLeased.length, `turn ${i + 1}: forwarded on a lease`).toBe(step.leased);
      const fetched = await workerFetches(prep);
      expect(fetched, `turn ${i + 1}: the worker's fetches`).toEqual(step.fetched);
      // What the chat handler's recovery does first when the worker's answer fails (media.ts recoverLeased).
      const failed = fetched.some((s) => s !== 200);
      if (failed) dropLeases(prep.mediaLeased);
      if (!step.parts) continue;
      // Template ids: the earlier turns' come from the prompt-prefix cache's pieces, neither copied nor expanded again.
      expect(copied, `turn ${i + 1}: template ids copied`).toBe(0);
      expect(expanded, `turn ${i + 1}: template tokens expanded`).toBe(prep.encodedTokens);
      // New template tokens: from the previous turn's generation prompt on (its last <|im_start|>).
      if (i > 0) expect(prep.encodedTokens, `turn ${i + 1}: new template tokens`).toBe(prep.tokens.length - previousSplit);
      previousSplit = prep.tokens.lastIndexOf(getQwenTokenizer("qwen3_vl").specialIds.imStart);
      // Namespaced per piece, as the chat handler routes: the view's hashes are never joined.
      const joined = sharedViewHashes().stats().joinedHashes;
      const routedHashes = namespacedHashes({ cacheSalt: tenant.key, tag: tenant.tag }, prep.plan);
      expect(sharedViewHashes().stats().joinedHashes - joined, `turn ${i + 1}: view hashes joined`).toBe(0);
      expect(routedHashes).toEqual(namespacedLocalHashes(prep.plan.localHashes, tenant.tag!));
      // (Not for the failed turn: the full path would store the lost items again before the retry.)
      if (!failed) await expectFullPath(prep, body, tenant.tag);
      // Block hashes: only the blocks after the previous turn's prompt (its generation prompt on).
      const blocks = prep.plan.localHashes.length;
      if (i > 0) expect(hashed, `turn ${i + 1}: blocks hashed of ${blocks}`).toBeLessThanOrEqual(blocks - previousBlocks + 1);
      previousBlocks = blocks;
      if (i > 1) expect(prep.prompt.reusedMessages, `turn ${i + 1} reused its history`).toBeGreaterThan(0);
    }

    // Another tenant sending the same conversation shares nothing: every item is its own work.
    const other = { key: "key-b", tag: namespaceTag("tenant-b") };
    const { prep, work, hashed } = await turn(body, other);
    expect(work).toEqual({ store: 5, probe: 1, held: 0, laidOut: 6, checked: 7, keyed: 7 });
    expect(hashed).toBe(prep.plan.localHashes.length);
    await expectFullPath(prep, body, other.tag);
  }, 120_000);

  it("an earlier item's bytes changed behind its URL: the conversation keeps the bytes it was answered about; a new message gets the new ones", async () => {
    const tenant = { key: "key-c", tag: namespaceTag("tenant-c") };
    const url = `${originUrl}/mutable.png`;
    const first = [{ role: "user", content: [{ type: "text", text: "What does it say?" }, image(url)] }];
    const t1 = await turn(JSON.stringify({ model: MODEL, messages: first }), tenant);
    const v1 = t1.prep.plan.mmHashes![0];
    files.set("/mutable.png", { bytes: makePng(200, 100, { seed: 5, text: "version 2" }), type: "image/png" });
    const later = [...first, { role: "assistant", content: "It says version 1." }, { role: "user", content: [{ type: "text", text: "And this one?" }, image(url)] }];
    const t2 = await turn(JSON.stringify({ model: MODEL, messages: later }), tenant);
    // The earlier item: as verified in turn 1 (leased by the store, not fetched); the new one: fetched again.
    expect(t2.work).toMatchObject({ store: 1, held: 0 });
    expect(t2.prep.plan.mmHashes![0]).toBe(v1);
    expect(t2.prep.plan.mmHashes![1]).not.toBe(v1);
    expect(t2.prep.media.every((m) => m.stored)).toBe(true);
    expect(new Set(t2.prep.media.map((m) => m.digest)).size).toBe(2);
  }, 60_000);

  it("a new message naming an earlier URL with the same bytes: stored again, the remembered item stays (its layout key, its lease)", async () => {
    const tenant = { key: "key-e", tag: namespaceTag("tenant-e") };
    const url = `${originUrl}/img-2.png`;
    const messages: unknown[] = [{ role: "user", content: [{ type: "text", text: "What is this?" }, image(url)] }];
    const t1 = await turn(JSON.stringify({ model: MODEL, messages }), tenant);
    messages.push({ role: "assistant", content: "Shapes." }, { role: "user", content: [{ type: "text", text: "And this one?" }, image(url)] });
    const body2 = JSON.stringify({ model: MODEL, messages });
    const t2 = await turn(body2, tenant);
    // The new message's item goes through the store (the origin's HTTP caching) and is the remembered
    // one; its URL passed the policy when it was remembered: not checked again.
    expect(t2.work).toEqual({ store: 1, probe: 0, held: 0, laidOut: 0, checked: 0, keyed: 0 });
    expect(t2.prep.media[1]).toBe(t1.prep.media[0]);
    await expectFullPath(t2.prep, body2, tenant.tag);
    messages.push({ role: "assistant", content: "The same shapes." }, { role: "user", content: "Sure?" });
    const t3 = await turn(JSON.stringify({ model: MODEL, messages }), tenant);
    expect(t3.work).toEqual({ store: 0, probe: 0, held: 0, laidOut: 0, checked: 0, keyed: 0 });
    expect(t3.prep.mediaLeased).toHaveLength(2);
  }, 60_000);

  it("a new message naming an earlier URL the origin said is fresh: taken from the memo while the store would answer it from its copy, then stored again", async () => {
    const tenant = { key: "key-g", tag: namespaceTag("tenant-g") };
    files.set("/fresh.png", { bytes: makePng(320, 240, { seed: 6 }), type: "image/png", cacheControl: "max-age=600" });
    files.set("/brief.png", { bytes: makePng(240, 320, { seed: 7 }), type: "image/png", cacheControl: "max-age=1" });
    const fresh = `${originUrl}/fresh.png`;
    const brief = `${originUrl}/brief.png`;
    const messages: unknown[] = [{ role: "user", content: [{ type: "text", text: "What are these?" }, image(fresh), image(brief)] }];
    const t1 = await turn(JSON.stringify({ model: MODEL, messages }), tenant);
    expect(t1.work).toMatchObject({ store: 2, held: 0 });
    await new Promise((r) => setTimeout(r, 1_100));
    messages.push({ role: "assistant", content: "Shapes." }, { role: "user", content: [{ type: "text", text: "And these?" }, image(fresh), image(brief)] });
    const body2 = JSON.stringify({ model: MODEL, messages });
    const t2 = await turn(body2, tenant);
    // fresh.png: the store would answer it from its copy (no origin request), so the edge asks it nothing;
    // brief.png's freshness ran out: stored again (the store asks the origin), its URL not checked again.
    expect(t2.work).toEqual({ store: 1, probe: 0, held: 0, laidOut: 0, checked: 0, keyed: 0 });
    expect(t2.prep.media[2]).toBe(t1.prep.media[0]);
    expect(t2.prep.media[3]).toBe(t1.prep.media[1]);
    expect(t2.prep.mediaLeased).toHaveLength(3);
    await expectFullPath(t2.prep, body2, tenant.tag);
    // Another tenant's conversation naming the fresh URL asks the store (memo entries are per client and namespace).
    const other = await turn(JSON.stringify({ model: MODEL, messages: [{ role: "user", content: [{ type: "text", text: "This?" }, image(fresh)] }, { role: "assistant", content: "A shape." }, { role: "user", content: [{ type: "text", text: "Again?" }, image(fresh)] }] }), { key: "key-h", tag: namespaceTag("tenant-h") });
    expect(other.work).toMatchObject({ store: 2, held: 0 });
  }, 60_000);

  it("a URL remembered as fresh, after a worker's failed fetch (the store restarted empty): a new message naming it goes through the store again", async () => {
    const tenant = { key: "key-i", tag: namespaceTag("tenant-i") };
    files.set("/fresh-lost.png", { bytes: makePng(200, 150, { seed: 8 }), type: "image/png", cacheControl: "max-age=600" });
    const url = `${originUrl}/fresh-lost.png`;
    const t1 = await turn(JSON.stringify({ model: MODEL, messages: [{ role: "user", content: [{ type: "text", text: "What is this?" }, image(url)] }] }), tenant);
    expect(t1.work).toMatchObject({ store: 1, held: 0 });
    await svc.close();
    svc = await startStore(mkdtempSync(join(tmpdir(), "kvedge-vision-store-")));
    try {
      // Another conversation of the client names the URL in its new message: taken from the memo (fresh), forwarded on its lease, lost.
      const body = JSON.stringify({ model: MODEL, messages: [{ role: "user", content: [{ type: "text", text: "And what is this?" }, image(url)] }] });
      const t2 = await turn(body, tenant);
      expect(t2.work).toMatchObject({ store: 0, held: 0 });
      expect(t2.prep.mediaLeased).toHaveLength(1);
      expect(await workerFetches(t2.prep)).toEqual([404]);
      dropLeases(t2.prep.mediaLeased);
      // The store's freshness went with its restart: the URL is stored again, not taken from the memo and asked about (a held call).
      const t3 = await turn(body, tenant);
      expect(t3.work).toMatchObject({ store: 1, held: 0, checked: 0 });
      expect(t3.prep.mediaLeased).toHaveLength(0);
      expect(await workerFetches(t3.prep)).toEqual([200]);
      await expectFullPath(t3.prep, body, tenant.tag);
    } finally {
      await svc.close();
      svc = await startStore(storeDir);
    }
  }, 60_000);

  it("a new message naming a leased URL, answered with no lease (the store restarted, leases off): the remembered lease is given up, the next turn asks", async () => {
    const tenant = { key: "key-f", tag: namespaceTag("tenant-f") };
    const url = `${originUrl}/img-1.png`;
    const messages: unknown[] = [{ role: "user", content: [{ type: "text", text: "What is this?" }, image(url)] }];
    const t1 = await turn(JSON.stringify({ model: MODEL, messages }), tenant);
    expect(t1.work).toMatchObject({ store: 1, held: 0 });
    // Restarted with its bytes and without leases (leaseShare 0: every lease refused): the lease of turn 1 is gone.
    await svc.close();
    svc = await startStore(storeDir, { leaseShare: 0 });
    try {
      messages.push({ role: "assistant", content: "Shapes." }, { role: "user", content: [{ type: "text", text: "And this one?" }, image(url)] });
      const t2 = await turn(JSON.stringify({ model: MODEL, messages }), tenant);
      expect(t2.work).toMatchObject({ store: 1, held: 0 });
      expect(t2.prep.media[1]).toBe(t1.prep.media[0]);
      messages.push({ role: "assistant", content: "The same shapes." }, { role: "user", content: "Sure?" });
      const t3 = await turn(JSON.stringify({ model: MODEL, messages }), tenant);
      expect(t3.work).toMatchObject({ store: 0, held: 1 });
      expect(t3.prep.mediaLeased).toHaveLength(0);
      expect(await workerFetches(t3.prep)).toEqual([200, 200]);
    } finally {
      await svc.close();
      svc = await startStore(storeDir);
    }
  }, 60_000);

  it("past the store's lease bound it refuses a lease, and the edge asks about that item every turn", async () => {
    // A store of at most 8 items leases at most 2 (leaseShare 0.25); one client may hold them all (clientShare 1).
    await svc.close();
    svc = await startStore(mkdtempSync(join(tmpdir(), "kvedge-vision-store-")), { maxItems: 8, leaseShare: 0.25, clientShare: 1 });
    try {
      const tenant = { key: "key-d", tag: namespaceTag("tenant-d") };
      const messages: unknown[] = [];
      const ask = (parts: unknown[]) => {
        if (messages.length > 0) messages.push({ role: "assistant", content: "Shapes." });
        messages.push({ role: "user", content: [{ type: "text", text: `Question ${messages.length}?` }, ...parts] });
        return turn(JSON.stringify({ model: MODEL, messages }), tenant);
      };
      for (const n of [0, 1, 2]) await ask([image(`${originUrl}/img-${n}.png`)]);
      // img-0 and img-1 were leased (turns 2 and 3); img-2's lease is refused, so each turn asks about it alone.
      for (const q of ["Again?", "Once more?"]) {
        const t = await ask([{ type: "text", text: q }]);
        expect(t.work).toMatchObject({ store: 0, held: 1 });
        expect(t.prep.mediaLeased.map((l) => l.entry.media.digest)).toEqual(t.prep.media.slice(0, 2).map((m) => m.digest));
        expect(await workerFetches(t.prep)).toEqual([200, 200, 200]);
      }
    } finally {
      await svc.close();
      svc = await startStore(storeDir);
    }
  }, 60_000);
});
