// Seeded generators of routing traces shaped like published workloads (parameters and their sources
// in TRACE_PARAMS; docs/benchmarks.md §Routing). Each returns requests in arrival order:
// { id, at (ms), kind, session, turn, tokens, output, stream } (vision adds mediaUrl, attached, media). Tokens are ids of a ChatML-like
// rendering (system, user, assistant and tool turns), so a follow-up request's prompt starts with the
// earlier request's prompt and answer exactly as a chat template renders them. Time is open loop: a
// session's next request comes a think (or tool) time after its previous one, whatever the fleet does.
// `rate` scales how often sessions start (the suite sets it for a target load); every other parameter
// keeps the published shape.
import { rng, zipf } from "../lib/stats.mjs";
import { MEDIA_SHAPES, mediaTokenCounts } from "./media-tokens.mjs";

const IM_START = 151644;
const IM_END = 151645;
const NL = 198;
const ROLE = { system: 9125, user: 872, assistant: 77091, tool: 14172 };
/** Qwen2-VL family <|vision_start|> and <|vision_end|>: a media item's pad span sits between them. */
export const VISION_START = 151652;
const VISION_END = 151653;
/** SGLang replaces a media item's pad tokens by one value derived from its content hash; offset here past the vocabulary. */
const PAD_BASE = 1_000_000;
/** Longest context any generator produces (Qwen2.5-VL's max_position_embeddings, 131 072). */
export const MAX_CONTEXT = 131_072;

/**
 * Trace parameters. Lengths are tokens, times ms; lognormal(median, sigma). Where a figure is
 * published, `source` names it; the rest are stated assumptions.
 */
export const TRACE_PARAMS = {
  chat: {
    source:
      "multi-turn chat: turns per conversation and message lengths in the range of ShareGPT/LMSYS-Chat conversations; think time between turns lognormal, median 20 s (an assumption: no published inter-turn distribution with figures was found to cite), so follow-ups arrive seconds to minutes apart, not within 1 s",
    systemPrompts: 8,
    systemTokens: [200, 2000],
    turnsMean: 5,
    turnsMax: 20,
    userTokens: { median: 120, sigma: 1.0, max: 4000 },
    answerTokens: { median: 250, sigma: 0.8, max: 2000 },
    thinkMs: { median: 20_000, sigma: 1.0, max: 600_000 },
    /** Reading the answer: it streams at this rate before the user starts thinking. */
    answerMsPerToken: 10,
  },
  agent: {
    source:
      "agent loops: a fixed system prompt + tool schemas, then tool call / tool output steps appended each turn; steps keep 86–97 % of the next prompt as prefix (issue #37; the trace's measured reuse is reported with the results); tool outputs lognormal, median 2k tokens, up to 32k",
    agents: 4,
    prefixTokens: [4000, 10_000],
    taskTokens: [200, 1500],
    stepsRange: [10, 60],
    callTokens: { median: 150, sigma: 0.6, max: 1000 },
    toolTokens: { median: 2000, sigma: 1.0, max: 32_000 },
    toolMs: { median: 1500, sigma: 1.0, max: 60_000 },
    callMsPerToken: 10,
  },
  docqa: {
    source: "document QA: shared long documents (lognormal, median 20k tokens, 4k–120k), Zipf-popular (s = 1), each asked many independent questions; the pool's size is the caller's (the routing suite sizes it for a working set beyond the fleet's KV)",
    /** Documents in the pool unless the caller says otherwise. */
    documents: 30,
    docTokens: { median: 20_000, sigma: 0.9, min: 4000, max: 120_000 },
    docZipf: 1.0,
    systemPrompts: 3,
    systemTokens: [150, 600],
    questionTokens: { median: 60, sigma: 0.8, max: 800 },
    answerTokens: { median: 200, sigma: 0.7, max: 1500 },
  },
  mooncake: {
    source:
      "Mooncake trace shape (Qin et al., Mooncake, arXiv 2407.00079 / FAST '25; kvcache-ai/Mooncake trace: 23 608 requests in one hour, 512-token hash blocks): mean input 7 590 tokens, mean output 182; input lognormal with that mean (sigma 1.0, median 4.6k); 35 % of requests continue an earlier one (its input and answer, then new input) where the drawn length leaves room, 60 % of the rest start with one of 200 Zipf-popular 512-token-aligned prefixes (median 6 blocks): these shares are our choice, not the trace's (it is not replayed here); the resulting infinite-cache ceiling is reported",
    inputMean: 7590,
    inputSigma: 1.0,
    outputMean: 182,
    outputSigma: 0.8,
    hashBlock: 512,
    roots: 200,
    rootZipf: 1.0,
    rootBlocks: { median: 6, sigma: 0.8, max: 64 },
    continueShare: 0.35,
    rootShare: 0.6,
  },
  vision: {
    source:
      "multi-turn vision chat: a first user turn with 1–3 images or a video, then follow-ups of which some attach new media and some re-send an image already in the conversation; media drawn Zipf-popular from shared pools (the same item reaches many users), a quarter never seen before; a repeated item comes under a URL not seen before half the time (signed or CDN URLs, re-uploads); pad tokens per item from kvedge's layout of the Qwen2.5-VL contract (media-tokens.mjs); think time as in chat. The shares are our assumptions (no published multi-turn vision trace with these figures was found); the resulting repeat and URL shares are reported",
    media: MEDIA_SHAPES,
    systemPrompts: 8,
    systemTokens: [200, 1500],
    turnsMean: 4,
    turnsMax: 12,
    imagePool: 400,
    videoPool: 40,
    mediaZipf: 1.0,
    freshShare: 0.25,
    videoShare: 0.2,
    firstTurnImages: [1, 3],
    newMediaTurnShare: 0.3,
    resendTurnShare: 0.15,
    otherUrlShare: 0.5,
    userTokens: { median: 60, sigma: 0.9, max: 2000 },
    answerTokens: { median: 200, sigma: 0.8, max: 2000 },
    thinkMs: { median: 20_000, sigma: 1.0, max: 600_000 },
    answerMsPerToken: 10,
  },
};

