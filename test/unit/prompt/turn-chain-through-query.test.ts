// The entry a chat turn stores after a hit reaches through its query (turn-chain.ts storeFrom): the
// next turn renders only its new messages; the entry before the query is stored when the stable
// prefix is asked for; a final assistant message (relabelled a user query) ends no such entry.
import { beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_LIMITS } from "../../../src/api/limits.ts";
import { parseChatBody } from "../../../src/edge/chat/parse.ts";
import { preparePrompt, type ModelFamily, type TemplateId } from "../../../src/prompt/index.ts";
import { TurnChainCache } from "../../../src/prompt/turn-chain.ts";
import { initHashing } from "../../../src/util/hash.ts";

beforeAll(() => initHashing());

const PROFILES: { family: ModelFamily; templateId: TemplateId }[] = [
  { family: "qwen2_5_vl", templateId: "qwen2vl" },
  { family: "qwen3_vl", templateId: "qwen3vl-instruct" },
  { family: "qwen3_vl", templateId: "qwen3vl-thinking" },
];

type Msg = Record<string, unknown>;
const words = (seed: number, n: number) => Array.from({ length: n }, (_, i) => `w${(seed * 7919 + i * 31) % 1000}`).join(" ");
const bodyOf = (messages: Msg[]) => JSON.stringify({ model: "m", messages });

function turn(chain: TurnChainCache, messages: Msg[], profile: (typeof PROFILES)[number]) {
  const body = bodyOf(messages);
  const req = parseChatBody(body, DEFAULT_LIMITS);
  const full = preparePrompt(req, profile);
  const before = chain.renderedChars;
  const inc = chain.prepare(req, body, profile, "", { validated: true });
  expect(inc.text).toBe(full.text);
  return { inc, full, rendered: chain.renderedChars - before };
}

describe("a chat turn's entry through its query", () => {
  for (const profile of PROFILES) {
    it(`${profile.templateId}: the next turn renders only its new messages; the stable prefix still ends before the last query`, () => {
      const chain = new TurnChainCache({ checkRate: 0 });
      // Queries of ~3.5k characters (below the long-query cut): a turn that rendered one again would show it.
      const messages: Msg[] = [{ role: "system", content: "Be brief." }, { role: "user", content: words(1, 700) }];
      turn(chain, messages, profile);
      for (let t = 2; t < 6; t++) {
        const added: Msg[] = [{ role: "assistant", content: `Answer ${t}.`, reasoning_content: `thought ${t}` }, { role: "user", content: words(t, 700) }];
        messages.push(...added);
        const { inc, full, rendered } = turn(chain, messages, profile);
        if (t >= 3) {
          expect(inc.reusedMessages).toBe(messages.length - 2);
          // The new answer and query once, the stand-in and generation prompt: not the previous query, nor the new one twice.
          expect(rendered).toBeLessThan(JSON.stringify(added).length + 400);
        }
        // Asked for, the stable prefix is the text before the last query's block, as before.
        const stable = inc.stable!();
        expect(stable.messages).toBe(messages.length - 1);
        expect(full.text.startsWith(stable.text)).toBe(true);
        expect(full.text.slice(stable.text.length).startsWith("<|im_start|>user\n")).toBe(true);
        expect(full.text.length - stable.text.length).toBeLessThan(JSON.stringify(added[1]).length + 200);
      }
      expect(chain.stats().mismatches).toBe(0);
    });

    it(`${profile.templateId}: a stable prefix asked for after its parent entry was dropped is a shorter one, still the prompt's start`, () => {
      const chain = new TurnChainCache({ checkRate: 0 });
      const messages: Msg[] = [{ role: "system", content: "Be brief." }, { role: "user", content: "Q1" }, { role: "assistant", content: "A1" }, { role: "user", content: "Q2" }];
      turn(chain, messages, profile);
      messages.push({ role: "assistant", content: "A2" }, { role: "user", content: "Q3" });
      const { inc, full } = turn(chain, messages, profile);
      chain.clear();
      const stable = inc.stable!();
      expect(stable.messages).toBeLessThan(messages.length - 1);
      expect(full.text.startsWith(stable.text)).toBe(true);
      expect(chain.stats().entries).toBe(0);
    });

    it(`${profile.templateId}: a final assistant message, rendered as a user query, ends no entry: the next turn renders it as an answer`, () => {
      const chain = new TurnChainCache({ checkRate: 0 });
      const messages: Msg[] = [{ role: "system", content: "Be brief." }, { role: "user", content: "Q1" }];
      turn(chain, messages, profile);
      messages.push({ role: "assistant", content: "A1" }, { role: "user", content: "Q2" });
      turn(chain, messages, profile);
      // Ends with an assistant message: preprocessing relabels it a user message while it is the last.
      messages.push({ role: "assistant", content: "A2" }, { role: "user", content: "Q3" }, { role: "assistant", content: "A3 so far" });
      turn(chain, messages, profile);
      messages.push({ role: "user", content: "Q4" });
      const { inc } = turn(chain, messages, profile);
      expect(inc.reusedMessages).toBe(4);
    });
  }
});
