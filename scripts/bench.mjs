#!/usr/bin/env node
// `npm run bench [-- --quick] [-- --only edge,index]`: runs the benchmark suites (bench/suites/*),
// each in its own process, shows a progress bar on stderr, prints the summary table on stdout and
// writes bench/results/latest.json (+ a timestamped copy) and SVG plots. See docs/benchmarks.md.
import { fork } from "node:child_process";
import { cpus, loadavg, totalmem } from "node:os";
import { mkdirSync, readFileSync, writeFileSync, existsSync } from "node:fs";
import { dirname, join, relative, resolve as resolvePath } from "node:path";
import { fileURLToPath } from "node:url";
import { Progress } from "../bench/lib/progress.mjs";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");
export const SUITES = ["edge", "tokenizer", "index", "hashing", "routing", "fleet-shapes", "hicache", "scale", "scale-out", "layout", "media", "media-store", "admission"];

function parseArgs(argv) {
  const opts = { quick: false, tiny: false, only: null, out: join(ROOT, "bench/results"), help: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--quick") opts.quick = true;
    else if (a === "--tiny") opts.tiny = true; // smoke-test size (test/unit/bench/harness.test.ts)
    else if (a === "--only") opts.only = argv[++i].split(",").map((s) => s.trim()).filter(Boolean);
    else if (a.startsWith("--only=")) opts.only = a.slice(7).split(",").filter(Boolean);
    else if (a === "--out") opts.out = argv[++i];
    else if (a === "--help" || a === "-h") opts.help = true;
    else throw new Error(`unknown argument ${a}`);
  }
  return opts;
}

function runSuite(name, mode, onProgress) {
  return new Promise((resolve) => {
    const child = fork(join(ROOT, "bench/run-suite.mjs"), [name, mode], {
      cwd: ROOT,
      execArgv: ["--expose-gc", "--max-old-space-size=8192"],
      stdio: ["ignore", "ignore", "pipe", "ipc"],
    });
    let stderr = "";
    child.stderr.on("data", (d) => (stderr = (stderr + d).slice(-4000)));
    let outcome = null;
    child.on("message", (m) => {
      if (m.type === "progress") onProgress(m.fraction, m.label);
      else outcome = m;
    });
    child.on("exit", (code) => {
      if (outcome?.type === "result") resolve({ ok: true, ...outcome.result });
      else resolve({ ok: false, error: outcome?.error ?? `suite exited with ${code}: ${stderr}` });
    });
  });
}

function machine() {
  let cpu = cpus()[0]?.model ?? "unknown";
  try {
    const m = /model name\s*:\s*(.+)/.exec(readFileSync("/proc/cpuinfo", "utf8"));
    if (m) cpu = m[1].trim();
  } catch {}
  return { nproc: cpus().length, cpu, memGiB: +(totalmem() / 2 ** 30).toFixed(1), node: process.version, platform: `${process.platform}-${process.arch}`, loadavg1m: +loadavg()[0].toFixed(2) };
}

