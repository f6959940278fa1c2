/**
 * Fuzzing the real edge (the local fleet of `npm start`: the edge under Miniflare + simulated SGLang workers
 * with relays + a media server) with mutated chat requests (test/e2e/helpers/fuzz.ts: every
 * field, types, sizes, encodings, nesting, tools, media parts). Done when:
 * - 0 responses with a 5xx status and 0 dropped connections (or hung requests);
 * - every 4xx is in the OpenAI error shape ({ error: { message, type, param, code } });
 * - every 2xx is a complete answer (a JSON completion, or an SSE stream ending in [DONE]);
 * - the edge still serves normal requests afterwards.
 * It also samples the workerd processes' resident memory during the run (the edge's peak).
 * Size: KVEDGE_FUZZ_REQUESTS (default 2,500; `npm run test:fuzz` = 10,000), KVEDGE_FUZZ_SEED (default 1).
 * Media parts the edge cannot verify are refused with a 400 (workers only ever receive
 * verified bytes), so an unusable "video" never reaches a worker and no 5xx is exempt.
 */
import { readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../scripts/local-fleet.ts";
import { makeMediaDir } from "./helpers/media.ts";
import { PNG_1x1, fuzzCase } from "./helpers/fuzz.ts";

/** 2,500 in the suite (~40 s); `npm run test:fuzz` runs the full 10,000. */
const N = Number(process.env.KVEDGE_FUZZ_REQUESTS ?? 2_500);
const SEED = Number(process.env.KVEDGE_FUZZ_SEED ?? 1);
const CONCURRENCY = Number(process.env.KVEDGE_FUZZ_CONCURRENCY ?? 12);
/** First case index (replaying a range: KVEDGE_FUZZ_FROM=3700 KVEDGE_FUZZ_REQUESTS=100). */
const FROM = Number(process.env.KVEDGE_FUZZ_FROM ?? 0);

let fleet: Fleet;

beforeAll(async () => {
  const dir = makeMediaDir();
  writeFileSync(join(dir, "img.png"), Buffer.from(PNG_1x1, "base64"));
  fleet = await startFleet({ workers: 2, mediaDir: dir, decode: false, timingPreset: "instant", ...(process.env.KVEDGE_E2E_LOGS ? { log: (l: string) => console.log(l) } : {}) });
});
afterAll(async () => {
  await fleet?.stop();
});

/** Resident memory (kB) of every workerd process below this test process. */
function workerdRssKb(): number {
  const parent = new Map<number, number>();
  const names = new Map<number, string>();
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, "utf8");
      const close = stat.lastIndexOf(")");
      names.set(Number(d), stat.slice(stat.indexOf("(") + 1, close));
      parent.set(Number(d), Number(stat.slice(close + 2).split(" ")[1]));
    } catch {
      // gone
    }
  }
  let kb = 0;
  for (const [pid, name] of names) {
    if (!name.includes("workerd")) continue;
    let p = pid;
    while (p > 1 && p !== process.pid) p = parent.get(p) ?? 1;
    if (p !== process.pid) continue;
    try {
      const m = /VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
      if (m) kb += Number(m[1]);
    } catch {
      // gone
    }
  }
  return kb;
}

interface Tally {
  sent: number;
  byStatus: Record<string, number>;
  fiveXx: { status: number; label: string; body: string }[];
  dropped: { label: string; error: string }[];
  badShape: { status: number; label: string; body: string }[];
  incomplete: { label: string; body: string }[];
  streamErrors: number;
}

