/**
 * Client of SGLang's KV-event replay ROUTER (sgl-project/sglang python/sglang/srt/disaggregation/
 * kv_events.py @9d147fd L348-369): send
 * `[b"", start_seq (8 B BE)]`, receive `[b"", seq, payload]` per buffered batch with seq ≥ start,
 * then the end marker `[b"", -1, b""]`. A fresh DEALER per request, so a timed-out request can never
 * leak late replies into the next one.
 */
import * as zmq from "zeromq";
import { decodeSeq, encodeSeq, REPLAY_END_SEQ } from "../../src/engine-events/event-decode.ts";

export interface ReplayedBatch {
  seq: number;
  payload: Uint8Array;
}

/** Cap on batches taken from one replay (SGLang buffers 10 000 steps by default). */
export const MAX_REPLAY_BATCHES = 1_000_000;

export async function requestReplay(endpoint: string, startSeq: number, timeoutMs: number): Promise<ReplayedBatch[]> {
  const sock = new zmq.Dealer({ linger: 0, receiveTimeout: timeoutMs, sendTimeout: timeoutMs });
  try {
    sock.connect(endpoint);
    await sock.send([new Uint8Array(0), encodeSeq(startSeq)]);
    const out: ReplayedBatch[] = [];
    for (;;) {
      const frames = await sock.receive();
      // DEALER keeps the empty delimiter; tolerate a peer that omits it.
      const body = frames.length > 0 && frames[0]!.byteLength === 0 ? frames.slice(1) : frames;
      const seqFrame = body[0];
      const seq = seqFrame ? decodeSeq(seqFrame) : null;
      if (seq === null) throw new Error(`replay: malformed reply of ${frames.length} frames`);
      if (seq === REPLAY_END_SEQ) return out;
      if (body.length < 2) throw new Error(`replay: batch ${seq} without payload`);
      out.push({ seq, payload: body[1]! });
      if (out.length > MAX_REPLAY_BATCHES) throw new Error("replay: too many batches");
    }
  } finally {
    sock.close();
  }
}
