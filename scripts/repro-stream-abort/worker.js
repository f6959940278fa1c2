// Minimal Worker for scripts/repro-stream-abort.ts: nothing of kvedge, eight ways to stream a body.
//   /js                   a JS ReadableStream fed by a timer (a chunk every 2 ms)
//   /js-upstream          a JS ReadableStream passing an upstream fetch body through (read → enqueue)
//   /js-upstream-nosignal the same, the upstream fetch without request.signal
//   /js-upstream-catch    the same, an upstream read error closes the stream instead of erroring it
//   /js-upstream-hwm1     the same with highWaterMark 1 (one chunk read ahead)
//   /js-upstream-timer    the same, each chunk enqueued one timer turn after its read
//   /js-upstream-push     a JS ReadableStream that reads the upstream on its own and enqueues (push)
//   /native               the upstream fetch body returned as it is (a runtime stream)
const enc = new TextEncoder();
export default {
  async fetch(request) {
    const url = new URL(request.url);
    const headers = { "content-type": "text/event-stream" };
    if (url.pathname === "/healthz") return new Response("ok");
    if (url.pathname === "/js") {
      let timer;
      const body = new ReadableStream({
        start(c) {
          timer = setInterval(() => c.enqueue(enc.encode("data: x\n\n")), 2);
        },
        cancel() {
          clearInterval(timer);
        },
      });
      return new Response(body, { headers });
    }
    const upstream = await fetch(url.searchParams.get("upstream"), url.pathname === "/js-upstream-nosignal" ? {} : { signal: request.signal });
    if (url.pathname === "/native") return new Response(upstream.body, { headers });
    if (url.pathname === "/js-upstream-push") {
      const rd = upstream.body.getReader();
      const body = new ReadableStream({
        start(c) {
          (async () => {
            for (;;) {
              const r = await rd.read();
              if (r.done) return c.close();
              c.enqueue(r.value);
            }
          })().catch(() => undefined);
        },
        cancel(reason) {
          return rd.cancel(reason);
        },
      });
      return new Response(body, { headers });
    }
    const reader = upstream.body.getReader();
    const body = new ReadableStream(
      {
        async pull(c) {
          let r;
          try {
            r = await reader.read();
          } catch (err) {
            if (url.pathname !== "/js-upstream-catch") throw err;
            c.close();
            return;
          }
          if (url.pathname === "/js-upstream-timer") await new Promise((res) => setTimeout(res, 0));
          if (r.done) c.close();
          else c.enqueue(r.value);
        },
        cancel(reason) {
          return reader.cancel(reason);
        },
      },
      { highWaterMark: url.pathname === "/js-upstream-hwm1" ? 1 : 0 },
    );
    return new Response(body, { headers });
  },
};
