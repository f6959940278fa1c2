import { mintRelayToken } from "../../src/relay-wire/relay-auth.ts";

/** The next message on a relay-side WebSocket that `pred` accepts; rejects after 10 s (naming `what`) so a test never hangs. */
export function messageWhere(ws: WebSocket, pred: (m: { type: string }) => boolean = () => true, what = "message"): Promise<{ type: string; [k: string]: unknown }> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`no ${what} within 10 s`)), 10_000);
    const on = (ev: MessageEvent) => {
      const m = JSON.parse(String(ev.data)) as { type: string; [k: string]: unknown };
      if (!pred(m)) return;
      clearTimeout(t);
      ws.removeEventListener("message", on);
      resolve(m);
    };
    ws.addEventListener("message", on);
  });
}

/** The next message of `type` on a relay-side WebSocket; rejects after 10 s so a test never hangs. */
export function nextMessage(ws: WebSocket, type: string): Promise<{ type: string; [k: string]: unknown }> {
  return messageWhere(ws, (m) => m.type === type, type);
}

/** The worker URL the in-workerd tests bind relay keys to and say hello with (nothing listens). */
export const TEST_WORKER_URL = "https://127.0.0.1:9";

/**
 * Issues a relay credential through the admin API (the only way relays get keys), bound to
 * `workerId` and `url` in pool `model`. `fetchEdge` is the test's SELF.fetch.
 */
export async function issueRelayKey(
  fetchEdge: (url: string, init?: RequestInit) => Promise<Response>,
  workerId: string,
  opts: { model?: string; url?: string; adminToken?: string; dpSize?: number; storageGroup?: string } = {},
): Promise<string> {
  const r = await fetchEdge("https://edge/admin/relay-keys", {
    method: "POST",
    headers: { authorization: `Bearer ${opts.adminToken ?? "test-admin-token-0123456789"}`, "content-type": "application/json" },
    body: JSON.stringify({
      model: opts.model ?? "Qwen/Qwen3-VL-8B-Instruct",
      workerId,
      url: opts.url ?? TEST_WORKER_URL,
      ...(opts.dpSize !== undefined ? { dpSize: opts.dpSize } : {}),
      ...(opts.storageGroup !== undefined ? { storageGroup: opts.storageGroup } : {}),
    }),
  });
  if (r.status !== 201) throw new Error(`issuing a relay key for ${workerId}: ${r.status} ${await r.text()}`);
  return ((await r.json()) as { credential: string }).credential;
}

/**
 * A relay's session through the edge, opened as a relay opens it: a key issued for `workerId`
 * (issueRelayKey, in pool `model`, bound to `url`), a token signed with it, the upgrade; then a
 * hello (`hello`'s fields over block size 16, epoch 1) and its welcome; with `emptyDump`, an
 * empty dump of the hello's epoch and its ack. `fetchEdge` is the test's SELF.fetch.
 */
export async function openRelay(
  fetchEdge: (url: string, init?: RequestInit) => Promise<Response>,
  workerId: string,
  opts: { model?: string; url?: string; hello?: Record<string, unknown>; emptyDump?: boolean } = {},
): Promise<WebSocket> {
  const model = opts.model ?? "Qwen/Qwen3-VL-8B-Instruct";
  const url = opts.url ?? TEST_WORKER_URL;
  const token = await mintRelayToken(await issueRelayKey(fetchEdge, workerId, { model, url }), workerId, model, { url });
  const res = await fetchEdge(`https://edge/v1/relay?worker=${workerId}&model=${encodeURIComponent(model)}`, { headers: { upgrade: "websocket", authorization: `Bearer ${token}` } });
  if (res.status !== 101 || !res.webSocket) throw new Error(`relay upgrade for ${workerId}: ${res.status} ${await res.text()}`);
  const ws = res.webSocket;
  ws.accept();
  const hello = { type: "hello", workerId, url, blockSize: 16, epoch: 1, modelName: model, ...opts.hello };
  const welcome = nextMessage(ws, "welcome");
  ws.send(JSON.stringify(hello));
  await welcome;
  if (opts.emptyDump) {
    const ack = nextMessage(ws, "ack");
    ws.send(JSON.stringify({ type: "dump", epoch: hello.epoch, seq: 0, blocks: [] }));
    await ack;
  }
  return ws;
}
