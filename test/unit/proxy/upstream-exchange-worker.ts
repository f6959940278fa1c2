/**
 * A Worker for upstream-exchange-workerd.test.ts: fetches `url` under an upstream exchange with the
 * query's limits and reads its answer as proxyOnce reads a complete one (exchange.text); answers
 * the text, or the KvedgeError's code and message.
 */
import { KvedgeError } from "../../../src/api/errors.ts";
import { openExchange } from "../../../src/proxy/upstream-guard.ts";

export default {
  async fetch(request: Request): Promise<Response> {
    const q = new URL(request.url).searchParams;
    const ms = (name: string) => Number(q.get(name) ?? 60_000);
    const client = new AbortController();
    if (q.has("clientGoneAfter")) setTimeout(() => client.abort(), ms("clientGoneAfter"));
    const exchange = openExchange({ headersMs: 60_000, idleMs: ms("idle"), deadlineAt: Date.now() + ms("deadline"), clientSignal: client.signal });
    try {
      const res = await fetch(q.get("url")!, { signal: exchange.signal });
      return Response.json({ text: await exchange.text(res, Number(q.get("max") ?? 1 << 20)) });
    } catch (e) {
      return Response.json({ code: e instanceof KvedgeError ? e.code : `not a KvedgeError: ${String(e)}`, message: e instanceof Error ? e.message : String(e) });
    }
  },
};