function sampler(seed) {
  const random = rng(seed);
  const int = (lo, hi) => lo + Math.floor(random() * (hi - lo + 1));
  const normal = () => Math.sqrt(-2 * Math.log(1 - random())) * Math.cos(2 * Math.PI * random());
  const lognormal = ({ median, sigma, min = 1, max = Infinity }) => Math.round(Math.min(max, Math.max(min, median * Math.exp(sigma * normal()))));
  const exp = (mean) => -Math.log(1 - random()) * mean;
  const text = (n) => {
    const out = new Array(n);
    for (let i = 0; i < n; i++) out[i] = 1000 + Math.floor(random() * 149_000);
    return out;
  };
  return { random, int, lognormal, exp, text };
}

const turn = (role, body) => [IM_START, ROLE[role], NL, ...body, IM_END, NL];
const GEN = [IM_START, ROLE.assistant, NL];
/** The answer as the template renders it into the next prompt (the generation prompt is already there). */
const closeAnswer = (output) => [...output, IM_END, NL];

function finish(requests, streamRandom) {
  requests.sort((a, b) => a.at - b.at);
  return requests.map((r, id) => ({ ...r, id, stream: streamRandom() < 0.5 }));
}

/** Multi-turn chat with think time. */
export function chatTrace({ seed, sessions, rate }) {
  const P = TRACE_PARAMS.chat;
  const s = sampler(seed);
  const systems = Array.from({ length: P.systemPrompts }, () => turn("system", s.text(s.int(...P.systemTokens))));
  const pickSystem = zipf(systems.length, 1, s.random);
  const out = [];
  let start = 0;
  for (let k = 0; k < sessions; k++) {
    start += s.exp(1000 / rate);
    const turns = Math.min(P.turnsMax, 1 + Math.floor(s.exp(P.turnsMean - 1)));
    let history = systems[pickSystem()];
    let at = start;
    for (let t = 0; t < turns && history.length < MAX_CONTEXT - 8000; t++) {
      history = [...history, ...turn("user", s.text(s.lognormal(P.userTokens)))];
      const output = s.text(s.lognormal(P.answerTokens));
      const tokens = [...history, ...GEN];
      out.push({ at, kind: "chat", session: `chat-${k}`, turn: t, tokens, output });
      history = [...tokens, ...closeAnswer(output)];
      at += output.length * P.answerMsPerToken + s.lognormal(P.thinkMs);
    }
  }
  return finish(out, rng(seed ^ 0x2f1a));
}

