/**
 * Edge isolate heap under a long multi-turn load: C clients run 4-turn conversations on
 * shared system prompts through the local edge (scripts/local-edge.ts) and the simulated fleet until
 * N requests are done; every `sampleEvery` requests the edge isolate is garbage-collected and its V8
 * heap read through the inspector the fleet opens on request (`HeapProfiler.collectGarbage`, then
 * `Runtime.getHeapUsage`: workerd has no process.memoryUsage). The routing-index Durable Objects
 * run in the same isolate, so the figure is edge + index together (the index is itself bounded by
 * its block budget). Each sample also records the RSS of the edge's processes (the Miniflare host and
 * its workerd); `--no-inspector` runs the fleet exactly as `npm start` does and samples only those.
 *
 *   node scripts/soak-heap.ts [--requests 50000] [--clients 16] [--workers 2] [--sample-every 1000]
 *        [--bound-mb 64] [--no-inspector] [--out bench/results/soak-heap]   → soak-heap.json (+ soak-heap.svg)
 *
 * test/e2e/edge-heap.test.ts runs a short version in CI.
 */
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";
import WebSocket from "ws";
import { startFleet, type Fleet } from "./local-fleet.ts";

export interface HeapSample {
  requests: number;
  seconds: number;
  /** V8 heap in use after a full GC (bytes); null without an inspector. */
  heapUsed: number | null;
  heapTotal: number | null;
  /** RSS of the edge's whole process group (the Miniflare host and its workerd), for comparison. */
  edgeRss: number;
  /** The same, per process name in that group ("node": the Miniflare host; "workerd"). */
  edgeRssByProcess: Record<string, number>;
}

