// Suite "media": runs bench/media/probe.mjs (owned by the media work) when it exists,
// running it as its own process and keeping its output verbatim.
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { ROOT } from "../lib/workerd.mjs";

export default {
  name: "media",
  title: "Media probe (bench/media/probe.mjs)",
  async run(ctx) {
    const script = join(ROOT, "bench/media/probe.mjs");
    if (!existsSync(script)) return { summary: [{ metric: "bench/media/probe.mjs not present", value: "skipped", unit: "", goal: "", pass: null }], details: {}, plots: [] };
    ctx.progress(0.1, "media probe bench");
    const args = [script, ...(ctx.quick ? ["--quick"] : [])];
    const { code, stdout, stderr } = await new Promise((resolve) => {
      const p = spawn(process.execPath, args, { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] });
      let so = "";
      let se = "";
      p.stdout.on("data", (d) => (so += d));
      p.stderr.on("data", (d) => (se += d));
      const timer = setTimeout(() => p.kill("SIGKILL"), 240_000);
      p.on("exit", (c) => {
        clearTimeout(timer);
        resolve({ code: c, stdout: so, stderr: se });
      });
    });
    if (code !== 0) throw new Error(`media/probe.mjs exited ${code}: ${stderr.slice(-600)}`);
    const lines = stdout.split("\n").filter((l) => l.trim());
    // A JSON line, if the script prints one, is kept structured.
    let json = null;
    for (const l of lines) {
      try {
        const v = JSON.parse(l);
        if (v && typeof v === "object") json = v;
      } catch {}
    }
    const summary = [];
    const ratio = json?.ratio?.serviceVsPlainFfprobe;
    const lat = json?.latencyMedianMs;
    if (typeof ratio === "number" && lat) {
      summary.push({ metric: "probe 10 s 720p H.264: decode service / plain ffprobe (median latency)", value: `${lat.service?.toFixed(0)} / ${lat.plainFfprobe?.toFixed(0)} ms = ${ratio.toFixed(2)}×`, unit: "", goal: "≤ 1.2×", pass: ratio <= 1.2 });
      const tp = json.throughputPerSec;
      if (tp) summary.push({ metric: "probe throughput: service / plain ffprobe", value: `${tp.service?.toFixed(1)} / ${tp.plainFfprobe?.toFixed(1)}`, unit: "/s", goal: "", pass: null });
    } else if (json?.nativeFfprobe === false && typeof lat?.serviceWasm === "number") {
      // No native ffprobe on this machine: the goal's baseline cannot run, so it is not judged.
      summary.push({ metric: "probe 10 s 720p H.264: decode service, wasm decoder (no native ffprobe on PATH: the baseline needs Debian's ffmpeg)", value: `${lat.serviceWasm.toFixed(0)} ms`, unit: "", goal: "≤ 1.2× ffprobe", pass: null });
    } else summary.push({ metric: "probe bench output lines (see latest.json details.stdout)", value: String(lines.length), unit: "", goal: "", pass: null });
    return {
      summary,
      details: { stdout: lines, json },
      plots: [],
    };
  },
};
