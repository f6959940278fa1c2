/**
 * Differential test of the held spans (TurnChainCache.scanLayout): for bodies that differ from a
 * conversation's held text in one character — at the start, middle and end of each held entry's
 * raw text, just before and after the held text, and at seeded positions — read whole, in the held
 * read's pieces (the entries' own raw strings, the changed one a new string) and in pieces cut
 * elsewhere (an entry's text across two pieces), the layout is the whole scan's (scanBodyLayout of
 * the joined text) and the lookup's hit the one a whole-text lookup finds. A body that differs
 * inside the first entry's text takes no held spans.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { parseEdgeConfig } from "../../../src/config/config.ts";
import { parseChatTurn } from "../../../src/edge/chat/parse.ts";
import { scanBodyLayout, TurnChainCache, type BodyLayout } from "../../../src/prompt/turn-chain.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { SplitText } from "../../../src/util/split-text.ts";
import { HELD_TEXT_WORDS, seededText } from "../../helpers/held-body-input.ts";

beforeAll(() => initHashing());

const config = parseEdgeConfig({ KVEDGE_ACCESS: "public", KVEDGE_TURN_CHECK_RATE: "0" });
const model = config.models[0]!;
const profile = { family: model.family, templateId: model.templateId };
const encode = (s: string) => new TextEncoder().encode(s);
const text = (seed: number, chars: number) => seededText(seed, chars, [...HELD_TEXT_WORDS, "}]", '{"role":"user"}']);
const bodyOf = (messages: readonly unknown[]) => JSON.stringify({ model: model.id, messages, max_tokens: 8 });

/** Characters a change puts in: letters, and ones that change the JSON's structure or its escapes. */
const CHANGES = ["x", '"', "]", "}", "{", ",", " ", "\\", "é", "["];

function layoutOf(l: BodyLayout | null): unknown {
  return l && { members: [...l.members], open: l.messagesOpen, messages: l.messages };
}

/** The edge's parse and prompt stages on `body` (its bytes go with the lookup: the chain holds it). */
function serve(chain: TurnChainCache, body: string): void {
  const parsed = parseChatTurn(body, config, "", { bytes: encode(body) }, chain);
  chain.prepare(parsed.req, body, profile, "", { found: parsed.turn, validated: true });
}

describe("held spans against the whole scan", () => {
  it("bodies one character off the held text, whole or in pieces: the whole scan's layout and the whole lookup's hit", () => {
    const chain = new TurnChainCache({ checkRate: 0 });
    const messages: Record<string, unknown>[] = [{ role: "system", content: text(1, 300) }, { role: "user", content: text(2, 200) }];
    serve(chain, bodyOf(messages));
    for (let t = 0; t < 4; t++) {
      messages.push({ role: "assistant", content: text(10 + t, 400) }, { role: "user", content: text(20 + t, 150) });
      serve(chain, bodyOf(messages));
    }
    const next = bodyOf([...messages, { role: "assistant", content: text(30, 300) }, { role: "user", content: text(31, 100) }]);
    const held = chain.heldBodyText(encode(next), "");
    expect(held).not.toBeNull();
    const { head, gap } = held!;
    // Several entries, so that changes fall in the first, in later ones and at their boundaries.
    expect(gap.length).toBeGreaterThanOrEqual(3);
    const starts: number[] = [];
    let gapEnd = head.length;
    for (const p of gap) {
      starts.push(gapEnd);
      gapEnd += p.length;
    }
    let x = 77;
    const rand = (n: number) => ((x = (Math.imul(x, 1103515245) + 12345) >>> 0) >>> 8) % n;
    const positions = new Set<number>([head.length - 1, gapEnd, gapEnd + 1]);
    for (const [k, s] of starts.entries()) for (const at of [s, s + 1, s + (gap[k]!.length >> 1), s + gap[k]!.length - 1]) positions.add(at);
    while (positions.size < 60) positions.add(head.length - 20 + rand(gapEnd - head.length + 60));

    /** The body `m` as the scan may get it: whole, in the held read's pieces, in pieces cut elsewhere. */
    const forms = (m: string, changed: number): { name: string; body: string | SplitText }[] => {
      const aligned = gap.map((p, k) => (changed >= starts[k]! && changed < starts[k]! + p.length ? m.slice(starts[k]!, starts[k]! + p.length) : p));
      const cuts = [head.length, ...Array.from({ length: 3 }, () => head.length + 1 + rand(gapEnd - head.length - 1)).sort((a, b) => a - b), gapEnd];
      const cut = cuts.slice(1).map((c, i) => m.slice(cuts[i]!, c));
      const early = head.length - 3;
      return [
        { name: "whole", body: m },
        { name: "held pieces", body: new SplitText(m.slice(0, head.length), aligned, m.slice(gapEnd)) },
        { name: "cut elsewhere", body: new SplitText(m.slice(0, head.length), cut, m.slice(gapEnd)) },
        { name: "gap before the array", body: new SplitText(m.slice(0, early), [m.slice(early, starts[1]!), ...gap.slice(1).map((p, k) => aligned[k + 1] ?? p)], m.slice(gapEnd)) },
      ];
    };

    let taken = 0;
    let refused = 0;
    const check = (m: string, changed: number) => {
      const whole = scanBodyLayout(m);
      const wholeHit = whole ? (chain.find(m, profile, "", whole)?.hit?.node ?? null) : null;
      for (const { name, body } of forms(m, changed)) {
        const before = chain.stats().heldLayouts;
        const layout = chain.scanLayout(body, "");
        const tookHeld = chain.stats().heldLayouts > before;
        const where = `${name}, "${m[changed]}" at ${changed}`;
        expect(layoutOf(layout), where).toEqual(layoutOf(whole));
        if (changed >= starts[0]! && changed < starts[0]! + gap[0]!.length) expect(tookHeld, where).toBe(false);
        if (tookHeld) taken++;
        else refused++;
        const hit = layout ? (chain.find(body, profile, "", layout)?.hit?.node ?? null) : null;
        expect(hit, where).toBe(wholeHit);
      }
    };
    check(next, gapEnd);
    expect(taken).toBe(4);
    for (const at of positions) {
      const c = CHANGES[rand(CHANGES.length)]!;
      const put = c === next[at] ? "y" : c;
      check(next.slice(0, at) + put + next.slice(at + 1), at);
    }
    // Both outcomes were met: bodies that took held spans and bodies scanned whole.
    expect(taken).toBeGreaterThan(40);
    expect(refused).toBeGreaterThan(40);
  });
});
