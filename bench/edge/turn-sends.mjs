// One measured request of the edge suite: the same body sent straight to the worker, through the
// edge, and through the proxy floor (bench/edge/proxy-floor.mjs, served in the edge's workerd
// process), after one unmeasured send to the worker (so the worker's caches are equally warm for
// all three). The three go in each of the six orders in turn, so none holds a position. The edge
// process's CPU of each edge-process send is read apart: from right before it to the moment the
// edge and index processes are both quiet after it, so its waitUntil tail (the edge's receipts call
// RECEIPT_FLUSH_MS later, the floor's second RPC, and the index's answer to each) is its own and
// never lands in the next send's.
import { waitForQuiet } from "../lib/process-cpu.mjs";
import { RECEIPT_FLUSH_MS } from "../../src/edge/chat/receipt-outbox.ts";

const ORDERS = [
  ["edge", "floor", "direct"],
  ["floor", "direct", "edge"],
  ["direct", "edge", "floor"],
  ["edge", "direct", "floor"],
  ["floor", "edge", "direct"],
  ["direct", "floor", "edge"],
];

/** Both processes under 0.05 ms of CPU over one 2 ms window (at most 50 ms: a KV-event backlog is not this send's). */
const AFTER_SEND = { windowMs: 2, maxShare: 0.025, windows: 1, timeoutMs: 50 };

/**
 * An edge request's receipts wait up to RECEIPT_FLUSH_MS for a route to carry them, then go in a
 * call of their own: the window stays open past that, so the call is billed to its own request (as
 * with one request at a time and gaps over that time) and never to the next send's window.
 */
export const RECEIPT_TAIL_MS = RECEIPT_FLUSH_MS + 2;

/**
 * The edge process's CPU of `send()`: from right before it until the edge and index processes
 * (`pids`) are quiet after it, and for the edge not before its receipts went out (`tailMs`).
 * Returns { response, process, mainThread, index } (ms; `cpu()` as below).
 */
export async function edgeSendCpu(send, cpu, pids, tailMs = 0) {
  const a = cpu();
  const response = await send();
  const sent = performance.now();
  await waitForQuiet(pids, AFTER_SEND);
  const left = tailMs - (performance.now() - sent);
  if (left > 0) {
    await new Promise((r) => setTimeout(r, left));
    await waitForQuiet(pids, AFTER_SEND);
  }
  const b = cpu();
  return { response, process: b.edge - a.edge, mainThread: b.edgeIsolate - a.edgeIsolate, index: b.index - a.index };
}

/**
 * Request `i` of a series: `send(target)` posts the body to "edge", "floor" or "direct" and returns
 * its response; `cpu()` reads { edge, edgeIsolate, index } (ms so far); `pids`: the edge and index
 * processes (native workerd). Returns { edge, floor, direct } responses and per-send CPU: edgeCpu,
 * edgeIsolateCpu, floorCpu, floorIsolateCpu (edge process), and indexCpu: the index process's over
 * the whole request, its share of the floor's RPCs taken out.
 */
export async function measuredSends({ i, send, cpu, pids }) {
  const t0 = cpu();
  await send("direct");
  await waitForQuiet(pids, AFTER_SEND);
  const res = {};
  const spent = {};
  for (const target of ORDERS[i % ORDERS.length]) {
    if (target === "direct") {
      res.direct = await send("direct");
      continue;
    }
    spent[target] = await edgeSendCpu(() => send(target), cpu, pids, target === "edge" ? RECEIPT_TAIL_MS : 0);
    res[target] = spent[target].response;
  }
  const t1 = cpu();
  return {
    ...res,
    edgeCpu: spent.edge.process,
    edgeIsolateCpu: spent.edge.mainThread,
    floorCpu: spent.floor.process,
    floorIsolateCpu: spent.floor.mainThread,
    indexCpu: t1.index - t0.index - spent.floor.index,
  };
}