/** Agent loops: tool call and tool output appended each step. */
export function agentTrace({ seed, sessions, rate }) {
  const P = TRACE_PARAMS.agent;
  const s = sampler(seed);
  const prefixes = Array.from({ length: P.agents }, () => turn("system", s.text(s.int(...P.prefixTokens))));
  const pickAgent = zipf(prefixes.length, 1, s.random);
  const out = [];
  let start = 0;
  for (let k = 0; k < sessions; k++) {
    start += s.exp(1000 / rate);
    const steps = s.int(...P.stepsRange);
    let tokens = [...prefixes[pickAgent()], ...turn("user", s.text(s.int(...P.taskTokens))), ...GEN];
    let at = start;
    for (let t = 0; t < steps; t++) {
      const output = s.text(s.lognormal(P.callTokens));
      out.push({ at, kind: "agent", session: `agent-${k}`, turn: t, tokens, output });
      const tool = s.text(s.lognormal(P.toolTokens));
      const next = [...tokens, ...closeAnswer(output), ...turn("tool", tool), ...GEN];
      if (next.length + P.callTokens.max > MAX_CONTEXT) break;
      tokens = next;
      at += output.length * P.callMsPerToken + s.lognormal(P.toolMs);
    }
  }
  return finish(out, rng(seed ^ 0x2f1a));
}

/** Document QA: many independent questions over shared long documents. */
export function docqaTrace({ seed, sessions, rate, documents = TRACE_PARAMS.docqa.documents }) {
  const P = TRACE_PARAMS.docqa;
  const s = sampler(seed);
  const docs = Array.from({ length: documents }, () => s.text(s.lognormal(P.docTokens)));
  const systems = Array.from({ length: P.systemPrompts }, () => turn("system", s.text(s.int(...P.systemTokens))));
  const pickDoc = zipf(docs.length, P.docZipf, s.random);
  const out = [];
  let at = 0;
  // One "session" is one question (each is its own conversation).
  for (let k = 0; k < sessions; k++) {
    at += s.exp(1000 / rate);
    const d = pickDoc();
    const tokens = [...systems[d % systems.length], ...turn("user", [...docs[d], ...s.text(s.lognormal(P.questionTokens))]), ...GEN];
    out.push({ at, kind: "docqa", session: `doc-${d}-q${k}`, turn: 0, tokens, output: s.text(s.lognormal(P.answerTokens)) });
  }
  return finish(out, rng(seed ^ 0x2f1a));
}

