// Seeded global workload for the scale simulation: many tenants (each with its own system prompt,
// so chains have many distinct roots, Zipf-popular), each with a home region where most of its
// users are; multi-turn chats, document questions and one-off prompts. Requests carry the region of
// the edge that received them.
import { rng, zipf } from "../lib/stats.mjs";

export const REGIONS = ["eu", "us", "ap"];

export function makeScaleTrace({ seed, requests, tenants, meanGapMs, regionWeights = [0.4, 0.4, 0.2] }) {
  const random = rng(seed);
  const int = (lo, hi) => lo + Math.floor(random() * (hi - lo + 1));
  const text = (n) => Array.from({ length: n }, () => int(1000, 150_000));
  const pickRegion = () => {
    let u = random();
    for (let i = 0; i < REGIONS.length; i++) if ((u -= regionWeights[i]) <= 0) return i;
    return REGIONS.length - 1;
  };
  const T = Array.from({ length: tenants }, () => ({
    home: pickRegion(),
    system: text(int(48, 640)),
    docs: Array.from({ length: 3 }, () => text(int(400, 3000))),
    sessions: [],
  }));
  const pickTenant = zipf(tenants, 0.9, random);
  const out = [];
  let t = 0;
  for (let i = 0; i < requests; i++) {
    t += -Math.log(1 - random()) * meanGapMs;
    const tenant = T[pickTenant()];
    const region = random() < 0.8 ? tenant.home : pickRegion();
    const output = text(int(16, 160));
    const r = random();
    let tokens;
    let kind;
    if (r < 0.55) {
      kind = "chat";
      let s = tenant.sessions.length && random() < 0.7 ? tenant.sessions[int(Math.max(0, tenant.sessions.length - 8), tenant.sessions.length - 1)] : null;
      if (!s || s.turns >= 10) {
        s = { history: [...tenant.system, ...text(int(30, 300))], turns: 1, last: null };
        tenant.sessions.push(s);
        if (tenant.sessions.length > 32) tenant.sessions.shift();
      } else {
        s.history = [...s.history, ...s.last, ...text(int(20, 200))];
        s.turns++;
      }
      s.last = output;
      tokens = s.history;
    } else if (r < 0.85) {
      kind = "doc";
      tokens = [...tenant.system, ...tenant.docs[int(0, 2)], ...text(int(10, 80))];
    } else {
      kind = "oneoff";
      tokens = [...tenant.system, ...text(int(100, 1500))];
    }
    out.push({ id: i, at: t, kind, region, tokens, output });
  }
  return out;
}
