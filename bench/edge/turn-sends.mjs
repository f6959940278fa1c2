// One measured request of the edge suite: the same body sent straight to the worker, through the
// edge, and through the proxy floor (bench/edge/proxy-floor.mjs, served in the edge's workerd
// process), after one unmeasured send to the worker (so the worker's caches are equally warm for
// all three). The three go in each of the six orders in turn, so none holds a position. The edge
// process's CPU of each edge-process send is read apart: from right before it to the moment the
// edge and index processes are both quiet after it, so its waitUntil tail (the edge's receipts call,
// which waits RECEIPT_FLUSH_MS for a carrier and, the next edge send being two sends away, goes
// alone on its timer; the floor's second RPC; the index's answer to each) is its own and never
// lands in the next send's.
import { RECEIPT_FLUSH_MS } from "../../src/edge/chat/receipt-outbox.ts";
import { waitForQuiet } from "../lib/process-cpu.mjs";

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

/** A send's receipts wait this long on their timer before the quiet check starts (a timer may fire a little late). */
const RECEIPT_TIMER_MS = RECEIPT_FLUSH_MS + 3;

/**
 * The edge process's CPU of `send()`: from right before it until the edge and index processes
 * (`pids`) are quiet after it. Returns { response, process, mainThread, index } (ms; `cpu()` as below).
 */
export async function edgeSendCpu(send, cpu, pids) {
  const a = cpu();
  const response = await send();
  await new Promise((r) => setTimeout(r, RECEIPT_TIMER_MS));
  await waitForQuiet(pids, AFTER_SEND);
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
    spent[target] = await edgeSendCpu(() => send(target), cpu, pids);
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