/** The Mooncake trace's shape: long inputs, short outputs, shared block-aligned prefixes. */
export function mooncakeTrace({ seed, sessions, rate }) {
  const P = TRACE_PARAMS.mooncake;
  const s = sampler(seed);
  const median = (mean, sigma) => mean / Math.exp((sigma * sigma) / 2);
  const inputLen = () => s.lognormal({ median: median(P.inputMean, P.inputSigma), sigma: P.inputSigma, min: 64, max: MAX_CONTEXT - 4096 });
  const outputLen = () => s.lognormal({ median: median(P.outputMean, P.outputSigma), sigma: P.outputSigma, max: 4096 });
  const roots = Array.from({ length: P.roots }, () => s.text(P.hashBlock * s.lognormal(P.rootBlocks)));
  const pickRoot = zipf(roots.length, P.rootZipf, s.random);
  const recent = [];
  const out = [];
  let at = 0;
  for (let k = 0; k < sessions; k++) {
    at += s.exp(1000 / rate);
    const want = inputLen();
    const output = s.text(outputLen());
    let tokens;
    let session;
    const u = s.random();
    const prev = recent.length ? recent[s.int(Math.max(0, recent.length - 64), recent.length - 1)] : null;
    if (u < P.continueShare && prev && prev.tokens.length + prev.output.length + 16 <= want) {
      // A later turn of an earlier request (when the drawn length leaves room): its whole input and
      // answer, then new input, so the input length keeps the drawn distribution.
      tokens = [...prev.tokens, ...prev.output, ...s.text(want - prev.tokens.length - prev.output.length)];
      session = prev.session;
    } else if (u < P.continueShare + P.rootShare) {
      const root = roots[pickRoot()];
      tokens = [...root, ...s.text(Math.max(16, want - root.length))];
      session = `mc-${k}`;
    } else {
      tokens = s.text(want);
      session = `mc-${k}`;
    }
    const req = { at, kind: "mooncake", session, turn: 0, tokens, output };
    out.push(req);
    recent.push(req);
  }
  return finish(out, rng(seed ^ 0x2f1a));
}

/**
 * Multi-turn vision chat. Each request carries `mediaUrl` (the URL of its prompt's first media item:
 * what a peer keying media by URL routes on), `attached` (this turn's new items: content id, URL) and
 * `media` (every item of its prompt as the worker's encoder cost sees it: services/sglang-sim/timing.ts
 * MediaCostItem).
 */
export function visionTrace({ seed, sessions, rate }) {
  const P = TRACE_PARAMS.vision;
  const s = sampler(seed);
  const pads = mediaTokenCounts(P.media);
  let nextId = 1;
  const item = (kind) => {
    const id = nextId++;
    const list = kind === "video" ? pads.videos : pads.images;
    const shape = s.int(0, list.length - 1);
    const slice = kind === "video" ? pads.videoSlices[shape] : list[shape];
    // Distinct pad values per item (an odd multiplier is a bijection mod 2^30).
    return { id, kind, pads: list[shape], slice, pad: PAD_BASE + ((id * 2654435761) % 2 ** 30), url: `https://media.example/${kind}/${id}`, urls: 1 };
  };
  const images = Array.from({ length: P.imagePool }, () => item("image"));
  const videos = Array.from({ length: P.videoPool }, () => item("video"));
  const pickImage = zipf(images.length, P.mediaZipf, s.random);
  const pickVideo = zipf(videos.length, P.mediaZipf, s.random);
  const systems = Array.from({ length: P.systemPrompts }, () => turn("system", s.text(s.int(...P.systemTokens))));
  const pickSystem = zipf(systems.length, 1, s.random);
  // A repeated item keeps its first URL or arrives under one not seen before.
  const urlOf = (m) => (s.random() < P.otherUrlShare ? `${m.url}?sig=${m.urls++}` : m.url);
  const draw = (kind) => {
    if (s.random() < P.freshShare) {
      const m = item(kind);
      return { m, url: m.url };
    }
    const m = kind === "video" ? videos[pickVideo()] : images[pickImage()];
    return { m, url: urlOf(m) };
  };
  const span = (m) => [VISION_START, ...new Array(m.pads).fill(m.pad), VISION_END];
  const out = [];
  let start = 0;
  for (let k = 0; k < sessions; k++) {
    start += s.exp(1000 / rate);
    const turns = Math.min(P.turnsMax, 1 + Math.floor(s.exp(P.turnsMean - 1)));
    let history = systems[pickSystem()];
    let at = start;
    let firstUrl = null;
    const shown = [];
    const media = [];
    for (let t = 0; t < turns; t++) {
      const attach = [];
      if (t === 0) {
        if (s.random() < P.videoShare) attach.push(draw("video"));
        else for (let i = s.int(...P.firstTurnImages); i > 0; i--) attach.push(draw("image"));
      } else {
        const u = s.random();
        if (u < P.newMediaTurnShare) attach.push(draw(s.random() < P.videoShare ? "video" : "image"));
        else if (u < P.newMediaTurnShare + P.resendTurnShare && shown.length) {
          const m = shown[s.int(0, shown.length - 1)];
          attach.push({ m, url: urlOf(m) });
        }
      }
      const body = [...attach.flatMap(({ m }) => span(m)), ...s.text(s.lognormal(P.userTokens))];
      if (history.length + body.length + P.answerTokens.max + 16 > MAX_CONTEXT) break;
      for (const a of attach) if (a.m.kind === "image") shown.push(a.m);
      firstUrl ??= attach[0]?.url ?? null;
      // Each span's pads follow <|im_start|>user\n and its <|vision_start|>.
      let at0 = history.length + 3;
      for (const { m } of attach) {
        media.push({ modality: m.kind, end: at0 + 1 + m.pads, padCount: m.pads, sliceTokens: m.slice });
        at0 += m.pads + 2;
      }
      history = [...history, ...turn("user", body)];
      const output = s.text(s.lognormal(P.answerTokens));
      const tokens = [...history, ...GEN];
      const attached = attach.map(({ m, url }) => ({ content: m.id, url }));
      out.push({ at, kind: "vision", session: `vision-${k}`, turn: t, tokens, output, mediaUrl: firstUrl, attached, media: media.slice() });
      history = [...tokens, ...closeAnswer(output)];
      at += output.length * P.answerMsPerToken + s.lognormal(P.thinkMs);
    }
  }
  return finish(out, rng(seed ^ 0x2f1a));
}