async function one(i: number, t: Tally): Promise<void> {
  const c = fuzzCase(SEED, i, fleet.model, fleet.mediaUrl);
  let res: Response;
  try {
    res = await fetch(`${fleet.edgeUrl}/v1/chat/completions`, {
      method: c.method,
      headers: c.headers,
      ...(c.body !== null ? { body: c.body } : {}),
      signal: AbortSignal.timeout(60_000),
    });
  } catch (e) {
    t.dropped.push({ label: `#${i} ${c.label}`, error: String(e) });
    return;
  }
  t.sent++;
  t.byStatus[res.status] = (t.byStatus[res.status] ?? 0) + 1;
  let text: string;
  try {
    text = await res.text();
  } catch (e) {
    t.dropped.push({ label: `#${i} ${c.label} (body)`, error: String(e) });
    return;
  }
  if (res.status >= 500) {
    t.fiveXx.push({ status: res.status, label: `#${i} ${c.label}`, body: text.slice(0, 300) });
    return;
  }
  if (res.status >= 400) {
    try {
      const j = JSON.parse(text) as { error?: Record<string, unknown> };
      const e = j.error;
      const ok = e && Object.keys(e).sort().join() === "code,message,param,type" && typeof e.message === "string" && typeof e.type === "string";
      if (!ok || !res.headers.get("content-type")?.includes("application/json")) throw new Error("shape");
    } catch {
      t.badShape.push({ status: res.status, label: `#${i} ${c.label}`, body: text.slice(0, 300) });
    }
    return;
  }
  if (res.headers.get("content-type")?.includes("text/event-stream")) {
    if (!text.endsWith("data: [DONE]\n\n")) t.incomplete.push({ label: `#${i} ${c.label}`, body: text.slice(-300) });
    if (/^data: \{"error"/m.test(text)) t.streamErrors++;
  } else {
    try {
      const j = JSON.parse(text) as { choices?: unknown[] };
      if (!Array.isArray(j.choices)) throw new Error("no choices");
    } catch {
      t.incomplete.push({ label: `#${i} ${c.label}`, body: text.slice(0, 300) });
    }
  }
}

describe(`fuzz: ${N} mutated requests against the real edge`, () => {
  it("no 5xx, no dropped connections, every 4xx in the OpenAI shape; normal requests still served", { timeout: 900_000 }, async () => {
    const t: Tally = { sent: 0, byStatus: {}, fiveXx: [], dropped: [], badShape: [], incomplete: [], streamErrors: 0 };
    const rssStart = workerdRssKb();
    let rssPeak = rssStart;
    const sampler = setInterval(() => (rssPeak = Math.max(rssPeak, workerdRssKb())), 250);
    const t0 = Date.now();
    let next = FROM;
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (next < FROM + N) await one(next++, t);
      }),
    );
    const seconds = (Date.now() - t0) / 1000;
    clearInterval(sampler);
    const rssEnd = workerdRssKb();
    const summary = {
      requests: N,
      seed: SEED,
      seconds: Math.round(seconds * 10) / 10,
      perSecond: Math.round(N / seconds),
      byStatus: t.byStatus,
      fiveXx: t.fiveXx.length,
      dropped: t.dropped.length,
      badShape: t.badShape.length,
      incomplete: t.incomplete.length,
      streamErrorEvents: t.streamErrors,
      workerdRssMb: { start: Math.round(rssStart / 1024), peak: Math.round(rssPeak / 1024), end: Math.round(rssEnd / 1024) },
    };
    console.log(`fuzz: ${JSON.stringify(summary)}`);
    for (const list of [t.fiveXx, t.dropped, t.badShape, t.incomplete]) for (const x of list.slice(0, 5)) console.log(JSON.stringify(x));

    // Normal requests afterwards.
    for (let k = 0; k < 10; k++) {
      const r = await fetch(`${fleet.edgeUrl}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: fleet.model, messages: [{ role: "user", content: `After the fuzz, request ${k}.` }], max_tokens: 4, stream: k % 2 === 0 }),
      });
      expect(r.status).toBe(200);
      expect(await r.text()).toMatch(k % 2 === 0 ? /data: \[DONE\]\n\n$/ : /"choices"/);
    }
    expect(t.fiveXx).toEqual([]);
    expect(t.dropped).toEqual([]);
    expect(t.badShape).toEqual([]);
    expect(t.incomplete).toEqual([]);
    expect(t.sent).toBe(N);
  });
});
