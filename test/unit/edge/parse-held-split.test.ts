/**
 * A warm turn read through a held prefix (validate.ts readBody: the held text's pieces, then the
 * decoded rest, as a SplitText) is scanned, looked up, parsed, prepared and held again without the
 * joined text being read: with the SplitText's `joined` replaced by a string of the same length
 * that says nothing, every turn still gives the whole path's request and prompt. And for bodies
 * that share the held bytes and go on with anything (new messages of every kind, members after the
 * array, invalid JSON, schema and limit errors in the new part, malformed UTF-8 and a U+FEFF right
 * after the prefix), the held path's verdict is the whole body's: the same request or the same
 * error. A body that differs inside the held bytes is never given their text, so an error that
 * lies only in the prefix never meets the held path.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { httpStatusOf, KvedgeError } from "../../../src/api/errors.ts";
import { readBody, type ReadBody } from "../../../src/api/validate.ts";
import { DEFAULT_LIMITS } from "../../../src/api/limits.ts";
import { parseEdgeConfig } from "../../../src/config/config.ts";
import { checkedHeldRead, parseChatBody, parseChatTurn } from "../../../src/edge/chat/parse.ts";
import { preparePrompt } from "../../../src/prompt/index.ts";
import { TurnChainCache } from "../../../src/prompt/turn-chain.ts";
import { initHashing } from "../../../src/util/hash.ts";
import type { SplitText } from "../../../src/util/split-text.ts";
import { framedBody, HELD_TEXT_WORDS, seededText } from "../../helpers/held-body-input.ts";

beforeAll(() => initHashing());

// Limits a new part can pass: a message's characters and the message count (a conversation of 6 turns stays within them).
const config = parseEdgeConfig({ KVEDGE_ACCESS: "public", KVEDGE_TURN_CHECK_RATE: "0", KVEDGE_LIMITS: JSON.stringify({ ...DEFAULT_LIMITS, maxMessageChars: 5000, maxMessages: 16 }) });
const model = config.models[0]!;
const profile = { family: model.family, templateId: model.templateId };
const encode = (s: string) => new TextEncoder().encode(s);

/** Seeded text with two-, three- and four-byte characters, U+FEFF, JSON escapes and JSON-shaped words. */
const WORDS = [...HELD_TEXT_WORDS, "}]", '{"role":"user"}'];
const text = (seed: number, chars: number) => seededText(seed, chars, WORDS);

const source = framedBody;

type Outcome = { req: string } | { status: number; message: string; code: string | null };

function outcome(f: () => unknown): Outcome {
  try {
    return { req: JSON.stringify(f()) };
  } catch (e) {
    if (!(e instanceof KvedgeError)) throw e;
    return { status: httpStatusOf(e), message: e.message, code: e.code };
  }
}

/** The whole path: the body decoded whole and parsed whole, no chain. */
async function wholeOutcome(bytes: Uint8Array): Promise<Outcome> {
  let read: ReadBody;
  try {
    read = await readBody(source(bytes), config.limits, null);
  } catch (e) {
    return outcome(() => {
      throw e;
    });
  }
  return outcome(() => parseChatBody(read.text, config.limits, { sizeChecked: true }));
}

/** One turn as the edge serves it: read through the chain's held bodies, parsed, prepared (the chain stores and holds). */
async function serveTurn(chain: TurnChainCache, bytes: Uint8Array, poison = false): Promise<{ read: ReadBody; body: SplitText; req: ReturnType<typeof parseChatBody>; promptText: string }> {
  const read = await readBody(source(bytes), config.limits, (b) => chain.heldBodyText(b, "p"));
  const body = checkedHeldRead(read, chain, "p");
  // Nothing may read the joined text: one of the same length that says nothing stands in for it.
  if (poison && body.split) Object.defineProperty(body, "joined", { value: "\u0000".repeat(body.length) });
  const parsed = parseChatTurn(body, config, "p", { sizeChecked: true, literals: [], bytes: read.bytes }, chain);
  const prompt = chain.prepare(parsed.req, body.joined, profile, "p", { found: parsed.turn, validated: true });
  return { read, body, req: parsed.req, promptText: prompt.text };
}

function conversation(turns: number): Record<string, unknown>[] {
  const messages: Record<string, unknown>[] = [{ role: "system", content: text(1, 1500) }];
  for (let i = 0; i < turns; i++) messages.push({ role: "user", content: text(10 + i, 300) }, { role: "assistant", content: text(50 + i, 1200) });
  return messages;
}

const bodyBytes = (messages: readonly unknown[], extra = "") => encode(`{"model":${JSON.stringify(model.id)},"messages":${JSON.stringify(messages)}${extra}}`);