/**
 * Media reuse in a vision trace, in arrival order: attachments, the share whose content came earlier
 * (in any conversation), and of those the share under a URL not seen before for that content.
 */
export function mediaShape(trace) {
  const seen = new Map();
  let n = 0;
  let repeats = 0;
  let otherUrl = 0;
  let mediaTokens = 0;
  let tokens = 0;
  for (const r of trace) {
    tokens += r.tokens.length;
    for (const t of r.tokens) if (t >= PAD_BASE) mediaTokens++;
    for (const a of r.attached ?? []) {
      n++;
      const urls = seen.get(a.content);
      if (urls) {
        repeats++;
        if (!urls.has(a.url)) otherUrl++;
        urls.add(a.url);
      } else seen.set(a.content, new Set([a.url]));
    }
  }
  return { attachments: n, repeatShare: n ? repeats / n : 0, repeatUnderOtherUrlShare: repeats ? otherUrl / repeats : 0, mediaTokenShare: tokens ? mediaTokens / tokens : 0 };
}

export const TRACES = { chat: chatTrace, agent: agentTrace, docqa: docqaTrace, mooncake: mooncakeTrace, vision: visionTrace };

/** Shape of a generated trace: lengths, and for follow-ups the share of the prompt that is the previous request's prompt. */
export function traceShape(trace) {
  const lens = trace.map((r) => r.tokens.length).sort((a, b) => a - b);
  const q = (p) => lens[Math.min(lens.length - 1, Math.floor(p * lens.length))];
  const last = new Map();
  const reuse = [];
  for (const r of trace) {
    const prev = last.get(r.session);
    if (prev && r.tokens.length > prev.tokens.length) reuse.push(prev.tokens.length / r.tokens.length);
    last.set(r.session, r);
  }
  reuse.sort((a, b) => a - b);
  const rq = (p) => (reuse.length ? +reuse[Math.min(reuse.length - 1, Math.floor(p * reuse.length))].toFixed(3) : null);
  return {
    requests: trace.length,
    sessions: last.size,
    spanS: +((trace[trace.length - 1].at - trace[0].at) / 1000).toFixed(1),
    inputTokens: { mean: Math.round(lens.reduce((a, b) => a + b, 0) / lens.length), p50: q(0.5), p90: q(0.9), max: lens[lens.length - 1] },
    outputTokensMean: Math.round(trace.reduce((a, r) => a + r.output.length, 0) / trace.length),
    followUpPrefixShare: { n: reuse.length, p10: rq(0.1), p50: rq(0.5), p90: rq(0.9) },
  };
}
