/**
 * Per-worker relay keys inside workerd (the real edge Worker and Durable Objects): issued through
 * the admin API, bound to one worker id and one https URL; a key for worker A cannot register
 * worker B, announce another URL or a non-https one; a revoked key is refused and its sockets are
 * closed; the registry never returns key material.
 */
import { SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { mintRelayToken } from "../../src/relay-wire/relay-auth.ts";
import "../../functions/wasm-shim.ts";
import { issueRelayKey, nextMessage } from "./ws-helpers.ts";

const MODEL = "Qwen/Qwen3-VL-8B-Instruct";
const ADMIN = "test-admin-token-0123456789";
const fetchEdge = (u: string, i?: RequestInit) => SELF.fetch(u, i);

function connectRelay(workerId: string, token: string): Promise<Response> {
  return SELF.fetch(`https://edge/v1/relay?worker=${encodeURIComponent(workerId)}&model=${encodeURIComponent(MODEL)}`, {
    headers: { upgrade: "websocket", authorization: `Bearer ${token}` },
  });
}

async function admin(path: string, init: RequestInit = {}): Promise<Response> {
  return SELF.fetch(`https://edge${path}`, { ...init, headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json", ...(init.headers ?? {}) } });
}

async function errorOf(r: Response): Promise<{ message: string; code: string | null; param: string | null }> {
  return ((await r.json()) as { error: { message: string; code: string | null; param: string | null } }).error;
}

function hello(workerId: string, url: string) {
  return JSON.stringify({ type: "hello", workerId, url, blockSize: 16, epoch: 1, modelName: MODEL });
}

describe("relay keys", () => {
  it("issue refuses non-https, ftp:, file: and credentialed worker URLs (no development flag here)", async () => {
    for (const url of ["http://gpu-a.example:30000", "ftp://gpu-a.example/", "file:///etc/passwd", "https://u:p@gpu-a.example", "https://gpu-a.example/?q=1", "nope"]) {
      const r = await admin("/admin/relay-keys", { method: "POST", body: JSON.stringify({ model: MODEL, workerId: "k-a", url }) });
      expect(r.status, url).toBe(400);
      expect((await errorOf(r)).param, url).toBe("url");
    }
    const bad = await admin("/admin/relay-keys", { method: "POST", body: JSON.stringify({ model: MODEL, workerId: "no spaces", url: "https://gpu-a.example" }) });
    expect(bad.status).toBe(400);
    const pool = await admin("/admin/relay-keys", { method: "POST", body: JSON.stringify({ model: "nope", workerId: "k-a", url: "https://gpu-a.example" }) });
    expect(pool.status).toBe(404);
  });

  it("a key for worker A registers A at its URL only: not B, not another URL", async () => {
    const keyA = await issueRelayKey(fetchEdge, "k-a", { url: "https://gpu-a.example:30000/" });
    // As worker B: refused before the upgrade.
    const asB = await connectRelay("k-b", await mintRelayToken(keyA, "k-b", MODEL, { url: "https://gpu-a.example:30000/" }));
    expect(asB.status).toBe(401);
    // The key is derived for A: a signature for B does not verify.
    expect((await errorOf(asB)).message).toMatch(/bad_signature/);

    // As A but announcing another URL (or a plain-http one): the index refuses the hello.
    for (const url of ["https://evil.example:30000", "http://gpu-a.example:30000"]) {
      const res = await connectRelay("k-a", await mintRelayToken(keyA, "k-a", MODEL, { url: "https://gpu-a.example:30000/" }));
      expect(res.status).toBe(101);
      const ws = res.webSocket!;
      ws.accept();
      const err = nextMessage(ws, "error");
      ws.send(hello("k-a", url));
      expect((await err).message).toMatch(/not the URL this relay key is bound to/);
      ws.close();
    }
    const none = (await (await admin(`/admin/workers?model=${encodeURIComponent(MODEL)}`)).json()) as { workers: { workerId: string }[] };
    expect(none.workers.map((w) => w.workerId)).not.toContain("k-a");

    // At its own URL (any spelling that normalises to it): registered.
    const res = await connectRelay("k-a", await mintRelayToken(keyA, "k-a", MODEL, { url: "https://gpu-a.example:30000/" }));
    const ws = res.webSocket!;
    ws.accept();
    const welcome = nextMessage(ws, "welcome");
    ws.send(hello("k-a", "https://GPU-A.example:30000/"));
    expect(await welcome).toMatchObject({ workerId: "k-a" });
    const workers = (await (await admin(`/admin/workers?model=${encodeURIComponent(MODEL)}`)).json()) as { workers: { workerId: string; url: string }[] };
    // Registered under the bound URL's spelling (the key was issued for ".../", hello said without).
    expect(workers.workers.find((w) => w.workerId === "k-a")?.url).toBe("https://gpu-a.example:30000");
    ws.close();
  });

  it("revoke: the key is refused from then on and its open sockets are closed; list shows no key material", async () => {
    const cred = await issueRelayKey(fetchEdge, "k-r", { url: "https://gpu-r.example" });
    const keyId = cred.split(".")[1]!;
    const res = await connectRelay("k-r", await mintRelayToken(cred, "k-r", MODEL, { url: "https://gpu-r.example" }));
    const ws = res.webSocket!;
    ws.accept();
    const welcome = nextMessage(ws, "welcome");
    ws.send(hello("k-r", "https://gpu-r.example"));
    await welcome;
    const closed = new Promise<number>((r) => ws.addEventListener("close", (e) => r(e.code)));

    const list = (await (await admin(`/admin/relay-keys?model=${encodeURIComponent(MODEL)}`)).json()) as { keys: Record<string, unknown>[] };
    const row = list.keys.find((k) => k.keyId === keyId)!;
    expect(row).toMatchObject({ workerId: "k-r", url: "https://gpu-r.example", revokedAt: null });
    expect(JSON.stringify(list)).not.toContain(cred.split(".")[2]!);

    const rev = await admin(`/admin/relay-keys/${keyId}/revoke?model=${encodeURIComponent(MODEL)}`, { method: "POST" });
    expect(rev.status).toBe(200);
    expect(await rev.json()).toMatchObject({ key: { keyId, workerId: "k-r" }, closedSockets: 1 });
    expect(await closed).toBe(4005);
    // Its worker gets no traffic until a relay with a valid key says hello again.
    const after = (await (await admin(`/admin/workers?model=${encodeURIComponent(MODEL)}`)).json()) as { workers: { workerId: string; status: string }[] };
    expect(after.workers.find((w) => w.workerId === "k-r")?.status).toBe("down");

    const again = await connectRelay("k-r", await mintRelayToken(cred, "k-r", MODEL, { url: "https://gpu-r.example" }));
    expect(again.status).toBe(401);
    expect((await errorOf(again)).message).toMatch(/revoked/);
    expect((await admin(`/admin/relay-keys/BAAAAAAAAAAAAAAAAAAAAA/revoke?model=${encodeURIComponent(MODEL)}`, { method: "POST" })).status).toBe(404);
  });
});
