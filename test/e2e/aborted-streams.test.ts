/**
 * Clients that go away mid-stream, on the real local fleet (wrangler dev + simulated SGLang):
 * - the upstream request is cancelled (request.signal, `enable_request_signal`): no worker finishes
 *   the answer nobody reads;
 * - the worker's load is released in the index (activeRequests back to 0); without the flag the
 *   runtime never told the edge and 5 of 12 requests held their load for good.
 * Not quiet under `wrangler dev`, and not ours: workerd logs `Uncaught Error: Network connection lost.`
 * (no JS stack) for a share of the aborts (3–8 of 12 here). scripts/repro-stream-abort.ts reproduces
 * it with a 40-line Worker and no kvedge code (a JS ReadableStream fed by an upstream fetch: about 1
 * abort in 4; the upstream body returned as it is: never): the runtime pumps a JS-sourced body inside
 * the request, and a write to the departed client that fails before the runtime cancels the request
 * is reported through the inspector `wrangler dev` attaches (docs/reliability.md, Known gaps). So the
 * count is printed, not required to be 0; any other uncaught error fails the test.
 *
 * Clients that go away mid-upload: `wrangler dev` itself exits on one (its ProxyWorker treats the
 * lost request body as fatal: cloudflare/workers-sdk#15203, open), which left `npm start` a fleet
 * with no edge. The fleet now restarts the edge on the same port (scripts/local-fleet.ts); the
 * test checks that the endpoint answers again afterwards, whether or not this wrangler crashed.
 */
import { connect } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../scripts/local-fleet.ts";
import { LogTap, sleep, waitUntil } from "./reliability-helpers.ts";

const tap = new LogTap();
let fleet: Fleet;

beforeAll(async () => {
  fleet = await startFleet({ workers: 1, log: tap.sink });
});
afterAll(async () => {
  await fleet?.stop();
});

async function activeRequests(): Promise<number> {
  const r = (await fleet.admin(`/admin/workers?model=${encodeURIComponent(fleet.model)}`)) as { workers: { activeRequests: number }[] };
  return r.workers.reduce((a, w) => a + w.activeRequests, 0);
}

describe("aborted client streams", () => {
  it("cancel the upstream and release the load; nothing of ours uncaught", async () => {
    const N = 12;
    for (let i = 0; i < N; i++) {
      const ac = new AbortController();
      const r = await fetch(`${fleet.edgeUrl}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: fleet.model, messages: [{ role: "user", content: `Write a long story, part ${i}.` }], max_tokens: 2000, stream: true, ignore_eos: true }),
        signal: ac.signal,
      });
      expect(r.status).toBe(200);
      const reader = r.body!.getReader();
      await reader.read(); // the first chunk: the stream is live
      ac.abort();
      await reader.cancel().catch(() => undefined);
    }
    const ms = await waitUntil(async () => (await activeRequests()) === 0, 20_000, async () => `activeRequests ${await activeRequests()}`);
    console.log(`aborted streams: ${N} aborted, load back to 0 within ${ms} ms`);
    await sleep(500);
    const edgeLines = tap.lines.map((l) => l.line).filter((l) => l.startsWith("[edge]"));
    const uncaught = edgeLines.filter((l) => /Uncaught/i.test(l));
    console.log(`aborted streams: runtime logged ${uncaught.length} uncaught "Network connection lost." for ${N} aborts (workerd's, see scripts/repro-stream-abort.ts)`);
    // Anything uncaught other than the runtime's own disconnect report (exactly that line) is ours: none.
    expect(uncaught.filter((l) => !/Uncaught Error: Network connection lost\.\s*(\x1b\[0m)?\s*$/.test(l))).toEqual([]);
    // Each generation was cut short: the worker finished none of the 2000-token answers.
    const finished = tap.lines.map((l) => l.line).filter((l) => /generate rid=.* out=2000\b/.test(l));
    expect(finished).toEqual([]);
    // The pool's metrics count them as cancelled by the client, not as errors.
    const metrics = await (await fetch(`${fleet.edgeUrl}/metrics`, { headers: { authorization: `Bearer ${fleet.adminToken}` } })).text();
    const count = (outcome: string) => Number(new RegExp(`^kvedge_requests_total\\{[^}]*outcome="${outcome}"[^}]*\\} (\\d+)`, "m").exec(metrics)?.[1] ?? NaN);
    expect(count("error")).toBe(0);
    expect(count("cancelled")).toBeGreaterThanOrEqual(1);
  });
});

/** Sends a request head announcing `declared` body bytes, a few of them, then hangs up. */
function abandonUpload(edgeUrl: string, path: string, declared: number): Promise<void> {
  const { hostname, port } = new URL(edgeUrl);
  return new Promise((resolve) => {
    const sock = connect(Number(port), hostname, () => {
      sock.write(`POST ${path} HTTP/1.1\r\nHost: ${hostname}:${port}\r\nContent-Type: application/json\r\nContent-Length: ${declared}\r\n\r\n{"model":`);
      setTimeout(() => sock.destroy(), 200);
    });
    sock.on("error", () => undefined);
    sock.on("close", () => resolve());
  });
}

describe("aborted client uploads", () => {
  it("leave the endpoint serving: the fleet restarts an edge that wrangler dev took down", async () => {
    const before = fleet.edgeRestarts;
    for (let i = 0; i < 3; i++) {
      await abandonUpload(fleet.edgeUrl, "/v1/chat/completions", 100_000);
      await sleep(300);
    }
    const chat = async (): Promise<number> => {
      try {
        const r = await fetch(`${fleet.edgeUrl}/v1/chat/completions`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ model: fleet.model, messages: [{ role: "user", content: "Still there?" }], max_tokens: 8 }),
        });
        await r.arrayBuffer();
        return r.status;
      } catch {
        return 0;
      }
    };
    const ms = await waitUntil(async () => (await chat()) === 200, 90_000, () => `edge restarts ${fleet.edgeRestarts - before}`, 250);
    console.log(`aborted uploads: endpoint answering ${ms} ms after the last; edge restarts by the fleet: ${fleet.edgeRestarts - before}`);
  });
});
