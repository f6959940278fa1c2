// fetch for the bench's replayed requests, robust to a keep-alive race. Node's fetch (undici) keeps
// an idle connection 4 s when the server sends no Keep-Alive hint; workerd sends none and closes an
// idle connection after 5 s (kj HttpServerSettings::pipelineTimeout, measured 5.0 s), so the client
// timer has 1 s of margin. undici (6.29, Node 22.23) looks for a pending close one event-loop turn
// before reusing an idle connection, so a close already received is skipped; one that arrives as the
// request is written (the bench's loop stalled past the 4 s timer, a loaded box) still makes fetch
// reject with SocketError "other side closed" (or ECONNRESET / EPIPE) before any response byte.
// The Node servers (simulated worker, media origin) send `Keep-Alive: timeout=5` and close after
// 6 s; undici keeps 5 − 2 = 3 s there, so the race needs a 3 s stall. Such a request never reached the server's handler (the server closes only while
// waiting for the next request), and a bench request is a replay (the same body may be sent again
// with the same effect on the fleet: another cache lookup, another simulated answer), so it is sent
// once more, with its timing taken from the attempt that answered. A failure after the response
// began, or a second failure, is a real error and is thrown.

const RACE_CODES = new Set(["UND_ERR_SOCKET", "ECONNRESET", "EPIPE"]);
/**
 * The longest a bench request (its answer's body included) may take when the caller sets no signal
 * of its own: the slowest case answers in well under a second, so a server that stopped answering
 * (a workerd seen spinning in V8's sweeper) fails the suite at once instead of at its 300 s timeout.
 */
export const REPLAY_TIMEOUT_MS = 60_000;
let retries = 0;

/** True when fetch failed because the connection was found closed before any response byte. */
export function closedBeforeResponse(error) {
  return error instanceof TypeError && RACE_CODES.has(error.cause?.code);
}

/**
 * fetch(url, init) with one retry of a request whose connection was found closed before the
 * response began. init.body must be replayable (a string or bytes, not a stream).
 * Returns { response, start }: start is performance.now() when the answering attempt was sent.
 * Without a signal of its own, the request and its body's read end after `timeoutMs`.
 */
export async function replayFetch(url, init, timeoutMs = REPLAY_TIMEOUT_MS) {
  if (init.body != null && typeof init.body !== "string" && !ArrayBuffer.isView(init.body)) throw new TypeError("replayFetch: the body must be a string or bytes");
  init = init.signal ? init : { ...init, signal: AbortSignal.timeout(timeoutMs) };
  let start = performance.now();
  try {
    return { response: await fetch(url, init), start };
  } catch (e) {
    if (e instanceof DOMException && e.name === "TimeoutError") throw new Error(`bench: ${init.method ?? "GET"} ${url} got no answer in ${timeoutMs} ms: the server stopped answering`, { cause: e });
    if (!closedBeforeResponse(e)) throw e;
    retries++;
    process.stderr.write(`bench: ${init.method ?? "GET"} ${url} sent again: connection closed before any response byte (${e.cause.code}: ${e.cause.message})\n`);
    start = performance.now();
    return { response: await fetch(url, init), start };
  }
}

/** How many requests this process has sent again (reported so a rising count stays visible). */
export function replayRetries() {
  return retries;
}
