// The edge's own time per request, from the edge suite's committed figures (bench/results/latest.json,
// suites.edge.details.cases: real Worker under workerd, edge − direct p50 per prompt size). A
// session's first request pays the cold figure, a follow-up the warm one; between the measured sizes
// (text-1k, 8k, 32k, 100k) the overhead is interpolated on log(tokens), and held flat beyond them.
// A prompt with media adds what the edge's image case (4 images) costs over a text prompt of its
// length, cold or warm: the media work (fetch, probe, layout) the text curve leaves out.
import { readFileSync } from "node:fs";

const SIZES = ["1k", "8k", "32k", "100k"];

export function loadEdgeOverhead(latestPath = new URL("../results/latest.json", import.meta.url)) {
  const latest = JSON.parse(readFileSync(latestPath, "utf8"));
  const edge = latest.suites?.edge;
  const cases = edge?.details?.cases;
  if (!cases) throw new Error(`${latestPath}: no edge suite figures (run \`npm run bench -- --only edge\` first)`);
  const curve = (state) =>
    SIZES.map((s) => {
      const c = cases[`text-${s} ${state}`];
      if (!c) throw new Error(`${latestPath}: edge case "text-${s} ${state}" missing`);
      return { tokens: c.promptTokens, ms: c.overheadP50 };
    }).sort((a, b) => a.tokens - b.tokens);
  const figures = { at: edge.at ?? latest.at, cold: curve("cold"), warm: curve("warm") };
  const media = (state) => {
    const c = cases[`image-4 ${state}`];
    if (!c) throw new Error(`${latestPath}: edge case "image-4 ${state}" missing`);
    return Math.max(0, c.overheadP50 - edgeOverheadMs(figures, c.promptTokens, state === "warm"));
  };
  return { ...figures, mediaExtra: { cold: media("cold"), warm: media("warm") } };
}

/** Edge overhead (ms) of a request with `tokens` prompt tokens, warm (a follow-up in its session) or cold, with or without media. */
export function edgeOverheadMs(figures, tokens, warm, media = false) {
  const extra = media ? (warm ? figures.mediaExtra.warm : figures.mediaExtra.cold) : 0;
  return extra + textOverheadMs(warm ? figures.warm : figures.cold, tokens);
}

function textOverheadMs(pts, tokens) {
  if (tokens <= pts[0].tokens) return pts[0].ms;
  for (let i = 1; i < pts.length; i++) {
    if (tokens <= pts[i].tokens) {
      const a = pts[i - 1];
      const b = pts[i];
      const f = (Math.log(tokens) - Math.log(a.tokens)) / (Math.log(b.tokens) - Math.log(a.tokens));
      return a.ms + f * (b.ms - a.ms);
    }
  }
  return pts[pts.length - 1].ms;
}
