/**
 * Stored conversations with images (src/edge/responses/stored-media.ts): a Responses conversation
 * adding one image per turn (data: URLs and http URLs), each turn prepared by the edge's own
 * preparation (`prepareRouting`) in a FRESH isolate (new config, so a new media memo; turn chain
 * and prefix cache cleared) against a real decode service / media store and a real origin. With the
 * stored records' media items seeded, each turn verifies only its new image (earlier ones come from
 * the seeded memo; stored ones after one held check), and the prompt, routed ids, block hashes and
 * mm hashes equal a full preparation from scratch; without the seeds every earlier image is verified,
 * and every earlier http image stored, again on every turn.
 */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { inputToMessages, ResponseCreateSchema, toChatRequest, type ChatMessage } from "../../../src/api/responses-schema.ts";
import { localBlockHashes, namespaceTag, type NamespaceTag } from "../../../src/blocks/block-hash.ts";
import { parseEdgeConfig } from "../../../src/config/config.ts";
import { limitsOf, parseChatBody } from "../../../src/edge/chat/parse.ts";
import { mediaMemoStats } from "../../../src/edge/chat/media-deps.ts";
import { prepareRouting, type PrepareDeps } from "../../../src/edge/chat/prepare.ts";
import { namespacedItemHash } from "../../../src/edge/cache-salt.ts";
import { mediaItems, storeSigner, verifyMedia } from "../../../src/edge/media.ts";
import { mediaSeeds, StoredMediaSchema, turnMedia, type StoredMedia } from "../../../src/edge/responses/stored-media.ts";
import { buildRoutingView, cohortEligibility, SGLANG_CONTRACT_KEY } from "../../../src/layout/index.ts";
import { DecodeClient } from "../../../src/media/decode-client.ts";
import { SafeFetcher } from "../../../src/media/safe-fetch.ts";
import { importMediaUrlKey } from "../../../src/media/signed-url.ts";
import { preparePrompt } from "../../../src/prompt/index.ts";
import { sharedPrefixCache } from "../../../src/prompt/prefix-cache.ts";
import { getQwenTokenizer } from "../../../src/prompt/tokenizer/index.ts";
import { sharedTurnChain } from "../../../src/prompt/turn-chain.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { startDecodeService, type DecodeService } from "../../../services/decode/server.ts";
import { fixtureContract } from "../../fixtures/models/load.ts";
import { mediaPrepareDeps } from "../../helpers/media-prepare-deps.ts";
import { makePng } from "../../helpers/png.ts";
import { startMediaOrigin, type MediaOrigin } from "../../helpers/media-origin.ts";

const KEY = "responses-media-url-key-0123456789ab";
const TOKEN = "responses-media-decode-token-0123";
const MODEL = "Qwen/Qwen3-VL-8B-Instruct";
const profile = { family: "qwen3_vl", templateId: "qwen3vl-instruct" } as const;
const TENANT = "sk-responses-media-tenant";

const files = new Map<string, Uint8Array>();
let origin: MediaOrigin;
let originUrl = "";
let svc: DecodeService;

beforeAll(async () => {
  await initHashing();
  for (let i = 0; i < 4; i++) files.set(`/img-${i}.png`, makePng(200 + 64 * i, 160 + 32 * i, { seed: 10 + i }));
  origin = await startMediaOrigin(files);
  originUrl = origin.url;
  svc = await startDecodeService({ token: TOKEN, port: 0, fetch: { allowlist: [new URL(originUrl).host] }, store: { urlKey: KEY, dir: mkdtempSync(join(tmpdir(), "kvedge-responses-media-")) } });
}, 60_000);
afterAll(async () => {
  await svc?.close();
  await origin?.close();
});

/** A fresh isolate's dependencies: a new config object starts a new media memo (media-deps.ts). */
function freshIsolate(): PrepareDeps {
  sharedTurnChain().clear();
  sharedPrefixCache().clear();
  return mediaPrepareDeps({ model: MODEL, profile, decodeUrl: svc.url, token: TOKEN, urlKey: KEY, originHost: new URL(originUrl).host });
}

const dataUrl = (bytes: Uint8Array) => `data:image/png;base64,${Buffer.from(bytes).toString("base64")}`;
/** Turn i's image: data: URLs on even turns, the origin's URL on odd ones. */
const imageOf = (i: number) => (i % 2 === 0 ? dataUrl(files.get(`/img-${i}.png`)!) : `${originUrl}/img-${i}.png`);

