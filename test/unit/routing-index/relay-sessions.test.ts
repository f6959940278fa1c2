/**
 * Which relay socket speaks for a worker (src/routing-index/relay-sessions.ts), with stand-in sockets:
 * the newest accepted hello wins, older sockets are closed and never current again, also after a
 * wake that rebuilt the bookkeeping from the sockets' attachments.
 */
import { describe, expect, it } from "vitest";
import { RelaySessions, SUPERSEDED_CLOSE, type RelayAttachment, type RelaySocket } from "../../../src/routing-index/relay-sessions.ts";

class FakeSocket implements RelaySocket {
  attachment: RelayAttachment;
  readyState: number = WebSocket.OPEN;
  closedWith: number | null = null;
  constructor(workerId: string) {
    this.attachment = { workerId };
  }
  deserializeAttachment(): unknown {
    return this.attachment;
  }
  serializeAttachment(a: unknown): void {
    this.attachment = a as RelayAttachment;
  }
  close(code: number): void {
    // The index's close: the peer may never answer (half-open), so the socket stays listed, closing.
    this.closedWith = code;
    this.readyState = WebSocket.CLOSING;
  }
}

const host = (sockets: FakeSocket[]) => new RelaySessions((id) => sockets.filter((s) => s.attachment.workerId === id));

describe("RelaySessions", () => {
  it("a revoked key leaves the worker served only by an open socket of another key", () => {
    const revoked = new FakeSocket("w");
    revoked.attachment = { workerId: "w", keyId: "old" };
    const sameKey = new FakeSocket("w");
    sameKey.attachment = { workerId: "w", keyId: "old" };
    const otherKey = new FakeSocket("w");
    otherKey.attachment = { workerId: "w", keyId: "new" };
    expect(host([revoked, sameKey]).servedByAnotherKey("w", revoked, "old")).toBe(false);
    expect(host([revoked, sameKey, otherKey]).servedByAnotherKey("w", revoked, "old")).toBe(true);
    otherKey.close(1000); // closing: it no longer serves the worker
    expect(host([revoked, otherKey]).servedByAnotherKey("w", revoked, "old")).toBe(false);
  });

  it("the newest hello is current; the older socket is closed and its frames are not the relay's", () => {
    const a = new FakeSocket("w");
    const b = new FakeSocket("w");
    const sessions = host([a, b]);
    sessions.start(a, a.attachment);
    expect(sessions.isCurrent(a.attachment)).toBe(true);
    sessions.start(b, b.attachment);
    expect(a.closedWith).toBe(SUPERSEDED_CLOSE);
    expect(sessions.isCurrent(a.attachment)).toBe(false);
    expect(sessions.isCurrent(b.attachment)).toBe(true);
    expect(sessions.hasLiveSession("w", a)).toBe(true);
    // The superseded socket's close does not mean the relay is gone; the current one's does.
    expect(sessions.closed(a.attachment)).toBe(false);
    expect(sessions.closed(b.attachment)).toBe(true);
  });

  it("after a wake (bookkeeping rebuilt from attachments) a superseded, still-listed socket does not become current", () => {
    const a = new FakeSocket("w");
    const b = new FakeSocket("w");
    const sockets = [a, b];
    const before = host(sockets);
    before.start(a, a.attachment);
    before.start(b, b.attachment);
    // b goes away; a is still listed (closing, its peer never answered); the object hibernates.
    sockets.splice(1, 1);
    const woken = host(sockets);
    expect(woken.current("w")).toBeUndefined();
    expect(woken.isCurrent(a.attachment)).toBe(false);
  });

  it("after a wake, new sessions stay above every session already handed out (even on a clock behind)", () => {
    const a = new FakeSocket("w");
    a.attachment = { workerId: "w", session: Date.now() + 3_600_000 }; // made on a host whose clock ran ahead
    const b = new FakeSocket("w");
    const woken = host([a, b]);
    woken.start(b, b.attachment);
    expect(b.attachment.session!).toBeGreaterThan(a.attachment.session!);
    expect(woken.isCurrent(b.attachment)).toBe(true);
    expect(woken.closed(a.attachment)).toBe(false);
  });

  it("a hello leaves a socket that has not said hello yet open (it may be the relay's newer connection)", () => {
    const a = new FakeSocket("w");
    const b = new FakeSocket("w");
    const sessions = host([a, b]);
    sessions.start(a, a.attachment);
    expect(b.closedWith).toBeNull();
    expect(sessions.isCurrent(b.attachment)).toBe(false); // not heard before its own hello
    sessions.start(b, b.attachment);
    expect(a.closedWith).toBe(SUPERSEDED_CLOSE);
    expect(sessions.isCurrent(b.attachment)).toBe(true);
  });

  it("sockets from before sessions existed count while no socket of the worker has one", () => {
    const legacy = new FakeSocket("w");
    const sessions = host([legacy]);
    expect(sessions.isCurrent(legacy.attachment)).toBe(true);
    expect(sessions.closed(legacy.attachment)).toBe(true);
  });
});
