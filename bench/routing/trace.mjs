// Seeded synthetic workload: multi-turn chats, document QA, images and videos (repeated with Zipf
// popularity, plus never-seen ones), and unique text. Media items appear as their routing token
// spans: vision_start, pad-valued tokens (1 000 000 + hash mod 2^30, as SGLang pads them), vision_end.
import { rng, zipf } from "../lib/stats.mjs";

const VS = 151652;
const VE = 151653;
const IM_START = 151644;
const IM_END = 151645;

/**
 * `skew` scales every popularity exponent: 1 = the default Zipf mix, 0 = uniform picks, 1.5 = more
 * skewed. `streamShare`: the fraction of requests a client streams (the edge learns a streamed
 * request's prefill is over from its first output; an unstreamed one says nothing until it ends).
 * Drawn from its own seeded sequence, so the rest of the trace is the same whatever the share.
 */
export function makeTrace({ seed, requests, meanGapMs, imagePads, videoPads, skew = 1, streamShare = 0.5 }) {
  const random = rng(seed);
  const streamRandom = rng(seed ^ 0x2f1a);
  const int = (lo, hi) => lo + Math.floor(random() * (hi - lo + 1));
  const text = (n) => Array.from({ length: n }, () => int(1000, 150_000));
  const turn = (role, body) => [IM_START, role, 198, ...body, IM_END, 198];
  let hashSeq = 1;
  const mediaSpan = (pads, hash) => {
    const v = 1_000_000 + (hash % 2 ** 30);
    return { tokens: [VS, ...new Array(pads).fill(v), VE], key: `media:${hash}` };
  };

  const systems = Array.from({ length: 20 }, () => turn(9125, text(int(150, 1200))));
  const docs = Array.from({ length: 200 }, () => text(int(800, 6000)));
  const images = Array.from({ length: 300 }, () => ({ hash: hashSeq++ * 2654435761, pads: imagePads[int(0, imagePads.length - 1)] }));
  const videos = Array.from({ length: 60 }, () => ({ hash: hashSeq++ * 2654435761, pads: videoPads[int(0, videoPads.length - 1)] }));
  const pickSystem = zipf(systems.length, 1.1 * skew, random);
  const pickDoc = zipf(docs.length, 1.0 * skew, random);
  const pickImage = zipf(images.length, 1.0 * skew, random);
  const pickVideo = zipf(videos.length, 1.0 * skew, random);
  const sessions = [];

  const out = [];
  let t = 0;
  for (let i = 0; i < requests; i++) {
    t += -Math.log(1 - random()) * meanGapMs; // Poisson arrivals
    const r = random();
    const outputTokens = int(30, 300);
    const output = text(outputTokens);
    let tokens;
    let urlKey;
    let kind;
    const media = (list, pick) => {
      const m = random() < 0.25 ? { hash: hashSeq++ * 2654435761, pads: list[0].pads } : list[pick()];
      return mediaSpan(m.pads, m.hash);
    };
    if (r < 0.35) {
      kind = "chat";
      let s = sessions.length && random() < 0.75 ? sessions[int(Math.max(0, sessions.length - 40), sessions.length - 1)] : null;
      if (!s || s.turns >= 12) {
        const first = random() < 0.2 ? media(images, pickImage) : null;
        s = { history: [...systems[pickSystem()], ...turn(872, [...(first ? first.tokens : []), ...text(int(50, 400))])], key: first ? first.key : `chat:${i}`, turns: 1 };
        sessions.push(s);
      } else {
        // The previous answer, as the template renders it, then the new user turn.
        s.history = [...s.history, IM_START, 77091, 198, ...s.lastOutput, IM_END, 198, ...turn(872, text(int(20, 300)))];
        s.turns++;
      }
      s.lastOutput = output;
      tokens = [...s.history, IM_START, 77091, 198];
      urlKey = s.key;
    } else if (r < 0.6) {
      kind = "doc";
      const d = pickDoc();
      tokens = [...systems[pickSystem()], ...turn(872, [...docs[d], ...text(int(20, 120))]), IM_START, 77091, 198];
      urlKey = `doc:${d}`;
    } else if (r < 0.8) {
      kind = "image";
      const m = media(images, pickImage);
      tokens = [...systems[pickSystem()], ...turn(872, [...m.tokens, ...text(int(20, 150))]), IM_START, 77091, 198];
      urlKey = m.key;
    } else if (r < 0.9) {
      kind = "video";
      const m = media(videos, pickVideo);
      tokens = [...systems[pickSystem()], ...turn(872, [...m.tokens, ...text(int(20, 150))]), IM_START, 77091, 198];
      urlKey = m.key;
    } else {
      kind = "text";
      tokens = [...systems[pickSystem()], ...turn(872, text(int(300, 3000))), IM_START, 77091, 198];
      urlKey = `text:${i}`;
    }
    out.push({ id: i, at: t, kind, tokens, output, urlKey, stream: streamRandom() < streamShare });
  }
  return out;
}

export const VISION_START = VS;
