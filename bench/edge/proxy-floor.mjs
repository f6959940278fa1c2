// Bench-only Worker: the CPU floor of a routed chat request in workerd. It does the I/O any Worker
// that routes a request to a worker cannot avoid, and none of kvedge's work: one RPC to the index
// process over the same external Cap'n Proto binding the edge uses (the route call's place;
// IndexGateway.floorPing, bench/lib/workerd-serve.mjs, answers without reaching a routing-index
// object), the client's body forwarded unread to the worker's own OpenAI endpoint, the worker's
// answer returned as is (a native pass-through: no JS per chunk), and a second RPC under waitUntil
// (the place of the edge's receipts call, which sends the request's settlement). No parsing, rendering, tokenizing, hashing, translation or media work.
// `?rpc=0`: the fetch alone. `?rl=1` (served beside the rate-limited edge): first one take from a
// RateLimiter object in the index process, as the edge's rate limit makes before reading the body.
// Served beside the edge in the edge's workerd process (its own socket), so /proc counts its CPU in
// the same process as the edge's. Not deployed.
let limit = null;
export default {
  async fetch(request, env, ctx) {
    const rpc = !request.url.endsWith("?rpc=0");
    if (request.url.endsWith("?rl=1")) {
      limit ??= { id: env.RATE_LIMITER.idFromName("floor:net:unknown").toString(), cfg: JSON.parse(env.KVEDGE_RATE_LIMIT) };
      await env.LIMITER_RPC.call(limit.id, "take", [limit.cfg]);
    }
    if (rpc) await env.INDEX_RPC.floorPing(1);
    const upstream = await fetch(`${env.UPSTREAM}/v1/chat/completions`, {
      method: "POST",
      body: request.body,
      headers: { "content-type": request.headers.get("content-type") ?? "application/json" },
    });
    if (rpc) ctx.waitUntil(env.INDEX_RPC.floorPing(2));
    return new Response(upstream.body, upstream);
  },
};