/** RSS (bytes) of each process in process group `pgid`, summed by process name (Linux /proc). */
export function groupRssByName(pgid: number): Record<string, number> {
  const out: Record<string, number> = {};
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      if (Number(fields[2]) !== pgid) continue;
      const comm = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
      const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${name}/status`, "utf8"));
      if (m) out[comm] = (out[comm] ?? 0) + Number(m[1]) * 1024;
    } catch {
      // exited meanwhile
    }
  }
  return out;
}

/** RSS (bytes) of every process in process group `pgid` (Linux /proc). */
export function groupRss(pgid: number): number {
  return Object.values(groupRssByName(pgid)).reduce((a, b) => a + b, 0);
}

export interface HeapSoakResult {
  requests: number;
  errors: number;
  clients: number;
  seconds: number;
  samples: HeapSample[];
  /** Largest post-GC heap seen, and the last one (bytes); null without an inspector. */
  peakHeap: number | null;
  finalHeap: number | null;
  /** Post-GC heap growth over the second half of the run (bytes; ~0 when bounded); null without an inspector. */
  secondHalfGrowth: number | null;
  /** The edge's processes: largest RSS seen, and their RSS growth over the second half of the run (bytes). */
  peakEdgeRss: number;
  edgeRssSecondHalfGrowth: number;
  /** Requests done when the relays were told "index restarted" (the index object was rebuilt). */
  indexRestarts: number[];
}

export interface HeapSoakOptions {
  requests: number;
  clients: number;
  sampleEvery: number;
  onSample?: (s: HeapSample) => void;
  /** Counts relay-observed index restarts when the fleet's log lines are fed to it. */
  restarts?: RestartTap;
}

/** Feed it the fleet's log lines: it notes when a relay is asked to resync because the index restarted. */
export class RestartTap {
  readonly at: number[] = [];
  requests = 0;
  #last = -1;
  readonly sink = (line: string): void => {
    // One restart makes every relay resync: count it once per request count.
    if (line.includes("index restarted") && this.#last !== this.requests) {
      this.#last = this.requests;
      this.at.push(this.requests);
    }
  };
}

/** A V8 inspector session on the edge's inspector port (Fleet.inspectorPort). */
export class IsolateInspector {
  #ws: WebSocket;
  #id = 0;
  #pending = new Map<number, (m: { result?: unknown; error?: { message: string } }) => void>();

  private constructor(ws: WebSocket) {
    this.#ws = ws;
    ws.on("message", (d) => {
      const m = JSON.parse(String(d)) as { id?: number; result?: unknown; error?: { message: string } };
      if (m.id !== undefined) this.#pending.get(m.id)?.(m);
    });
  }

  static async connect(port: number): Promise<IsolateInspector> {
    const targets = (await (await fetch(`http://127.0.0.1:${port}/json`)).json()) as { webSocketDebuggerUrl: string }[];
    if (!targets[0]) throw new Error("no inspector target");
    const ws = new WebSocket(targets[0].webSocketDebuggerUrl);
    await new Promise<void>((resolve, reject) => {
      ws.once("open", () => resolve());
      ws.once("error", reject);
    });
    return new IsolateInspector(ws);
  }

  call<T>(method: string, params: Record<string, unknown> = {}, timeoutMs = 60_000): Promise<T> {
    const id = ++this.#id;
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${method}: no answer`)), timeoutMs);
      this.#pending.set(id, (m) => {
        clearTimeout(timer);
        this.#pending.delete(id);
        if (m.error) reject(new Error(`${method}: ${m.error.message}`));
        else resolve(m.result as T);
      });
      this.#ws.send(JSON.stringify({ id, method, params }));
    });
  }

  /** Post-GC heap of the isolate. */
  async heap(timeoutMs?: number): Promise<{ usedSize: number; totalSize: number }> {
    await this.call("HeapProfiler.collectGarbage", {}, timeoutMs);
    return this.call<{ usedSize: number; totalSize: number }>("Runtime.getHeapUsage", {}, timeoutMs);
  }

  close(): void {
    this.#ws.close();
  }
}

function words(seed: number, n: number): string {
  const vocab = ["router", "cache", "prefix", "token", "block", "worker", "video", "image", "edge", "index", "latency", "model", "prompt", "relay", "hash", "epoch"];
  let x = (seed * 2654435761) >>> 0;
  const out: string[] = [];
  for (let i = 0; i < n; i++) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    out.push(vocab[x % vocab.length]!);
  }
  return out.join(" ");
}

const SYSTEMS = Array.from({ length: 8 }, (_, i) => `You are assistant #${i}. ${words(90_000 + i, 500)}`);

/** An inspector session that answers (Miniflare's inspector proxy may not answer the first calls of a session: retried on a fresh one). */
async function connectInspector(fleet: Fleet, port: number): Promise<IsolateInspector> {
  for (let attempt = 0; ; attempt++) {
    const inspector = await IsolateInspector.connect(port);
    try {
      await fetch(`${fleet.edgeUrl}/healthz`);
      await inspector.heap(10_000);
      return inspector;
    } catch (e) {
      inspector.close();
      if (attempt >= 5) throw e;
    }
  }
}

/** Drives the load and samples the edge; the fleet is the caller's (heap figures only when it has an inspector). */
export async function runHeapSoak(fleet: Fleet, o: HeapSoakOptions): Promise<HeapSoakResult> {
  const inspector = fleet.inspectorPort === null ? null : await connectInspector(fleet, fleet.inspectorPort);
  const started = performance.now();
  const samples: HeapSample[] = [];
  let done = 0;
  let errors = 0;
  let nextSample = 0;
  let sampling: Promise<void> = Promise.resolve();
  const sample = async (): Promise<void> => {
    const h = inspector ? await inspector.heap() : null;
    const edge = fleet.processes().find((p) => p.name === "edge");
    const byProcess = edge ? groupRssByName(edge.pid) : {};
    const s: HeapSample = {
      requests: done,
      seconds: (performance.now() - started) / 1000,
      heapUsed: h?.usedSize ?? null,
      heapTotal: h?.totalSize ?? null,
      edgeRss: Object.values(byProcess).reduce((a, b) => a + b, 0),
      edgeRssByProcess: byProcess,
    };
    samples.push(s);
    o.onSample?.(s);
  };
  await sample();
  nextSample = o.sampleEvery;
  let issued = 0;
  const client = async (id: number): Promise<void> => {
    for (let k = 0; issued < o.requests; k++) {
      const messages = [{ role: "system", content: SYSTEMS[(id + k) % SYSTEMS.length]! }];
      for (let t = 0; t < 4 && issued < o.requests; t++) {
        issued++;
        // Distinct users and turns: the prefix cache sees ever new conversations (its worst case).
        messages.push({ role: "user", content: `Client ${id} conversation ${k} turn ${t}: ${words(id * 1_000_003 + k * 10 + t, 60)}` });
        const r = await fetch(`${fleet.edgeUrl}/v1/chat/completions`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ model: fleet.model, messages, max_tokens: 2, stream: t % 2 === 1 }),
        });
        await r.arrayBuffer();
        if (r.status !== 200) errors++;
        messages.push({ role: "assistant", content: `Noted ${t}.` });
        done++;
        if (o.restarts) o.restarts.requests = done;
        if (done >= nextSample) {
          nextSample += o.sampleEvery;
          sampling = sampling.then(sample);
        }
      }
    }
  };
  await Promise.all(Array.from({ length: o.clients }, (_, i) => client(i)));
  await sampling;
  if (samples.at(-1)!.requests !== done) await sample();
  inspector?.close();
  const half = samples.filter((s) => s.requests >= done / 2);
  const heaps = inspector ? samples.map((s) => s.heapUsed!) : null;
  const growth = (of: (s: HeapSample) => number): number => (half.length > 1 ? of(half.at(-1)!) - of(half[0]!) : 0);
  return {
    requests: done,
    errors,
    clients: o.clients,
    seconds: (performance.now() - started) / 1000,
    samples,
    peakHeap: heaps ? Math.max(...heaps) : null,
    finalHeap: heaps ? heaps.at(-1)! : null,
    secondHalfGrowth: heaps ? growth((s) => s.heapUsed!) : null,
    peakEdgeRss: Math.max(...samples.map((s) => s.edgeRss)),
    edgeRssSecondHalfGrowth: growth((s) => s.edgeRss),
    indexRestarts: o.restarts ? [...o.restarts.at] : [],
  };
}