describe("a held read in its parts", () => {
  it("is scanned, parsed, prepared and held again without its joined text being read", async () => {
    const chain = new TurnChainCache({ checkRate: 0 });
    const messages = conversation(1);
    let split = 0;
    for (let turn = 0; turn < 6; turn++) {
      messages.push({ role: "user", content: text(100 + turn, 200 + 40 * turn) });
      const bytes = bodyBytes(messages, turn % 2 === 0 ? ',"max_tokens":16' : "");
      const layouts = chain.stats().heldLayouts;
      const served = await serveTurn(chain, bytes, true);
      const whole = new TextDecoder().decode(bytes);
      expect(JSON.stringify(served.req)).toBe(JSON.stringify(parseChatBody(whole, config.limits)));
      expect(served.promptText).toBe(preparePrompt(served.req, profile).text);
      if (served.body.split) {
        split++;
        expect(chain.stats().heldLayouts).toBe(layouts + 1);
      }
      messages.push({ role: "assistant", content: text(200 + turn, 900) });
    }
    // From the third turn on each read takes the previous turn's held bytes.
    expect(split).toBeGreaterThanOrEqual(4);
    expect(chain.stats().heldBodies).toBe(split);
  });

  it("gives the whole body's request or error for any continuation of the held bytes", async () => {
    const history = conversation(2);
    const next = { role: "user", content: text(7, 400) };
    let x = 2024;
    const rand = (n: number) => ((x = (Math.imul(x, 1103515245) + 12345) >>> 0) >>> 8) % n;
    const roles = ["user", "assistant", "system", "tool", "developer", "bogus"];
    const contents = (): unknown => {
      switch (rand(6)) {
        case 0:
          return text(rand(1000), 1 + rand(600));
        case 1:
          return [{ type: "text", text: text(rand(1000), 1 + rand(200)) }];
        case 2:
          return "";
        case 3:
          return null;
        case 4:
          return [{ type: "image_url", image_url: { url: "data:image/png;base64,iVBORw0KGgo=" } }];
        default:
          return 42;
      }
    };
    /** The text after the held prefix: `,` then new messages, the array's end and members; sometimes broken. */
    const tails: string[] = [];
    for (let i = 0; i < 60; i++) {
      const added = Array.from({ length: 1 + rand(12) }, () => ({ role: roles[rand(roles.length)], content: contents() }));
      const extra = [',"max_tokens":16', ',"temperature":0.5', ',"max_tokens":-1', ',"n":2', ',"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"number","default":0.0}}}}}]', ""][rand(6)]!;
      const good = `,${JSON.stringify([next, ...added]).slice(1, -1)}]${extra}}`;
      const cut = rand(good.length);
      const broken = [good, good, good, good.slice(0, cut), good.slice(0, cut) + "x" + good.slice(cut), good.replace(",", ",,"), ` ${good}`, good.replace("]", " ]"), `,{}]}`][rand(9)]!;
      tails.push(broken);
    }
    tails.push(",".repeat(3) + "]}", "]}", `,${JSON.stringify({ role: "user", content: "x".repeat(config.limits.maxMessageChars + 1) })}]}`, `,${JSON.stringify(Array.from({ length: 3 }, () => next)).slice(1, -1)}]}`);
    const rawTails: Uint8Array[] = [Uint8Array.of(0xef, 0xbb, 0xbf, 0x2c, 0x7b, 0x7d, 0x5d, 0x7d), Uint8Array.of(0x2c, 0xf0, 0x9f, 0x98), Uint8Array.of(0x80, 0x2c), Uint8Array.of(0xed, 0xa0, 0x80)];
    const cases = [...tails.map(encode), ...rawTails];
    const verdicts = new Set<string>();
    for (const tail of cases) {
      // A fresh chain each time: the history's two turns, then the third turn's body holds the held bytes.
      const chain = new TurnChainCache({ checkRate: 0 });
      await serveTurn(chain, bodyBytes([...history.slice(0, 3), { role: "user", content: text(3, 300) }]));
      await serveTurn(chain, bodyBytes([...history, next]));
      const full = bodyBytes([...history, next]);
      const probe = chain.heldBodyText(full, "p");
      expect(probe).not.toBeNull();
      const bytes = new Uint8Array(probe!.length + tail.length);
      bytes.set(full.subarray(0, probe!.length));
      bytes.set(tail, probe!.length);
      const expected = await wholeOutcome(bytes);
      const got = await heldOutcome(chain, bytes);
      expect(got.heldBytes).toBe(probe!.length);
      expect(got.outcome).toEqual(expected);
      verdicts.add("req" in got.outcome ? "accepted" : `${got.outcome.status} ${got.outcome.message.slice(0, 24)}`);
    }
    // Accepted bodies and several kinds of refusal (JSON, schema, limits, UTF-8) were compared.
    expect(verdicts.size).toBeGreaterThanOrEqual(6);
  });

  it("never gives the held text to a body that differs inside the held bytes", async () => {
    const chain = new TurnChainCache({ checkRate: 0 });
    const history = conversation(2);
    await serveTurn(chain, bodyBytes([...history.slice(0, 3), { role: "user", content: text(3, 300) }]));
    await serveTurn(chain, bodyBytes([...history, { role: "user", content: text(7, 400) }]));
    const full = bodyBytes([...history, { role: "user", content: text(8, 100) }]);
    const length = chain.heldBodyText(full, "p")!.length;
    for (let at = 0; at < length; at += 97) {
      const changed = full.slice();
      changed[at] = changed[at] === 0x20 ? 0x21 : 0x20;
      expect(chain.heldBodyText(changed, "p")).toBeNull();
    }
  });
});

/** The held path's verdict on `bytes`: read through the chain, parsed through it. */
async function heldOutcome(chain: TurnChainCache, bytes: Uint8Array): Promise<{ outcome: Outcome; heldBytes: number }> {
  let read: ReadBody;
  try {
    read = await readBody(source(bytes), config.limits, (b) => chain.heldBodyText(b, "p"));
  } catch (e) {
    const refused = outcome(() => {
      throw e;
    });
    return { outcome: refused, heldBytes: chain.heldBodyText(bytes, "p")?.length ?? 0 };
  }
  const body = read.body;
  return { outcome: outcome(() => parseChatTurn(body, config, "p", { sizeChecked: true, literals: [], bytes: read.bytes }, chain).req), heldBytes: read.heldBytes };
}