/** The request prepared from scratch, without any of the edge's caches: template, tokenizer, store, layout. */
async function fullPath(body: string, tag: NamespaceTag): Promise<{ text: string; routed: number[]; hashes: bigint[]; mmHashes: string[] }> {
  const req = parseChatBody(body, limitsOf(parseEdgeConfig({})));
  const prompt = preparePrompt(req, profile);
  const tokenizer = getQwenTokenizer("qwen3_vl");
  const media = await verifyMedia(
    prompt.mediaParts.map((p) => ({ kind: p.kind, url: p.url, param: "x" })),
    { fetcher: new SafeFetcher({ allowlist: [new URL(originUrl).host] }), decode: new DecodeClient({ url: svc.url, token: TOKEN }), inlineMaxBytes: 1 << 20, sign: storeSigner(svc.url, importMediaUrlKey(KEY), 60), forwardClientUrls: false },
    { client: null, signal: null },
  );
  const cohort = cohortEligibility([{ [SGLANG_CONTRACT_KEY]: fixtureContract("qwen3_vl") }]);
  if (!cohort.ok) throw new Error(cohort.reason);
  const items = mediaItems(media, cohort.digest).items.map((it) => (it.hash === null ? it : { ...it, hash: namespacedItemHash(it.hash, tag) }));
  const view = buildRoutingView(cohort.contract, tokenizer.encode(prompt.text, ""), items, (t) => tokenizer.encode(t, ""));
  if (!view.ok) throw new Error(view.reason);
  return { text: prompt.text, routed: Array.from(view.tokens), hashes: localBlockHashes(view.tokens, 16), mmHashes: view.mmHashes };
}

interface Work {
  /** The media store's calls: storing (an http image), probing, held checks. */
  store: number;
  probe: number;
  held: number;
  /** Items the fresh isolate's media memo answered (a data: URL's digest and header not computed again); its memo starts empty each turn. */
  memoHits: number;
  /** Entries the media memo took in (seeds and this turn's verified items). */
  memoStores: number;
}
const counts = (): Work => ({ store: svc.stats.storeCalls, probe: svc.stats.probeCalls, held: svc.stats.heldChecks, memoHits: mediaMemoStats().hits, memoStores: mediaMemoStats().stores });

/** Four turns, one new image each, every turn in a fresh isolate (or all in one: `sameIsolate`); the store's calls per turn. */
async function converse(seeded: boolean, sameIsolate = false): Promise<Work[]> {
  const tag = namespaceTag(`responses-media-${seeded}`);
  const records: { messages: ChatMessage[]; media: StoredMedia[] }[] = [];
  const work: Work[] = [];
  let deps: PrepareDeps | null = null;
  for (let i = 0; i < 4; i++) {
    const req = ResponseCreateSchema.parse({ model: MODEL, instructions: "Describe briefly.", input: [{ role: "user", content: [{ type: "input_text", text: `Picture ${i}?` }, { type: "input_image", image_url: imageOf(i), detail: "auto" }] }] });
    const history = records.flatMap((r) => r.messages);
    const input = inputToMessages(req.input);
    const body = JSON.stringify(toChatRequest(req, history, input));
    deps = sameIsolate && deps ? deps : freshIsolate();
    const before = counts();
    const seeds = seeded ? mediaSeeds(records.flatMap((r) => r.media.map((m) => StoredMediaSchema.parse(m))), history) : [];
    const prep = await prepareRouting(parseChatBody(body, limitsOf(deps.config)), { ...deps, mediaSeeds: seeds }, "", { client: { apiKey: TENANT }, signal: null }, tag, body);
    const after = counts();
    work.push({ store: after.store - before.store, probe: after.probe - before.probe, held: after.held - before.held, memoHits: after.memoHits, memoStores: after.memoStores - before.memoStores });

    const full = await fullPath(body, tag);
    expect(prep.plan.fallbackReason, `turn ${i}`).toBeNull();
    expect(prep.prompt.text).toBe(full.text);
    expect(Array.from(prep.plan.view!.tokens)).toEqual(full.routed);
    expect(prep.plan.localHashes).toEqual(full.hashes);
    expect(prep.plan.mmHashes).toEqual(full.mmHashes);

    const media = turnMedia(prep.prompt.mediaParts, prep.media, 1 + history.length, 1);
    expect(media, "this turn's image is kept").toHaveLength(1);
    const output = inputToMessages(ResponseCreateSchema.parse({ model: MODEL, input: [{ type: "message", role: "assistant", content: [{ type: "output_text", text: `A picture (${i}).` }] }] }).input);
    records.push(JSON.parse(JSON.stringify({ messages: [...input, ...output], media })) as (typeof records)[number]);
  }
  return work;
}

describe("stored conversations with images continue in a fresh isolate from their stored media items", () => {
  it("each turn verifies only its new image; the prompt, routed ids and hashes equal the full path", async () => {
    const seeded = await converse(true);
    const unseeded = await converse(false);
    // Every earlier image from the stored items; only a new http image is fetched and stored; the earlier
    // http images are confirmed with one held check.
    expect(seeded.map((w) => w.memoHits)).toEqual([0, 1, 2, 3]);
    expect(seeded.map((w) => w.store)).toEqual([0, 1, 0, 1]);
    expect(seeded.map((w) => w.held)).toEqual([0, 0, 1, 1]);
    // Without them, a fresh isolate verifies every image of the conversation again, storing every http one.
    expect(unseeded.map((w) => w.memoHits)).toEqual([0, 0, 0, 0]);
    expect(unseeded.map((w) => w.store)).toEqual([0, 1, 1, 2]);
  }, 60_000);

  it("in the isolate that verified them, the seeds add nothing: the memo takes in only each turn's new image", async () => {
    const work = await converse(true, true);
    // (The first turn's memo is created during the turn: its count starts there.)
    expect(work.slice(1).map((w) => w.memoStores)).toEqual([1, 1, 1]);
    expect(work.map((w) => w.store)).toEqual([0, 1, 0, 1]);
  }, 60_000);
});
