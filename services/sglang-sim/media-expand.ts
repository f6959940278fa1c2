/**
 * The simulator's multimodal path (the `MediaExpander` of generate.ts), doing what SGLang does
 * with a Qwen-VL request: load every `image_data` / `video_data` item, read the decoder metadata
 * (media-probe.ts), expand each `<|vision_start|><|image_pad|>|<|video_pad|><|vision_end|>` of the
 * tokenized text into the item's exact token run (src/layout, the simulator's own contract), and
 * overwrite every media token of an item with its pad value (media-hash.ts). The result is SGLang's
 * `origin_input_ids`: what the radix cache stores and KV events publish.
 *
 * Caller `mm_hashes` (SGLang >= 0.5.13): one hex string per item in SGLang's item order (all images
 * in prompt order, then all videos); a list of any other length is ignored as a whole, a malformed
 * entry only for its item (content hash instead).
 */
import {
  expandPrompt,
  isPyError,
  layoutImageItem,
  layoutVideoItem,
  padValueFromHash,
  sglangItemOrder,
  smartNframes,
  type EncodeText,
  type ExpandItem,
  type ImageProbe,
  type ItemLayoutResult,
  type Modality,
  type VideoProbe,
  type WorkerContract,
} from "../../src/layout/index.ts";
import type { QwenTokenizer } from "../../src/prompt/tokenizer/index.ts";
import type { GenerateBody, MediaExpander, MediaItemInfo, PreparedPrompt } from "./generate.ts";
import { callerPadValue, contentPadValue } from "./media-hash.ts";
import type { MediaLoader } from "./media-fetch.ts";
import { probeImage, type VideoMetadataProber } from "./media-probe.ts";
import { SglangInternalError, SglangValueError } from "./sglang-errors.ts";
import type { EncodedItem, EncodeRequestItem } from "./encoder.ts";

export interface MediaExpanderDeps {
  contract: WorkerContract;
  loader: MediaLoader;
  videoProber: Pick<VideoMetadataProber, "probe">;
  log: (line: string) => void;
  /**
   * A language-only server's encoders (encoder.ts): each item's embedding comes from them. With
   * `callerHashes` false (zmq_to_scheduler, mooncake) pad values come from the embeddings, and
   * caller mm_hashes are never applied; with true (zmq_to_tokenizer) they are, as on a unified worker.
   */
  remoteEncode?: { encode: (items: EncodeRequestItem[]) => Promise<EncodedItem[]>; callerHashes: boolean };
}

function items(v: unknown, field: string): string[] {
  if (v === null || v === undefined) return [];
  const list = Array.isArray(v) ? v : [v];
  return list.map((x, i) => {
    if (typeof x !== "string" || x.length === 0) {
      throw new SglangValueError(`${field}[${i}]: the simulator accepts media as URL, data: URL or base64 strings only`);
    }
    return x;
  });
}

interface LoadedItem {
  modality: Modality;
  /** Index within its modality (image_data / video_data position). */
  kindIndex: number;
  source: string;
  bytes: Uint8Array;
  pieces: ExpandItem["pieces"];
  padCount: number;
  /** Pad tokens per temporal group (an image: all of them), for the encoder's cost. */
  sliceTokens: number;
}

function layoutOrThrow<G>(r: ItemLayoutResult<G>, what: string): { pieces: ExpandItem["pieces"]; geometry: G } {
  if (!r.ok) throw new SglangValueError(`${what}: ${r.detail}`);
  return r;
}

/**
 * A Qwen3-VL video side < 32 after SGLang's pre-resize takes a transformers branch the contract
 * cannot pin down ("unknown"); the simulator behaves like current transformers and scales up.
 */
function layoutVideo(c: WorkerContract, probe: VideoProbe): ItemLayoutResult<unknown> {
  const r = layoutVideoItem(c, probe);
  if (!r.ok && r.reason === "unpredictable_geometry" && c.smallSidePolicy === "unknown") return layoutVideoItem({ ...c, smallSidePolicy: "scale" }, probe);
  return r;
}

/**
 * What SGLang raises for a clip its sampler cannot take: `smart_nframes` raises ValueError for 0-1
 * frames (→ 400); without a usable rate torchcodec's average_fps is None or 0 and the division
 * raises TypeError / ZeroDivisionError, which SGLang's handler does not catch (→ 500).
 */
function throwSamplerError(c: WorkerContract, probe: VideoProbe, what: string, detail: string): never {
  if (!(probe.avgFps > 0)) throw new SglangInternalError(`${what}: ${detail}`);
  try {
    smartNframes(c.sglangVideoConfig, probe.totalFrames, probe.avgFps, c.sglangPreprocess);
  } catch (e) {
    if (isPyError(e)) throw e.pyType === "ValueError" ? new SglangValueError(e.message) : new SglangInternalError(e.message);
    throw e;
  }
  throw new SglangValueError(`${what}: ${detail}`);
}

async function loadItem(deps: MediaExpanderDeps, modality: Modality, kindIndex: number, source: string): Promise<LoadedItem> {
  const bytes = await deps.loader.load(modality, source);
  const what = `${modality}_data[${kindIndex}]`;
  if (modality === "image") {
    const probe: ImageProbe = probeImage(bytes);
    const { pieces, geometry } = layoutOrThrow(layoutImageItem(deps.contract, probe), what);
    return { modality, kindIndex, source, bytes, pieces, padCount: geometry.padCount, sliceTokens: geometry.padCount };
  }
  const probe = await deps.videoProber.probe(bytes);
  const r = layoutVideo(deps.contract, probe);
  if (!r.ok && (r.reason === "single_frame_video" || r.reason === "unprobeable_video")) throwSamplerError(deps.contract, probe, what, r.detail);
  const { pieces, geometry } = layoutOrThrow(r, what);
  const g = geometry as { padCount: number; tokensPerGroup: number };
  return { modality, kindIndex, source, bytes, pieces, padCount: g.padCount, sliceTokens: g.tokensPerGroup };
}

