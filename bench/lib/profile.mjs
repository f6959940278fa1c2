// A CPU profile of one function through the inspector, reduced to the top self-time frames.
import { Session } from "node:inspector/promises";
import { relative } from "node:path";
import { ROOT } from "./workerd.mjs";

export async function topSelfTime(fn, top = 10) {
  const s = new Session();
  s.connect();
  try {
    await s.post("Profiler.enable");
    await s.post("Profiler.setSamplingInterval", { interval: 100 });
    await s.post("Profiler.start");
    await fn();
    const { profile } = await s.post("Profiler.stop");
    const byId = new Map(profile.nodes.map((n) => [n.id, n]));
    const dt = new Map();
    for (let i = 0; i < profile.samples.length; i++) dt.set(profile.samples[i], (dt.get(profile.samples[i]) ?? 0) + (profile.timeDeltas[i] ?? 0));
    const agg = new Map();
    let total = 0;
    for (const [id, us] of dt) {
      const cf = byId.get(id).callFrame;
      const file = cf.url ? relative(ROOT, cf.url.replace(/^file:\/\//, "")) : "";
      if (cf.url.startsWith("node:inspector") || cf.functionName === "(program)" || cf.functionName === "(idle)") continue;
      const key = `${cf.functionName || "(anonymous)"} ${file ? `${file}:${cf.lineNumber + 1}` : ""}`.trim();
      agg.set(key, (agg.get(key) ?? 0) + us);
      total += us;
    }
    return [...agg.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([frame, us]) => ({ frame, selfPct: +((100 * us) / total).toFixed(1) }));
  } finally {
    s.disconnect();
  }
}
