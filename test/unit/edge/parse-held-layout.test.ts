/**
 * The parse stage's layout comes from the turn chain (TurnChainCache.scanLayout): a body that holds
 * a held message prefix character for character is not scanned there. The held text was part of an
 * accepted body (compared in full, never by hash), and everything else is parsed strictly, so every
 * malformed body is still refused, with the verdict the whole parse gives: broken inside the held
 * prefix (the compare fails: scanned and parsed whole), right after it, or in the new messages.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { httpStatusOf, KvedgeError } from "../../../src/api/errors.ts";
import { parseEdgeConfig } from "../../../src/config/config.ts";
import { parseChatBody, parseChatTurn } from "../../../src/edge/chat/parse.ts";
import { TurnChainCache } from "../../../src/prompt/turn-chain.ts";
import { initHashing } from "../../../src/util/hash.ts";

beforeAll(() => initHashing());

type Msg = Record<string, unknown>;
const config = parseEdgeConfig({ KVEDGE_ACCESS: "public", KVEDGE_TURN_CHECK_RATE: "0" });
const model = config.models[0]!;
const profile = { family: model.family, templateId: model.templateId };
const text = (seed: number, words: number) => 'quote \\" brace } \u00e9\u{1f600} ' + Array.from({ length: words }, (_, i) => `w${(seed * 7919 + i * 31) % 1000}`).join(" ");
const bodyOf = (messages: Msg[]) => JSON.stringify({ model: model.id, messages, max_tokens: 8 });

function verdict(f: () => unknown): { status: number; message: string; code: string | null } | null {
  try {
    f();
    return null;
  } catch (e) {
    if (!(e instanceof KvedgeError)) throw e;
    return { status: httpStatusOf(e), message: e.message, code: e.code };
  }
}

describe("parse with a layout from the turn chain", () => {
  const history: Msg[] = [{ role: "system", content: "You are a careful assistant." }, { role: "user", content: text(1, 80) }, { role: "assistant", content: text(2, 120) }, { role: "user", content: text(3, 40) }];
  const next = bodyOf([...history, { role: "assistant", content: text(4, 60) }, { role: "user", content: "And then?" }]);
  const chainWithHistory = () => {
    const chain = new TurnChainCache({ checkRate: 0 });
    const stored = bodyOf(history);
    const parsed = parseChatTurn(stored, config, "", {}, chain);
    chain.prepare(parsed.req, stored, profile, "", { found: parsed.turn, validated: true });
    return chain;
  };
  // Where the held prefix (the first three messages) ends in `next`.
  const heldEnd = next.indexOf(',{"role":"user"', next.indexOf('"assistant"'));

  it("a well-formed next turn takes the held spans and parses to the whole body's request", () => {
    const chain = chainWithHistory();
    const { req, turn } = parseChatTurn(next, config, "", {}, chain);
    expect(chain.stats().heldLayouts).toBe(1);
    expect(turn?.hit?.node).toBeDefined();
    expect(JSON.stringify(req)).toBe(JSON.stringify(parseChatBody(next, config.limits)));
  });

  const broken: [string, string, boolean][] = [
    // [case, body, whether the held prefix is intact (its spans are taken)]
    ["a quote removed inside the held prefix", next.replace('"assistant","content":"', '"assistant","content":'), false],
    ["a colon made a semicolon inside the held prefix", next.replace('"role":"system"', '"role";"system"'), false],
    ["a raw newline inside a held string", next.slice(0, next.indexOf("w", next.indexOf('"assistant"'))) + "\n" + next.slice(next.indexOf("w", next.indexOf('"assistant"')) + 1), false],
    ["two commas after the held prefix", next.slice(0, heldEnd) + ",," + next.slice(heldEnd + 1), true],
    ["no comma after the held prefix", next.slice(0, heldEnd) + next.slice(heldEnd + 1), true],
    ["a stray brace after the held prefix", next.slice(0, heldEnd) + "}" + next.slice(heldEnd), true],
    ["a trailing comma in the array", next.replace('"And then?"}]', '"And then?"},]'), true],
    ["an unterminated string in the new message", next.replace('"And then?"}]', '"And then?}]'), true],
    ["a bad escape in the new message", next.replace('"And then?"', '"And \\x then?"'), true],
    ["the body cut short", next.slice(0, next.length - 3), true],
  ];
  for (const [name, body, intact] of broken) {
    it(`refuses ${name} with the whole parse's verdict`, () => {
      const chain = chainWithHistory();
      const whole = verdict(() => parseChatBody(body, config.limits));
      expect(whole?.status).toBe(400);
      expect(verdict(() => parseChatTurn(body, config, "", {}, chain))).toEqual(whole);
      expect(chain.stats().heldLayouts).toBe(intact ? 1 : 0);
    });
  }
});
