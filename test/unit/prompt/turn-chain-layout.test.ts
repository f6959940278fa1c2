/**
 * The turn chain's layout scan (TurnChainCache.scanLayout): a body holding a held message prefix
 * character for character takes that prefix's element spans from the chain's entries instead of
 * scanning its text, and its layout is scanBodyLayout's exactly, whatever the texts hold (escaped
 * quotes, backslashes, brackets, non-ASCII, spacing); any other body is scanned whole.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { parseEdgeConfig } from "../../../src/config/config.ts";
import { parseChatTurn } from "../../../src/edge/chat/parse.ts";
import { scanBodyLayout, TurnChainCache, type BodyLayout } from "../../../src/prompt/turn-chain.ts";
import { initHashing } from "../../../src/util/hash.ts";

beforeAll(() => initHashing());

type Msg = Record<string, unknown>;
const config = parseEdgeConfig({ KVEDGE_ACCESS: "public", KVEDGE_TURN_CHECK_RATE: "0" });
const model = config.models[0]!;
const profile = { family: model.family, templateId: model.templateId };

/** Texts a naive scan would misread: escaped quotes and backslashes, brackets and braces, `\u` escapes (written raw below), non-ASCII. */
const TRICKY = ['say \\"}]\\" then \\\\', "\u00e9t\u00e9 \u{1f600} \u4e2d\u6587 ]}[{", 'a "quoted" {"role":"user"} text', "line\nbreak\ttab \\ end\\"];
const text = (seed: number, words: number) => `${TRICKY[seed % TRICKY.length]} ` + Array.from({ length: words }, (_, i) => `w${(seed * 7919 + i * 31) % 1000}`).join(" ");

/** A body as clients write it; `style` varies the spacing around the messages and their members. */
function bodyOf(messages: Msg[], style: "compact" | "spaced" = "compact"): string {
  if (style === "compact") return JSON.stringify({ model: model.id, messages, max_tokens: 8 });
  return `{ "model" : ${JSON.stringify(model.id)} ,\n "messages" : [ ${messages.map((m) => JSON.stringify(m, null, 1)).join(" ,\n ")} ] , "max_tokens": 8 }`;
}

/** `\u00e9`-style escapes in the body's text for every non-ASCII character (still JSON; another raw text). */
const escapeNonAscii = (body: string) => body.replace(/[^\u0000-\u007f]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);

function same(a: BodyLayout | null, b: BodyLayout | null): void {
  expect(a).not.toBeNull();
  expect({ members: [...a!.members], open: a!.messagesOpen, messages: a!.messages }).toEqual({ members: [...b!.members], open: b!.messagesOpen, messages: b!.messages });
}

/** Parse and prompt stages as the edge runs them (the prompt stage stores the turn). */
function turn(chain: TurnChainCache, body: string) {
  const parsed = parseChatTurn(body, config, "", {}, chain);
  return chain.prepare(parsed.req, body, profile, "", { found: parsed.turn, validated: true });
}