/** Heap over requests as an SVG line chart, with the stated bound (a run with heap samples). */
export function heapSvg(r: HeapSoakResult, boundBytes: number, title: string): string {
  const peak = r.peakHeap;
  if (peak === null) throw new Error("heapSvg: the run has no heap samples (no inspector)");
  const W = 760;
  const H = 320;
  const L = 60;
  const B = 40;
  const T = 40;
  const R = 20;
  const maxX = Math.max(1, r.requests);
  const maxY = Math.max(boundBytes * 1.15, peak * 1.1);
  const x = (v: number) => L + ((W - L - R) * v) / maxX;
  const y = (v: number) => H - B - ((H - B - T) * v) / maxY;
  const mb = (v: number) => (v / 1048576).toFixed(0);
  const pts = r.samples.map((s) => `${x(s.requests).toFixed(1)},${y(s.heapUsed ?? 0).toFixed(1)}`).join(" ");
  const yTicks = Array.from({ length: 5 }, (_, i) => (maxY * i) / 4);
  const xTicks = Array.from({ length: 6 }, (_, i) => Math.round((maxX * i) / 5));
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`,
    `<rect width="${W}" height="${H}" fill="white"/>`,
    `<text x="${W / 2}" y="22" text-anchor="middle" font-size="14">${title}</text>`,
    ...yTicks.map((v) => `<line x1="${L}" x2="${W - R}" y1="${y(v)}" y2="${y(v)}" stroke="#eee"/><text x="${L - 6}" y="${y(v) + 4}" text-anchor="end">${mb(v)} MB</text>`),
    ...xTicks.map((v) => `<text x="${x(v)}" y="${H - B + 16}" text-anchor="middle">${v}</text>`),
    `<text x="${W / 2}" y="${H - 6}" text-anchor="middle">requests</text>`,
    `<line x1="${L}" x2="${W - R}" y1="${y(boundBytes)}" y2="${y(boundBytes)}" stroke="#c00" stroke-dasharray="6 4"/>`,
    `<text x="${W - R}" y="${y(boundBytes) - 6}" text-anchor="end" fill="#c00">bound ${mb(boundBytes)} MB</text>`,
    ...r.indexRestarts.map((n) => `<line x1="${x(n)}" x2="${x(n)}" y1="${T}" y2="${H - B}" stroke="#999" stroke-dasharray="2 3"/>`),
    `<polyline points="${pts}" fill="none" stroke="#1f6feb" stroke-width="2"/>`,
    r.indexRestarts.length ? `<text x="${L + 8}" y="${H - B - 8}" fill="#666">dotted: the index object restarted (relays resynced)</text>` : "",
    `<text x="${L + 8}" y="${T + 14}" fill="#1f6feb">isolate heap after GC (edge + index objects), peak ${mb(peak)} MB</text>`,
    `</svg>`,
  ].join("\n");
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      requests: { type: "string", default: "50000" },
      clients: { type: "string", default: "16" },
      workers: { type: "string", default: "2" },
      "sample-every": { type: "string", default: "1000" },
      "bound-mb": { type: "string", default: "64" },
      "no-inspector": { type: "boolean", default: false },
      out: { type: "string", default: "bench/results/soak-heap" },
    },
  });
  const bound = Number(values["bound-mb"]) * 1048576;
  const restarts = new RestartTap();
  const fleet = await startFleet({ workers: Number(values.workers), timingPreset: "instant", inspector: !values["no-inspector"], log: restarts.sink });
  const mb = (b: number) => (b / 1048576).toFixed(1);
  const rssText = (byProcess: Record<string, number>): string =>
    Object.entries(byProcess)
      .map(([name, b]) => `${name} ${mb(b)} MB`)
      .join(", ");
  try {
    const r = await runHeapSoak(fleet, {
      restarts,
      requests: Number(values.requests),
      clients: Number(values.clients),
      sampleEvery: Number(values["sample-every"]),
      onSample: (s) => process.stderr.write(`${s.requests} requests, ${s.seconds.toFixed(0)} s: ${s.heapUsed === null ? "" : `heap ${mb(s.heapUsed)} MB, `}edge RSS ${rssText(s.edgeRssByProcess)}\n`),
    });
    mkdirSync(values.out!, { recursive: true });
    writeFileSync(join(values.out!, "soak-heap.json"), JSON.stringify({ ...r, boundBytes: bound, workers: Number(values.workers) }, null, 1) + "\n");
    if (r.peakHeap !== null) writeFileSync(join(values.out!, "soak-heap.svg"), heapSvg(r, bound, `Edge isolate heap over ${r.requests} multi-turn requests (${r.clients} clients)`) + "\n");
    const heap = r.peakHeap === null ? "" : `heap peak ${mb(r.peakHeap)} MB, final ${mb(r.finalHeap!)} MB, second-half growth ${mb(r.secondHalfGrowth!)} MB, bound ${mb(bound)} MB; `;
    console.log(
      `requests ${r.requests}, errors ${r.errors}, ${r.seconds.toFixed(0)} s; ${heap}edge processes' RSS peak ${mb(r.peakEdgeRss)} MB, final ${rssText(r.samples.at(-1)!.edgeRssByProcess)}, second-half growth ${mb(r.edgeRssSecondHalfGrowth)} MB; index restarts at ${JSON.stringify(r.indexRestarts)}`,
    );
    if (r.peakHeap !== null && r.peakHeap > bound) process.exitCode = 1;
  } finally {
    await fleet.stop();
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  main().catch((e: unknown) => {
    console.error(e);
    process.exit(1);
  });
}
