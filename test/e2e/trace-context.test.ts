/**
 * One request followed through every hop by its W3C trace id: a client sends a chat request with a
 * video URL and its `traceparent`; the edge names the same trace in `traceresponse` (its own span
 * as the parent id), the media store logs its store call with that trace and the edge's span, the
 * worker receives `traceparent` with both on /generate, and the routing receipt holds the trace id.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../scripts/local-fleet.ts";
import { makeMediaDir, makeVideo, text, userWith, video } from "./helpers/media.ts";
import { LogTap } from "./reliability-helpers.ts";

const CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c";
const CLIENT_SPAN = "b7ad6b7169203331";

const tap = new LogTap();
let fleet: Fleet;

beforeAll(async () => {
  const dir = makeMediaDir();
  makeVideo(dir, "clip.mp4", { seconds: 1 });
  // --verbose: the media store logs each call (and its trace).
  fleet = await startFleet({ workers: 1, mediaDir: dir, decodeArgs: ["--verbose"], log: tap.sink });
});
afterAll(async () => {
  await fleet?.stop();
});

describe("W3C trace context, edge → worker and edge → media store", () => {
  it("the client's trace id reaches the worker, the store and the receipt, under the edge's span", async () => {
    const res = await fetch(`${fleet.edgeUrl}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", traceparent: `00-${CLIENT_TRACE}-${CLIENT_SPAN}-01` },
      body: JSON.stringify({ model: fleet.model, max_tokens: 4, ...userWith([text("Follow this request."), video(`${fleet.mediaUrl}/clip.mp4`)]) }),
    });
    expect(res.status, await res.clone().text()).toBe(200);
    const answered = /^00-([0-9a-f]{32})-([0-9a-f]{16})-01$/.exec(res.headers.get("traceresponse") ?? "");
    expect(answered?.[1]).toBe(CLIENT_TRACE);
    const edgeSpan = answered![2]!;
    expect(edgeSpan).not.toBe(CLIENT_SPAN);

    // The worker: /generate came with the client's trace and the edge's span.
    const rid = res.headers.get("x-request-id")!;
    const w = fleet.workers[0]!;
    const sent = (await (await fetch(`${w.url}/debug/requests`)).json()) as { requests: { rid: string | null; traceparent: string | null; videos: number }[] };
    expect(sent.requests.find((r) => r.rid === rid)).toMatchObject({ videos: 1, traceparent: `00-${CLIENT_TRACE}-${edgeSpan}-01` });

    // The media store: its store call logged the same trace and parent.
    expect(tap.lines.some((l) => l.line === `[decode] decode: /v1/store trace=${CLIENT_TRACE} parent=${edgeSpan}`), tap.lines.filter((l) => l.line.startsWith("[decode]")).map((l) => l.line).join("\n")).toBe(true);

    // The routing receipt (settled after the answer) holds the trace id.
    let receipts: { traceId: string | null; workerId: string }[] = [];
    for (const deadline = Date.now() + 15_000; Date.now() < deadline && !receipts.some((r) => r.traceId === CLIENT_TRACE); ) {
      receipts = ((await fleet.admin(`/admin/stats?model=${encodeURIComponent(fleet.model)}`)) as { stats: { recentReceipts: typeof receipts } }).stats.recentReceipts;
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(receipts.find((r) => r.traceId === CLIENT_TRACE)).toMatchObject({ workerId: w.id });
  });
});