function table(rows) {
  const cols = ["suite", "metric", "value", "unit", "goal", "ok"];
  const data = rows.map((r) => [r.suite, r.metric, String(r.value), r.unit ?? "", r.goal ?? "", r.pass === true ? "yes" : r.pass === false ? "NO" : ""]);
  const widths = cols.map((c, i) => Math.max(c.length, ...data.map((d) => d[i].length)));
  const line = (cells) => "| " + cells.map((c, i) => c.padEnd(widths[i])).join(" | ") + " |";
  return [line(cols), "|" + widths.map((w) => "-".repeat(w + 2)).join("|") + "|", ...data.map(line)].join("\n");
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  if (opts.help) {
    console.log("usage: npm run bench [-- --quick] [-- --only edge,tokenizer,index,hashing,routing,fleet-shapes,hicache,scale,scale-out,layout,media,media-store,admission]");
    return;
  }
  // The media probe bench (ffmpeg, ~20 s) runs in full runs, or with --quick only when named in --only.
  // The 1 024-worker scale-out simulation takes ~10 minutes in full mode: it runs only when named
  // (`--only scale-out`, add `--quick` for a ~1 minute version).
  const available = SUITES.filter(
    (s) => (s !== "media" || (existsSync(join(ROOT, "bench/media/probe.mjs")) && !opts.quick && !opts.tiny)) && s !== "scale-out",
  );
  const selected = opts.only ?? available;
  for (const s of selected) if (!SUITES.includes(s)) throw new Error(`unknown suite ${s} (have: ${SUITES.join(", ")})`);
  // A routing run narrowed by env (bench/suites/routing.mjs, narrowed) would replace the committed
  // routing figures in bench/results: it must go elsewhere.
  const narrowing = ["TRACES", "SEEDS", "CAPACITIES", "POLICIES", "LEARN_PREFILL_RATE"].map((v) => `KVEDGE_ROUTING_${v}`).filter((v) => process.env[v]);
  // Inside bench/results at any depth counts (a subfolder, a path spelt otherwise).
  const fromResults = relative(resolvePath(ROOT, "bench/results"), resolvePath(opts.out));
  const intoResults = fromResults !== ".." && !fromResults.startsWith("../");
  if (selected.includes("routing") && narrowing.length > 0 && intoResults) {
    throw new Error(`a routing run narrowed by ${narrowing.join(", ")} needs --out outside bench/results`);
  }
  const mode = opts.tiny ? "tiny" : opts.quick ? "quick" : "full";
  const loadBefore = +loadavg()[0].toFixed(2);
  const progress = new Progress(selected.length);
  const suites = {};
  for (const name of selected) {
    progress.set(name, 0);
    suites[name] = await runSuite(name, mode, (f, label) => progress.set(label ?? name, f));
    progress.step(name);
  }
  progress.finish();

  const rowsOf = (all) => {
    const out = [];
    for (const [name, r] of Object.entries(all)) {
      if (!r.ok) out.push({ suite: name, metric: "FAILED", value: String(r.error).split("\n")[0].slice(0, 120), pass: false });
      else for (const s of r.summary) out.push({ suite: name, ...s });
    }
    return out;
  };
  const rows = [];
  for (const [name, r] of Object.entries(suites)) {
    if (!r.ok) rows.push({ suite: name, metric: "FAILED", value: String(r.error).split("\n")[0].slice(0, 120), pass: false });
    else for (const s of r.summary) rows.push({ suite: name, ...s });
  }
  const at = new Date().toISOString();
  // Other work on the machine distorts tails: the 1-minute load average is kept with the figures,
  // per suite too (a partial run, --only, updates its suites in latest.json and keeps the others).
  const loadAfter = +loadavg()[0].toFixed(2);
  for (const r of Object.values(suites)) Object.assign(r, { at, mode, loadavg1m: [loadBefore, loadAfter] });
  const latestPath = join(opts.out, "latest.json");
  const previous = opts.only && existsSync(latestPath) ? JSON.parse(readFileSync(latestPath, "utf8")) : null;
  const result = { at, mode, machine: { ...machine(), loadavg1mBefore: loadBefore }, suites: { ...(previous?.suites ?? {}), ...suites } };
  if (previous) for (const [name, r] of Object.entries(previous.suites)) if (!suites[name]) r.at ??= previous.at;
  mkdirSync(join(opts.out, "runs"), { recursive: true });
  mkdirSync(join(opts.out, "plots"), { recursive: true });
  const text = JSON.stringify(result, null, 2) + "\n";
  writeFileSync(join(opts.out, "latest.json"), text);
  writeFileSync(join(opts.out, "runs", `${at.replace(/[:.]/g, "-")}.json`), text);
  for (const r of Object.values(suites)) for (const p of r.plots ?? []) writeFileSync(join(opts.out, "plots", p.file), p.svg);
  const runs = Object.entries(result.suites).map(([n, r]) => `${n} ${r.at ?? at}${r.loadavg1m ? ` (load ${r.loadavg1m.join(" → ")})` : ""}`).join("; ");
  writeFileSync(join(opts.out, "latest.md"), `Run ${at} (${mode}) on ${result.machine.nproc}× ${result.machine.cpu}, Node ${result.machine.node}, load ${loadBefore} → ${result.machine.loadavg1m}\nSuites from: ${runs}\n\n${table(rowsOf(result.suites))}\n`);
  console.log(`kvedge bench — ${mode} run, ${at}, ${result.machine.nproc}× ${result.machine.cpu}, Node ${result.machine.node}, load avg ${loadBefore} → ${result.machine.loadavg1m}\n`);
  console.log(table(rows));
  console.log(`\nresults: ${join(opts.out, "latest.json")}; plots: ${join(opts.out, "plots")}`);
  if (Object.values(suites).some((r) => !r.ok)) process.exitCode = 1;
}

main().catch((e) => {
  console.error(e instanceof Error ? e.message : e);
  process.exitCode = 2;
});
