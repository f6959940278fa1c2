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
