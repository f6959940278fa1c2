/** The next message of `type` on a relay-side WebSocket; rejects after 10 s so a test never hangs. */
export function nextMessage(ws: WebSocket, type: string): Promise<{ type: string; [k: string]: unknown }> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`no ${type} within 10 s`)), 10_000);
    const on = (ev: MessageEvent) => {
      const m = JSON.parse(String(ev.data)) as { type: string };
      if (m.type !== type) return;
      clearTimeout(t);
      ws.removeEventListener("message", on);
      resolve(m);
    };
    ws.addEventListener("message", on);
  });
}