describe("turn chain layout scan", () => {
  for (const style of ["compact", "spaced"] as const) {
    for (const escaped of [false, true]) {
      it(`takes a held prefix's spans and equals the whole scan, turn after turn (${style}${escaped ? ", \\u escapes" : ""})`, () => {
        const chain = new TurnChainCache({ checkRate: 0 });
        const write = (ms: Msg[]) => (escaped ? escapeNonAscii(bodyOf(ms, style)) : bodyOf(ms, style));
        let messages: Msg[] = [{ role: "system", content: "You are a careful assistant." }, { role: "user", content: text(1, 60) }];
        turn(chain, write(messages));
        for (let t = 2; t < 8; t++) {
          messages = [...messages, { role: "assistant", content: text(t, 80) }, { role: "user", content: text(t + 11, 40) }];
          const body = write(messages);
          const before = chain.stats().heldLayouts;
          same(chain.scanLayout(body, ""), scanBodyLayout(body));
          // The first turn's entry holds the system message alone: too short to list (nothing worth skipping).
          expect(chain.stats().heldLayouts).toBe(t === 2 ? before : before + 1);
          // The first warm turn goes on from the entry before the first query; later ones from the
          // entry through the previous turn's query.
          expect(turn(chain, body).reusedMessages).toBe(messages.length - (t === 2 ? 3 : 2));
        }
      });
    }
  }

  it("a body whose held prefix matches but whose later messages differ: the same layout as the whole scan, the same hit", () => {
    const chain = new TurnChainCache({ checkRate: 0 });
    const history: Msg[] = [{ role: "system", content: "S" }, { role: "user", content: text(1, 80) }, { role: "assistant", content: text(2, 80) }, { role: "user", content: text(3, 40) }];
    turn(chain, bodyOf(history));
    for (const tail of [
      [{ role: "assistant", content: text(4, 30) }, { role: "user", content: "next" }],
      [{ role: "assistant", content: "other" }, { role: "user", content: [{ type: "text", text: "parts ]}" }] }],
      [{ role: "assistant", content: null, tool_calls: [{ id: "c", type: "function", function: { name: "f", arguments: "{}" } }] }, { role: "tool", tool_call_id: "c", content: "}]" }, { role: "user", content: "q" }],
    ] as Msg[][]) {
      const body = bodyOf([...history, ...tail]);
      const before = chain.stats().heldLayouts;
      const layout = chain.scanLayout(body, "");
      same(layout, scanBodyLayout(body));
      expect(chain.stats().heldLayouts).toBe(before + 1);
      const fromHeld = chain.find(body, profile, "", layout);
      const fromScan = chain.find(body, profile, "", scanBodyLayout(body));
      expect(fromHeld?.hit?.node).toBe(fromScan?.hit?.node);
      expect(fromHeld?.hit).not.toBeNull();
    }
  });

  it("a body that differs inside the held prefix (one character, the spacing, an escape) is scanned whole", () => {
    const chain = new TurnChainCache({ checkRate: 0 });
    const history: Msg[] = [{ role: "system", content: "S" }, { role: "user", content: text(1, 80) }, { role: "assistant", content: text(2, 80) }, { role: "user", content: text(3, 40) }];
    const stored = bodyOf(history);
    turn(chain, stored);
    const next = bodyOf([...history, { role: "assistant", content: "A" }, { role: "user", content: "Q" }]);
    const at = next.indexOf("w", next.indexOf('"assistant"'));
    const inUser = next.indexOf("w", next.indexOf('"user"'));
    const variants = [next.slice(0, at) + "W" + next.slice(at + 1), next.replace('"role":"assistant"', '"role": "assistant"'), next.slice(0, inUser) + "\\u0077" + next.slice(inUser + 1)];
    // The last two are the same JSON value as `next`, written another way.
    expect(variants.slice(1).map((v) => JSON.parse(v))).toEqual([JSON.parse(next), JSON.parse(next)]);
    for (const body of variants) {
      const before = chain.stats().heldLayouts;
      same(chain.scanLayout(body, ""), scanBodyLayout(body));
      expect(chain.stats().heldLayouts).toBe(before);
    }
  });

  it("spans are taken only after the held text is compared: an entry listed under the body's hint key but not its text gives none", () => {
    const chain = new TurnChainCache({ checkRate: 0 });
    // Two conversations with the same first two messages' openings (the hint key's windows) and different texts later.
    const opening = text(5, 60);
    const a: Msg[] = [{ role: "system", content: "S" }, { role: "user", content: opening + " alpha" }, { role: "assistant", content: text(6, 50) }, { role: "user", content: "q" }];
    const b: Msg[] = [{ role: "system", content: "S" }, { role: "user", content: opening + " beta!" }, { role: "assistant", content: text(7, 50) }, { role: "user", content: "q" }];
    turn(chain, bodyOf(a));
    const body = bodyOf([...b, { role: "assistant", content: "x" }, { role: "user", content: "y" }]);
    const before = chain.stats().heldLayouts;
    same(chain.scanLayout(body, ""), scanBodyLayout(body));
    expect(chain.stats().heldLayouts).toBe(before);
    expect(chain.find(body, profile, "")?.hit).toBeNull();
  });

  it("keeps no body a lookup never read: the next scan drops what an earlier one held for find", () => {
    const chain = new TurnChainCache({ checkRate: 0 });
    let messages: Msg[] = [{ role: "system", content: "You are a careful assistant." }, { role: "user", content: text(1, 60) }];
    turn(chain, bodyOf(messages));
    messages = [...messages, { role: "assistant", content: text(2, 80) }, { role: "user", content: text(13, 40) }];
    turn(chain, bodyOf(messages));
    const next = bodyOf([...messages, { role: "assistant", content: text(3, 80) }, { role: "user", content: text(14, 40) }]);
    const held = (c: TurnChainCache) => (c as unknown as { compared: { body: { joined: string } } | null }).compared;
    chain.scanLayout(next, ""); // took held spans; no find follows (e.g. an unknown model refused it)
    expect(held(chain)?.body.joined).toBe(next);
    // Every listed entry evicted since (as a store of other conversations does): the next scan has no hints.
    (chain as unknown as { hints: Map<unknown, unknown> }).hints.clear();
    chain.scanLayout(bodyOf([{ role: "user", content: "unrelated" }]), "");
    expect(held(chain)).toBeNull();
  });
});
