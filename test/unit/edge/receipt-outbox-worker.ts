/**
 * A Worker for receipt-outbox-workerd.test.ts: request A settles its pick through the real receipt
 * queue (settle.ts, receipt-outbox.ts) and ends; request B, concurrent in the same isolate, routes
 * through the real route.ts, so its call carries A's settlement to a Durable Object that answers
 * after `ROUTE_DELAY_MS` (as a route waiting in the admission queue would). A's waitUntil records
 * when the promise it holds settles, in A's context. `/turn/<id>` and `/next/<id>` are one client's
 * turns one after another (pool "turns", its own queue): a turn settles and ends; the next routes.
 */
import { DurableObject } from "cloudflare:workers";
import type { ChatFrontDoor, RouteDecision, RouteRequest } from "../../../src/routing-index/front-door.ts";
import type { CarryingReceipts, ReceiptEntry } from "../../../src/routing-index/receipt-entries.ts";
import { ReceiptOutbox } from "../../../src/edge/chat/receipt-outbox.ts";
import { routeTarget } from "../../../src/edge/chat/route.ts";
import { openReceipt } from "../../../src/edge/chat/settle.ts";

const MODEL = "m";
/** Longer than RECEIPT_FLUSH_MS: A's timer fires while B's call carrying A's receipt is in flight. */
const ROUTE_DELAY_MS = 60;

interface Env {
  INDEX: DurableObjectNamespace<Index>;
}

export class Index extends DurableObject {
  readonly #seen: string[] = [];

  async route(req: CarryingReceipts<RouteRequest>): Promise<RouteDecision | null> {
    for (const e of req.receipts ?? []) this.#seen.push(`carried:${e.kind}:${e.receiptId}`);
    await new Promise((r) => setTimeout(r, ROUTE_DELAY_MS));
    return { workerId: "w", receiptId: `r-${req.traceId}`, overlapBlocks: 0, totalBlocks: 0 } as RouteDecision;
  }

  async receipts(entries: readonly ReceiptEntry[]): Promise<void> {
    for (const e of entries) this.#seen.push(`alone:${e.kind}:${e.receiptId}`);
  }

  async seen(): Promise<string[]> {
    return this.#seen;
  }
}

const outbox = new ReceiptOutbox();
/** One client's turns: the test sends the next turn after the answer, within this wait however slow the host. */
const TURNS_FLUSH_MS = 2_000;
const turnsOutbox = new ReceiptOutbox({ flushMs: TURNS_FLUSH_MS });
/** Requests whose waitUntil saw its receipt's promise settle (run in that request's context). */
const continued: string[] = [];
/** The two requests meet through flags each polls on its own timers: a promise shared between them would itself cross requests. */
const flags = { aQueued: false, bArrived: false };
async function until(flag: keyof typeof flags): Promise<void> {
  while (!flags[flag]) await new Promise((r) => setTimeout(r, 1));
}

function target(env: Env, ctx: ExecutionContext, traceId: string, onSettled?: () => void, model = MODEL, receiptOutbox = outbox) {
  const door = env.INDEX.getByName(model) as unknown as ChatFrontDoor;
  const waitUntil = (p: Promise<unknown>) => ctx.waitUntil(onSettled ? p.then(onSettled) : p);
  const t = routeTarget({ index: () => door, shards: 1, model, localHashes: [], isl: 1, fallbackReason: null, edgeColo: null, traceId, incrementalOnly: false, receiptOutbox, waitUntil });
  return { t, deps: { index: () => door, waitUntil, receiptOutbox } };
}

/** A turn of pool "turns": its pick settles and the request ends, its receipt left in the queue. */
function turn(env: Env, ctx: ExecutionContext, id: string): Response {
  const { t, deps } = target(env, ctx, id, () => void continued.push(id), "turns", turnsOutbox);
  const decision = { workerId: "w", receiptId: id, overlapBlocks: 0, totalBlocks: 0 } as RouteDecision;
  void openReceipt(deps, t, decision, 0, false).settle({ promptTokens: 1, cachedTokens: 0, outcome: "ok" });
  return new Response(id);
}

export default {
  async fetch(request: Request, env: Env, ctx: ExecutionContext): Promise<Response> {
    const path = new URL(request.url).pathname;
    if (path === "/a") {
      await until("bArrived");
      const { t, deps } = target(env, ctx, "a", () => void continued.push("a"));
      const decision = { workerId: "w", receiptId: "A", overlapBlocks: 0, totalBlocks: 0 } as RouteDecision;
      void openReceipt(deps, t, decision, 0, false).settle({ promptTokens: 1, cachedTokens: 0, outcome: "ok" });
      flags.aQueued = true;
      return new Response("a");
    }
    if (path === "/b") {
      // A's fetch runs in its own request context; B picks and takes what A queued.
      flags.bArrived = true;
      await until("aQueued");
      const { t } = target(env, ctx, "b");
      const d = await t.pick([], false);
      return new Response(d?.receiptId ?? "none");
    }
    const [, step, id] = path.split("/");
    if (step === "turn") return turn(env, ctx, id!);
    if (step === "next") {
      // The client's next turn: its pick carries what the last one queued.
      const d = await target(env, ctx, id!, undefined, "turns", turnsOutbox).t.pick([], false);
      return new Response(d?.receiptId ?? "none");
    }
    const model = step === "seen-turns" ? "turns" : MODEL;
    return Response.json({ index: await (env.INDEX.getByName(model) as unknown as Index).seen(), continued });
  },
};
