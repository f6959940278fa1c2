/**
 * Every block a (simulated) worker has published and not removed, read back from its ZMQ replay
 * ROUTER from sequence 0: engine hash → the page's token ids. Decodes the SGLang wire format directly
 * (msgpack `[ts, events, dp_rank]`), not through the relay's decoder.
 */
import { decode } from "@msgpack/msgpack";
import * as zmq from "zeromq";

const asBig = (v: unknown): bigint => (typeof v === "bigint" ? v : BigInt(v as number));

export async function publishedBlocks(endpoint: string): Promise<Map<bigint, number[]>> {
  const dealer = new zmq.Dealer();
  dealer.connect(endpoint);
  const blocks = new Map<bigint, number[]>();
  try {
    await dealer.send([Buffer.alloc(0), Buffer.alloc(8)]);
    for (;;) {
      const [, seq, payload] = (await dealer.receive()) as Buffer[];
      if (seq!.readBigInt64BE(0) === -1n) return blocks;
      const [, events] = decode(payload!, { useBigInt64: true }) as [number, unknown[][], number];
      for (const e of events) {
        if (e[0] === "BlockStored") blocks.set(asBig((e[1] as unknown[])[0]), (e[3] as unknown[]).map(Number));
        else if (e[0] === "BlockRemoved") for (const h of e[1] as unknown[]) blocks.delete(asBig(h));
        else if (e[0] === "AllBlocksCleared") blocks.clear();
      }
    }
  } finally {
    dealer.close();
  }
}