export function createMediaExpander(deps: MediaExpanderDeps): MediaExpander {
  const encoders = new WeakMap<QwenTokenizer, EncodeText>();
  const encoderOf = (t: QwenTokenizer): EncodeText => {
    let e = encoders.get(t);
    if (!e) {
      e = (s: string) => t.encode(s, "");
      encoders.set(t, e);
    }
    return e;
  };

  return async (body: GenerateBody, tokenizer: QwenTokenizer): Promise<PreparedPrompt> => {
    if (body.audio_data !== null && body.audio_data !== undefined) {
      throw new SglangValueError("audio_data: Qwen-VL models have no audio input");
    }
    if (typeof body.text !== "string") {
      throw new SglangValueError("The simulator expands media only for `text` prompts (input_ids with media is not simulated).");
    }
    const images = items(body.image_data, "image_data");
    const videos = items(body.video_data, "video_data");
    const encode = encoderOf(tokenizer);
    let template: number[];
    try {
      template = tokenizer.encode(body.text, "");
    } catch (err) {
      throw new SglangValueError(`Tokenization failed: ${(err as Error).message}`);
    }
    const ids = deps.contract.tokenIds;

    // Placeholders in prompt order; HF matches the k-th image placeholder with image_data[k].
    const order: { modality: Modality; kindIndex: number }[] = [];
    const seen = { image: 0, video: 0 };
    for (const t of template) {
      if (t === ids.imagePad) order.push({ modality: "image", kindIndex: seen.image++ });
      else if (t === ids.videoPad) order.push({ modality: "video", kindIndex: seen.video++ });
    }
    // SGLang's base processor (python/sglang/srt/multimodal/processors/base_processor.py @3b05740b,
    // `submit_data_loading_tasks`) takes the items of each modality in order, one per placeholder:
    // a placeholder without an item is a ValueError; items left over only log a warning and are
    // not loaded (an image in an assistant message, which the Qwen3-VL templates do not print).
    if (seen.image > images.length || seen.video > videos.length) {
      throw new SglangValueError(
        `Mismatch: more media placeholders than media items: text has ${seen.image} image and ${seen.video} video placeholder(s), ` +
          `the request has ${images.length} image(s) and ${videos.length} video(s).`,
      );
    }
    if (seen.image < images.length || seen.video < videos.length) {
      deps.log(`more media items than placeholders (${images.length} image(s) for ${seen.image}, ${videos.length} video(s) for ${seen.video}): the extra ones are not loaded`);
    }
    if (order.length === 0) {
      // mm_hashes alone: zero items, so SGLang ignores the list.
      return { inputIds: template, imageTokens: 0, videoTokens: 0 };
    }

    const loaded = await Promise.all(
      order.map((o) => loadItem(deps, o.modality, o.kindIndex, o.modality === "image" ? images[o.kindIndex]! : videos[o.kindIndex]!)),
    );

    const sglangOrder = sglangItemOrder(loaded);
    const encoded = deps.remoteEncode ? await deps.remoteEncode.encode(loaded.map((it) => ({ modality: it.modality, source: it.source }))) : null;
    const hashes = deps.remoteEncode && !deps.remoteEncode.callerHashes ? null : body.mm_hashes;
    let callerHashes: unknown[] | null = null;
    if (hashes !== null && hashes !== undefined) {
      if (!deps.contract.acceptsMmHashes) deps.log(`mm_hashes ignored: SGLang ${deps.contract.sglangVersion} does not take caller hashes`);
      else if (!Array.isArray(hashes) || hashes.length !== loaded.length) {
        deps.log(`mm_hashes ignored: ${Array.isArray(hashes) ? hashes.length : "non-list"} hash(es) for ${loaded.length} media item(s)`);
      } else callerHashes = hashes;
    }
    const padValues = new Array<number>(loaded.length);
    const padSources = new Array<MediaItemInfo["padSource"]>(loaded.length);
    sglangOrder.forEach((itemIdx, j) => {
      const fromCaller = callerHashes ? callerPadValue(callerHashes[j]) : null;
      // Without a caller hash, SGLang hashes the item it holds: the pixels, or the encoder's embedding.
      const own = encoded ? padValueFromHash(BigInt(`0x${encoded[itemIdx]!.embeddingHash}`)) : contentPadValue(loaded[itemIdx]!.bytes);
      padValues[itemIdx] = fromCaller ?? own;
      padSources[itemIdx] = fromCaller !== null ? "mm_hashes" : encoded ? "embedding" : "content";
    });

    const expandItems: ExpandItem[] = loaded.map((it, i) => ({ modality: it.modality, pieces: it.pieces, padValue: padValues[i]! }));
    const r = expandPrompt(template, expandItems, ids, encode);
    if (!r.ok) throw new SglangValueError(r.detail);

    let imageTokens = 0;
    let videoTokens = 0;
    const media: MediaItemInfo[] = loaded.map((it, i) => {
      if (it.modality === "image") imageTokens += it.padCount;
      else videoTokens += it.padCount;
      const span = r.spans[i]!;
      return { modality: it.modality, kindIndex: it.kindIndex, padValue: padValues[i]!, padSource: padSources[i]!, padCount: it.padCount, sliceTokens: it.sliceTokens, start: span.start, end: span.end };
    });
    return { inputIds: Array.from(r.tokens), imageTokens, videoTokens, media };
  };
}
