// A CPU profile of one function through the inspector, reduced to the top self-time frames.
import { Session } from "node:inspector/promises";
import { relative } from "node:path";
import { ROOT } from "./workerd.mjs";

/**
 * Each sample's weight (µs): the time since the one before, capped at 4× the median interval. An
 * embedder that samples only while its isolate runs (workerd between requests and across I/O)
 * leaves gaps of many ms, which uncapped would all go to whatever ran first after the wait.
 */
export function sampleWeights(profile) {
  const deltas = profile.timeDeltas.filter((d) => d > 0).sort((a, b) => a - b);
  const cap = 4 * (deltas[Math.floor(deltas.length / 2)] ?? 0);
  return profile.samples.map((_, i) => Math.min(Math.max(0, profile.timeDeltas[i] ?? 0), cap));
}

/**
 * Self time per frame ("function file:line") of a V8 CPU profile, largest first, over the frames
 * `keep` admits; `fileOf` names a frame's script URL.
 */
export function selfTimes(profile, { keep = () => true, fileOf = (url) => url } = {}) {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const dt = new Map();
  const weights = sampleWeights(profile);
  for (let i = 0; i < profile.samples.length; i++) dt.set(profile.samples[i], (dt.get(profile.samples[i]) ?? 0) + weights[i]);
  const agg = new Map();
  let total = 0;
  for (const [id, us] of dt) {
    const cf = byId.get(id).callFrame;
    if (!keep(cf)) continue;
    const file = cf.url ? fileOf(cf.url) : "";
    const key = `${cf.functionName || "(anonymous)"} ${file ? `${file}:${cf.lineNumber + 1}` : ""}`.trim();
    agg.set(key, (agg.get(key) ?? 0) + us);
    total += us;
  }
  return { total, frames: [...agg.entries()].sort((a, b) => b[1] - a[1]) };
}

export async function topSelfTime(fn, top = 10) {
  const s = new Session();
  s.connect();
  try {
    await s.post("Profiler.enable");
    await s.post("Profiler.setSamplingInterval", { interval: 100 });
    await s.post("Profiler.start");
    await fn();
    const { profile } = await s.post("Profiler.stop");
    const { total, frames } = selfTimes(profile, {
      keep: (cf) => !cf.url.startsWith("node:inspector") && cf.functionName !== "(program)" && cf.functionName !== "(idle)",
      fileOf: (url) => relative(ROOT, url.replace(/^file:\/\//, "")),
    });
    return frames.slice(0, top).map(([frame, us]) => ({ frame, selfPct: +((100 * us) / total).toFixed(1) }));
  } finally {
    s.disconnect();
  }
}
