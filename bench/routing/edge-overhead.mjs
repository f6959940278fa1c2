// The edge's own time per request, drawn per request from the edge suite's committed figures
// (bench/results/latest.json, suites.edge.details; bench/suites/edge.mjs: the real Worker under
// workerd, overhead = edge − direct wall time per request pair, so it holds the edge's parse,
// render, tokenize, hash, route and settle RPCs to the routing index (a local workerd process), the
// body build and the proxy hop; it holds no client ↔ edge network, no edge ↔ Durable Object network
// between sites, no edge ↔ GPU network and no media download from the origin (the bench's media
// server is local)). Per kind and prompt size the suite gives p50 and p99; a request's overhead is a
// draw from the lognormal with that median and that 99th percentile:
//   - a later turn of a chat, agent or vision session: the growing-conversation bin of its kind
//     holding its prompt size (every later turn in the bin, at the run's turn-chain hit rate), the
//     nearest bin where none holds it;
//   - a session's first request (nothing of it cached at the edge), and every request of a kind
//     without conversation bins: the single-history text cases, cold or warm (text-1k … text-100k;
//     between them p50 and p99 interpolated on log(tokens), held flat beyond them); a cold first
//     request with media adds what the 4-image case costs over a text prompt of its length (p50).
import { readFileSync } from "node:fs";
import { rng } from "../lib/stats.mjs";

const TEXT_SIZES = ["1k", "8k", "32k", "100k"];
/** z of the 99th percentile of the standard normal. */
const Z99 = 2.3263;
/** Conversation bins' names carry their history range (bench/edge/conversations.mjs HISTORY_BINS): "≤8k", "8–24k", "24–40k (32k)", … */
const binRange = (name) => {
  const m = /^(?:≤(\d+)k|(\d+)–(\d+)k)/.exec(name);
  if (!m) throw new Error(`edge conversation bin "${name}": no token range`);
  return m[1] ? [0, +m[1] * 1000] : [+m[2] * 1000, +m[3] * 1000];
};

export function loadEdgeOverhead(latestPath = new URL("../results/latest.json", import.meta.url)) {
  const latest = JSON.parse(readFileSync(latestPath, "utf8"));
  const edge = latest.suites?.edge;
  const cases = edge?.details?.cases;
  if (!cases) throw new Error(`${latestPath}: no edge suite figures (run \`npm run bench -- --only edge\` first)`);
  const curve = (state) =>
    TEXT_SIZES.map((s) => {
      const c = cases[`text-${s} ${state}`];
      if (!c) throw new Error(`${latestPath}: edge case "text-${s} ${state}" missing`);
      return { tokens: c.promptTokens, p50: c.overheadP50, p99: c.overheadP99 };
    }).sort((a, b) => a.tokens - b.tokens);
  const text = { cold: curve("cold"), warm: curve("warm") };
  const image = cases["image-4 cold"];
  if (!image) throw new Error(`${latestPath}: edge case "image-4 cold" missing`);
  const mediaExtraCold = Math.max(0, image.overheadP50 - interpolate(text.cold, image.promptTokens).p50);
  const conversations = {};
  for (const [kind, k] of Object.entries(edge.details.conversations?.kinds ?? {})) {
    const bins = Object.entries(k.bins)
      .map(([name, b]) => ({ name, range: binRange(name), ...(b.all ?? b) }))
      .filter((b) => b.n > 0 && b.overheadP50 > 0);
    if (bins.length) conversations[kind] = bins.map(({ name, range, n, overheadP50, overheadP99 }) => ({ name, range, n, p50: overheadP50, p99: overheadP99 }));
  }
  return { at: edge.at ?? latest.at, text, mediaExtraCold, conversations };
}

/** p50 and p99 (ms) of the edge overhead for a request of `kind` with `tokens` prompt tokens, a later turn (`warm`) or not, with or without media. */
export function edgeOverheadQuantiles(figures, { kind, tokens, warm, media }) {
  const bins = warm ? figures.conversations[kind] : undefined;
  if (bins) {
    const bin = bins.find((b) => tokens > b.range[0] && tokens <= b.range[1]) ?? nearest(bins, tokens);
    return { p50: bin.p50, p99: bin.p99 };
  }
  const q = interpolate(warm ? figures.text.warm : figures.text.cold, tokens);
  const extra = media && !warm ? figures.mediaExtraCold : 0;
  return { p50: q.p50 + extra, p99: q.p99 + extra };
}

/**
 * One draw per request of `trace` (same draws for every policy replaying it: a paired comparison),
 * seeded. A session's first request is cold, its later ones warm.
 */
export function sampleEdgeOverheads(figures, trace, seed) {
  const random = rng(seed ^ 0x3d9e);
  const normal = () => Math.sqrt(-2 * Math.log(1 - random())) * Math.cos(2 * Math.PI * random());
  const seen = new Set();
  const out = new Array(trace.length);
  for (const r of trace) {
    const warm = seen.has(r.session);
    seen.add(r.session);
    const { p50, p99 } = edgeOverheadQuantiles(figures, { kind: r.kind, tokens: r.tokens.length, warm, media: r.mediaUrl != null });
    const sigma = p99 > p50 ? Math.log(p99 / p50) / Z99 : 0;
    out[r.id] = p50 * Math.exp(sigma * normal());
  }
  return out;
}

function nearest(bins, tokens) {
  const dist = (b) => (tokens <= b.range[0] ? b.range[0] - tokens : tokens - b.range[1]);
  return bins.reduce((a, b) => (dist(b) < dist(a) ? b : a));
}

function interpolate(pts, tokens) {
  if (tokens <= pts[0].tokens) return pts[0];
  for (let i = 1; i < pts.length; i++) {
    if (tokens <= pts[i].tokens) {
      const a = pts[i - 1];
      const b = pts[i];
      const f = (Math.log(tokens) - Math.log(a.tokens)) / (Math.log(b.tokens) - Math.log(a.tokens));
      return { p50: a.p50 + f * (b.p50 - a.p50), p99: a.p99 + f * (b.p99 - a.p99) };
    }
  }
  return pts[pts.length - 1];
}
