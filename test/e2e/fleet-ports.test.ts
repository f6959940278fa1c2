/**
 * A port the fleet hands a service can be taken before the service binds it (another process's
 * outgoing connection drew it from the same ephemeral range). Here a test's port picker hands the
 * edge, the decode service, an encoder, one worker's HTTP port and another's KV event port (a
 * ZeroMQ bind, which says "Address already in use", not EADDRINUSE) a port this test holds: each
 * fails to bind, starts again on a fresh port, and the fleet comes up wired to the new URLs.
 * The edge's inspector binds a port of its own choosing (a taken one hangs Miniflare's start), so
 * nothing picks it. A restart on a service's own ports (fault injection) keeps them.
 */
import { createServer, type Server } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort } from "../../scripts/fleet-ports.ts";
import { startFleet, type Fleet } from "../../scripts/local-fleet.ts";
import { makeMediaDir } from "./helpers/media.ts";

const logs = process.env.KVEDGE_E2E_LOGS ? (l: string) => console.log(l) : undefined;
let fleet: Fleet;
let held: Server;
let heldPort: number;
/** The services first handed the held port; each is removed once it has been. */
const clashFirst = new Set(["edge", "decode", "w1-e1", "w1", "w2 kv"]);
const picks: string[] = [];

const portOf = (url: string | null | undefined): number => Number(new URL(url!).port);

beforeAll(async () => {
  // Holds the port and answers nothing (a health check on it fails, as on a foreign connection's port).
  held = createServer((socket) => socket.destroy());
  await new Promise<void>((r) => held.listen(0, "127.0.0.1", r));
  heldPort = (held.address() as { port: number }).port;
  fleet = await startFleet({
    workers: 2,
    encoders: 1,
    mediaDir: makeMediaDir(),
    inspector: true,
    log: logs,
    portPicker: async (service) => {
      picks.push(service);
      return clashFirst.delete(service) ? heldPort : freePort();
    },
  });
});
afterAll(async () => {
  await fleet?.stop();
  await new Promise<void>((r) => held?.close(() => r()));
});

describe("a port taken before its service binds it", () => {
  it("each service handed the taken port starts again on a fresh one", () => {
    expect([...clashFirst]).toEqual([]);
    expect(new Set(picks)).toEqual(new Set(["edge", "decode", "w1-e1", "w1", "w1 kv", "w1 replay", "w2-e1", "w2", "w2 kv", "w2 replay"]));
    for (const service of ["edge", "decode", "w1-e1", "w1", "w2 kv"]) expect(picks.filter((s) => s === service), service).toHaveLength(2);
    // w2's HTTP port was picked again with its KV port: a start on fresh ports picks all its ports afresh.
    expect(picks.filter((s) => s === "w2")).toHaveLength(2);
    expect(picks.filter((s) => s === "w2-e1")).toHaveLength(1);
    const ports = [portOf(fleet.edgeUrl), portOf(fleet.decodeUrl), portOf(fleet.encoderUrls["w1"]![0]), fleet.workers[0]!.port, fleet.workers[1]!.kvPort];
    for (const port of ports) expect(port).not.toBe(heldPort);
  });

  it("the fleet is wired to the new URLs: the edge knows the workers where they listen and routes to them", async () => {
    const r = await fetch(`${fleet.edgeUrl}/admin/workers`, { headers: { authorization: `Bearer ${fleet.adminToken}` } });
    const rows = ((await r.json()) as { workers: { workerId: string; url: string; synced: boolean }[] }).workers;
    expect(rows.map(({ workerId, url, synced }) => ({ workerId, url, synced })).sort((a, b) => a.workerId.localeCompare(b.workerId))).toEqual(
      fleet.workers.map((w) => ({ workerId: w.id, url: w.url, synced: true })),
    );
    const chat = await fetch(`${fleet.edgeUrl}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: fleet.model, messages: [{ role: "user", content: "Which port are you on?" }], max_tokens: 4 }),
    });
    expect(chat.status, await chat.clone().text()).toBe(200);
    expect(["w1", "w2"]).toContain(chat.headers.get("x-kvedge-worker"));
  });

  it("the edge's inspector answers on the port it reported", async () => {
    const targets = (await (await fetch(`http://127.0.0.1:${fleet.inspectorPort}/json`)).json()) as { webSocketDebuggerUrl: string }[];
    expect(targets.length).toBeGreaterThan(0);
    expect(targets[0]!.webSocketDebuggerUrl).toMatch(/^ws:/);
  });

  it("a restart on a worker's own ports keeps them and picks none", async () => {
    const before = { ...fleet.workers[0]! };
    const pickCount = picks.length;
    await fleet.restartWorker(0);
    expect([fleet.workers[0]!.port, fleet.workers[0]!.kvPort, fleet.workers[0]!.replayPort]).toEqual([before.port, before.kvPort, before.replayPort]);
    expect(fleet.workers[0]!.proc.pid).not.toBe(before.proc.pid);
    expect(picks.length).toBe(pickCount);
  });
});
