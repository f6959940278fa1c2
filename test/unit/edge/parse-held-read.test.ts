/**
 * The parse stage's check of a read that took a held prefix's text (checkedHeldRead): a sampled
 * read (the chain's checkRate, drawn with its `random`) is decoded whole; a difference is counted
 * and logged (`exactness_mismatch`, kind `body_prefix`), uses the whole decoding and drops the held body, so later reads decode
 * those bytes again instead of taking the same text, and every entry extending the held body's chain.
 */
import { afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { readBody, type ReadBody } from "../../../src/api/validate.ts";
import { parseEdgeConfig } from "../../../src/config/config.ts";
import { edgeCacheReport } from "../../../src/edge/cache-budgets.ts";
import { checkedHeldRead } from "../../../src/edge/chat/parse.ts";
import { TurnChainCache } from "../../../src/prompt/turn-chain.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { SplitText } from "../../../src/util/split-text.ts";
import { serveTwoTurns } from "../../helpers/held-conversation.ts";

beforeAll(() => initHashing());
afterEach(() => vi.restoreAllMocks());

const config = parseEdgeConfig({ KVEDGE_ACCESS: "public", KVEDGE_TURN_CHECK_RATE: "0" });
const model = config.models[0]!;
const encode = (s: string) => new TextEncoder().encode(s);
const decodeWhole = (bytes: Uint8Array) => new TextDecoder("utf-8", { fatal: true, ignoreBOM: false }).decode(bytes);
const prose = (seed: number, chars: number) => `${seed} ${"naïve café — 日本語 ".repeat(Math.ceil(chars / 18))}`.slice(0, chars);

/** A chain holding the first two turns' body, and the third turn's read that took its text. */
async function heldRead(chain: TurnChainCache): Promise<{ read: ReadBody; bytes: Uint8Array }> {
  const messages = [
    { role: "system", content: prose(1, 2000) },
    { role: "user", content: prose(2, 300) },
    { role: "assistant", content: prose(3, 2000) },
    { role: "user", content: prose(4, 300) },
    { role: "assistant", content: prose(5, 2000) },
    { role: "user", content: prose(6, 300) },
  ];
  serveTwoTurns(chain, config, messages, "p");
  const bytes = encode(JSON.stringify({ model: model.id, messages }));
  const source = { body: new ReadableStream<Uint8Array>(), headers: new Headers({ "content-length": String(bytes.length) }), arrayBuffer: async () => bytes.slice().buffer };
  const read = await readBody(source, config.limits, (b) => chain.heldBodyText(b, "p"));
  expect(read.heldBytes).toBeGreaterThan(0);
  return { read, bytes };
}

describe("checkedHeldRead", () => {
  it("a sampled read whose joined text differs from the whole decode uses the whole decode and drops the held body", async () => {
    const draws: number[] = [];
    const chain = new TurnChainCache({ checkRate: 0.5, random: () => draws.shift() ?? 0 });
    const { read, bytes } = await heldRead(chain);
    const whole = decodeWhole(bytes);
    expect(read.text).toBe(whole);
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    // A joined text that went wrong inside the held prefix (its first non-ASCII character).
    const at = read.text.indexOf("ï");
    const wrongText = `${read.text.slice(0, at)}i${read.text.slice(at + 1)}`;
    const wrong: ReadBody = { ...read, text: wrongText, body: SplitText.of(wrongText) };
    // Not sampled (the chain's draw at or over its rate): the read's text as given, nothing dropped.
    draws.push(0.7);
    expect(checkedHeldRead(wrong, chain, "p").joined).toBe(wrong.text);
    expect(chain.heldBodyText(bytes, "p")).not.toBeNull();
    // Sampled and equal: kept.
    draws.push(0.1);
    expect(checkedHeldRead(read, chain, "p").joined).toBe(whole);
    expect(warn).not.toHaveBeenCalled();
    expect(chain.heldBodyText(bytes, "p")).not.toBeNull();
    // Sampled and different: logged, the whole decode used, the held body gone.
    draws.push(0.1);
    const profile = { family: model.family, templateId: model.templateId };
    // The entry the second turn stored extends the held body's entry: a hit for this body.
    expect(chain.find(whole, profile, "p")?.hit).toBeTruthy();
    const counted = edgeCacheReport().exactness.body_prefix;
    expect(checkedHeldRead(wrong, chain, "p").joined).toBe(whole);
    expect(warn).toHaveBeenCalledTimes(1);
    expect(JSON.parse(String(warn.mock.calls[0]![0]))).toMatchObject({ event: "exactness_mismatch", kind: "body_prefix" });
    expect(edgeCacheReport().exactness.body_prefix).toEqual({ checks: counted.checks + 1, mismatches: counted.mismatches + 1 });
    expect(chain.heldBodyText(bytes, "p")).toBeNull();
    // Every kept entry extending the held body's chain went with it.
    expect(chain.find(whole, profile, "p")?.hit ?? null).toBeNull();
  });

  it("drops only the caller's partition's held body", async () => {
    const chain = new TurnChainCache({ checkRate: 1 });
    const { read, bytes } = await heldRead(chain);
    vi.spyOn(console, "warn").mockImplementation(() => {});
    const wrongText = read.text.replace("ï", "i");
    const wrong: ReadBody = { ...read, text: wrongText, body: SplitText.of(wrongText) };
    expect(checkedHeldRead(wrong, chain, "other").joined).toBe(decodeWhole(bytes));
    expect(chain.heldBodyText(bytes, "p")).not.toBeNull();
  });
});
