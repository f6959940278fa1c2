/**
 * The parse stage through the turn chain (src/edge/chat/parse.ts parseChatTurn): messages an
 * earlier body of the conversation held are taken as that body's parse validated them, and only
 * the rest of the body is read. Work follows the new bytes (ParseWork), the request equals the
 * whole body's, and every whole-body limit refuses exactly as the whole parse does, whether the
 * excess lies in the reused messages or in the new ones.
 */
import fc from "fast-check";
import { beforeAll, describe, expect, it } from "vitest";
import { KvedgeError, PayloadTooLargeError } from "../../../src/api/errors.ts";
import { DEFAULT_LIMITS } from "../../../src/api/limits.ts";
import type { ParseWork } from "../../../src/api/validate.ts";
import { parseEdgeConfig, type EdgeConfig } from "../../../src/config/config.ts";
import { parseChat, parseChatBody, parseChatTurn } from "../../../src/edge/chat/parse.ts";
import { StageClock } from "../../../src/edge/server-timing.ts";
import { scanBodyLayout, TurnChainCache } from "../../../src/prompt/turn-chain.ts";
import { initHashing } from "../../../src/util/hash.ts";

beforeAll(() => initHashing());

type Msg = Record<string, unknown>;
const longText = (seed: number, words: number) => Array.from({ length: words }, (_, i) => `w${(seed * 7919 + i * 31) % 1000}`).join(" ");

function configWith(limits: Record<string, number> = {}, extra: Record<string, string> = {}): EdgeConfig {
  return parseEdgeConfig({ KVEDGE_ACCESS: "public", KVEDGE_TURN_CHECK_RATE: "0", KVEDGE_LIMITS: JSON.stringify(limits), ...extra });
}

function bodyOf(config: EdgeConfig, messages: Msg[], extra: Record<string, unknown> = {}): string {
  return JSON.stringify({ model: config.models[0]!.id, ...extra, messages, max_tokens: 8 });
}

function profileOf(config: EdgeConfig) {
  const m = config.models[0]!;
  return { family: m.family, templateId: m.templateId };
}

/** One request through the parse and prompt stages as the handler runs them (the prompt stage stores the turn). */
function turn(config: EdgeConfig, chain: TurnChainCache, body: string, work?: ParseWork) {
  const parsed = parseChatTurn(body, config, "", { work }, chain);
  chain.prepare(parsed.req, body, profileOf(config), "", { found: parsed.turn, validated: true });
  return parsed.req;
}

function verdict(f: () => unknown): { message: string; param: string | null; code: string | null } | null {
  try {
    f();
    return null;
  } catch (e) {
    if (!(e instanceof KvedgeError)) throw e;
    return { message: e.message, param: e.param, code: e.code };
  }
}

describe("parse through the turn chain", () => {
  it("reads only the new messages each turn, and the request equals the whole body's", () => {
    const config = configWith();
    const chain = new TurnChainCache({ checkRate: 0 });
    const tools = [{ type: "function", function: { name: "read_file", parameters: { type: "object", properties: { path: { type: "string" }, limit: { type: "number", default: 0.0 } } } } }];
    const messages: Msg[] = [{ role: "system", content: "Be brief." }, { role: "user", content: longText(1, 400) }];
    const parsedPerTurn: number[] = [];
    let lastBody = "";
    for (let t = 0; t < 8; t++) {
      const body = bodyOf(config, messages, { tools });
      lastBody = body;
      const work: ParseWork = { parsedChars: 0, validatedMessages: 0 };
      const req = turn(config, chain, body, work);
      expect(JSON.stringify(req)).toBe(JSON.stringify(parseChatBody(body, config.limits)));
      if (t >= 2) {
        // The previous question, the answer (and tool result) since, this turn's question; the body around them.
        expect(work.validatedMessages).toBeLessThanOrEqual(4);
        parsedPerTurn.push(work.parsedChars);
        // The reused messages are the chain's own objects, frozen: nothing downstream can change them for the next turn.
        expect(Object.isFrozen(req.messages[1])).toBe(true);
      }
      const answer: Msg = t % 2 === 0 ? { role: "assistant", content: longText(t + 10, 300) } : { role: "assistant", content: "", tool_calls: [{ id: `c${t}`, type: "function", function: { name: "read_file", arguments: { path: `f${t}`, limit: 1.0 } } }] };
      messages.push(answer, t % 2 === 0 ? { role: "user", content: [{ type: "text", text: longText(t, 60) }, { type: "image_url", image_url: { url: `https://example.com/${t}.png` } }] } : { role: "tool", tool_call_id: `c${t}`, content: longText(t + 20, 200) });
      if (t % 2 === 1) messages.push({ role: "user", content: "Go on." });
    }
    // Parse work does not grow with the history (which grows by ~2.5k characters a turn).
    expect(Math.max(...parsedPerTurn)).toBeLessThan(5000);
    expect(lastBody.length).toBeGreaterThan(4 * Math.max(...parsedPerTurn));
  });

  it("an entry seeded without parse data (a stored response's) takes the first whole parse's messages: the next turn reads only its new ones", () => {
    const config = configWith();
    const messages: Msg[] = [{ role: "system", content: "Be brief." }, { role: "user", content: longText(1, 400) }, { role: "assistant", content: longText(2, 400) }, { role: "user", content: "Why?" }];
    // The isolate that served the conversation: the stable prefix it kept (messages before the last query).
    const served = new TurnChainCache({ checkRate: 0 });
    const first = bodyOf(config, messages);
    const prefix = served.prepare(parseChatBody(first, config.limits), first, profileOf(config), "", { validated: true }).stable!();
    expect(prefix.messages).toBe(3);
    // Another isolate, seeded with it as a continuation seeds it (no parsed messages).
    const chain = new TurnChainCache({ checkRate: 0 });
    expect(chain.seed(prefix, messages.slice(0, 3).map((m) => JSON.stringify(m)).join(","), "")).toBe(true);
    const work: ParseWork[] = [];
    for (let t = 0; t < 3; t++) {
      messages.push({ role: "assistant", content: longText(10 + t, 300) }, { role: "user", content: `And ${t}?` });
      const body = bodyOf(config, messages);
      const w: ParseWork = { parsedChars: 0, validatedMessages: 0 };
      const req = turn(config, chain, body, w);
      expect(JSON.stringify(req)).toBe(JSON.stringify(parseChatBody(body, config.limits)));
      work.push(w);
    }
    // The continuation itself is parsed whole (its seeded entry has no messages to give), the later
    // turns only their answer and question (each turn's entry reaches through its query).
    expect(work[0]!.validatedMessages).toBe(6);
    expect(work.slice(1).map((w) => w.validatedMessages)).toEqual([2, 2]);
    expect(chain.stats().hits).toBe(3);
  });

  it("the chain stores a turn with the long strings its parse decoded (not decoded again), to the same pieces and later parses", () => {
    const config = configWith();
    // Long texts with JSON escapes (newlines, quotes): their raw JSON is not their value. The two
    // answers have the same length, so only the text tells them apart.
    const escapedText = (seed: number) => `${longText(seed, 500)}\n"${longText(seed + 1, 10)}"\n`;
    const base: Msg[] = [{ role: "system", content: "Be brief." }, { role: "user", content: escapedText(1) }];
    const chains = { given: new TurnChainCache({ checkRate: 0 }), decodedAgain: new TurnChainCache({ checkRate: 0 }) };
    const longParses: Record<keyof typeof chains, number> = { given: 0, decodedAgain: 0 };
    const realParse = JSON.parse;
    const outs: Record<keyof typeof chains, string[]> = { given: [], decodedAgain: [] };
    for (let t = 0; t < 4; t++) {
      base.push({ role: "assistant", content: escapedText(100 + t) }, { role: "user", content: t % 2 ? escapedText(200 + t) : "Go on." });
      const body = bodyOf(config, base);
      for (const k of ["given", "decodedAgain"] as const) {
        const parsed = parseChatTurn(body, config, "", { literals: [] }, chains[k]);
        expect(parsed.turn!.decoded!.length).toBeGreaterThan(0);
        const found = k === "given" ? parsed.turn : { ...parsed.turn!, decoded: undefined };
        JSON.parse = ((text: string, reviver?: Parameters<typeof JSON.parse>[1]) => {
          if (typeof text === "string" && text.length > 2048) longParses[k]++;
          return realParse(text, reviver);
        }) as typeof JSON.parse;
        try {
          const p = chains[k].prepare(parsed.req, body, profileOf(config), "", { found, validated: true });
          const sent = p.pieces ? p.pieces.bodyParts.map((b) => (typeof b === "string" ? b : new TextDecoder().decode(b))).join("") : null;
          outs[k].push(p.text, JSON.stringify(sent), JSON.stringify(parsed.req));
          if (sent !== null) expect(sent).toBe(JSON.stringify(p.text.slice(0, p.pieces!.chars)).slice(1, -1));
        } finally {
          JSON.parse = realParse;
        }
        expect(JSON.stringify(parsed.req)).toBe(JSON.stringify(parseChatBody(body, config.limits)));
      }
    }
    expect(outs.given).toEqual(outs.decodedAgain);
    expect(chains.given.stats().hits).toBe(3);
    // Without the parse's strings the store decodes each long escaped text again.
    expect(longParses.decodedAgain).toBeGreaterThan(0);
    expect(longParses.given).toBe(0);
  });

  it("a caller's layout of the body is the lookup's (no second scan); without one the body is scanned, to the same parse", () => {
    const config = configWith();
    const chain = new TurnChainCache({ checkRate: 0 });
    const messages: Msg[] = [{ role: "user", content: longText(1, 200) }, { role: "assistant", content: "ok" }, { role: "user", content: "next" }];
    const body = bodyOf(config, messages);
    const layout = scanBodyLayout(body);
    const given = parseChatTurn(body, config, "", { layout }, chain);
    expect(given.turn!.layout).toBe(layout);
    const scanned = parseChatTurn(body, config, "", {}, chain);
    expect(scanned.turn!.layout).not.toBe(layout);
    expect(scanned.turn!.layout).toEqual(layout);
    expect(JSON.stringify(given.req)).toBe(JSON.stringify(scanned.req));
  });

  it("a body its caller wrote and scanned is parsed as given, not read back from the request; its size is checked as a read checks it", async () => {
    const config = configWith({ maxBodyBytes: 4096 });
    const body = bodyOf(config, [{ role: "user", content: "hello" }]);
    const scanned = { text: body, layout: scanBodyLayout(body) };
    const request = () => new Request("https://edge.test/v1/chat/completions", { method: "POST", headers: { "content-type": "application/json" } });
    const parsed = await parseChat(request(), { config, scanned }, new StageClock());
    expect(parsed.bodyText).toBe(body);
    expect(parsed.turn!.layout).toBe(scanned.layout);
    expect(JSON.stringify(parsed.req)).toBe(JSON.stringify(parseChatBody(body, config.limits)));
    const large = bodyOf(config, [{ role: "user", content: "é".repeat(2100) }]);
    expect(large.length).toBeLessThan(4096);
    const refused = await parseChat(request(), { config, scanned: { text: large, layout: scanBodyLayout(large) } }, new StageClock()).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(PayloadTooLargeError);
    expect((refused as Error).message).toBe("Request body exceeds 4096 bytes.");
  });

  it("a changed earlier message, or a body whose model names no pool, is parsed whole", () => {
    const config = configWith();
    const chain = new TurnChainCache({ checkRate: 0 });
    const first: Msg[] = [{ role: "user", content: longText(1, 200) }, { role: "assistant", content: "ok" }, { role: "user", content: "next" }];
    turn(config, chain, bodyOf(config, first));
    const grown = [...first, { role: "assistant", content: "sure" }, { role: "user", content: "more" }];
    const reused: ParseWork = { parsedChars: 0, validatedMessages: 0 };
    turn(config, chain, bodyOf(config, grown), reused);
    expect(reused.validatedMessages).toBe(3);
    const edited = [{ role: "user", content: longText(2, 200) }, ...grown.slice(1)];
    const whole: ParseWork = { parsedChars: 0, validatedMessages: 0 };
    turn(config, chain, bodyOf(config, edited), whole);
    expect(whole.validatedMessages).toBe(5);
    const otherModel = JSON.stringify({ model: "no-such-pool", messages: grown });
    const unknown: ParseWork = { parsedChars: 0, validatedMessages: 0 };
    parseChatTurn(otherModel, config, "", { work: unknown }, chain);
    expect(unknown.parsedChars).toBe(otherModel.length);
  });

  it("the sampled check parses the whole body too and keeps the same request", () => {
    const config = configWith();
    const chain = new TurnChainCache({ checkRate: 1 });
    const first: Msg[] = [{ role: "user", content: "a" }, { role: "assistant", content: "b" }, { role: "user", content: "c" }];
    turn(config, chain, bodyOf(config, first));
    const body = bodyOf(config, [...first, { role: "assistant", content: "d" }, { role: "user", content: "e" }]);
    const { req, turn: found } = parseChatTurn(body, config, "", { random: () => 0 }, chain);
    expect(found?.hit?.node).toBeTruthy();
    expect(JSON.stringify(req)).toBe(JSON.stringify(parseChatBody(body, config.limits)));
  });
});

/**
 * Each limit, with the excess in the reused messages and in the new ones. The chain is primed by
 * the turn before (`history` + a question) under `primeLimits` (the scenario's own limits unless
 * the reused part alone must be over them, which only a stricter configuration can give); the
 * checked body appends `added`. Both parses must refuse with the same error, and the chain must
 * have offered the history (so the reduced parse was the one that ran).
 */
interface LimitCase {
  name: string;
  limits: Record<string, number>;
  primeLimits?: Record<string, number>;
  history: Msg[];
  added: Msg[];
}

const img = (url: string) => ({ type: "image_url", image_url: { url } });
const dataUrl = (chars: number) => `data:image/png;base64,${"A".repeat(chars)}`;
const deepArgs = (depth: number): unknown => (depth === 0 ? 1 : { a: deepArgs(depth - 1) });
const call = (depth: number) => ({ role: "assistant", content: "", tool_calls: [{ id: "c1", type: "function", function: { name: "f", arguments: deepArgs(depth) } }] });
const parts = (n: number) => Array.from({ length: n }, (_, i) => ({ type: "text", text: `p${i}` }));
const LOOSE = { maxMessages: 1000, maxTotalChars: 2_000_000, maxMessageChars: 1_000_000, maxContentParts: 256, maxMediaItems: 64, maxUrlChars: 8192, maxJsonValues: 200_000, maxJsonDepth: 64 };

const LIMIT_CASES: LimitCase[] = [
  { name: "maxMessages, reused", limits: { maxMessages: 6 }, history: [{ role: "user", content: "a" }, { role: "assistant", content: "b" }, { role: "user", content: "c" }, { role: "assistant", content: "d" }], added: [{ role: "assistant", content: "f" }, { role: "user", content: "g" }] },
  { name: "maxMessages, new", limits: { maxMessages: 6 }, history: [{ role: "user", content: "a" }, { role: "assistant", content: "b" }], added: [{ role: "assistant", content: "d" }, { role: "user", content: "e" }, { role: "assistant", content: "f" }, { role: "user", content: "g" }] },
  { name: "maxTotalChars, reused", limits: { maxTotalChars: 5000 }, history: [{ role: "user", content: "x".repeat(4500) }, { role: "assistant", content: "ok" }], added: [{ role: "assistant", content: "sure" }, { role: "user", content: "y".repeat(600) }] },
  { name: "maxTotalChars, new", limits: { maxTotalChars: 5000 }, history: [{ role: "user", content: "x" }, { role: "assistant", content: "ok" }], added: [{ role: "assistant", content: "sure" }, { role: "user", content: "y".repeat(5100) }] },
  { name: "maxMessageChars, reused", limits: { maxMessageChars: 1000 }, primeLimits: LOOSE, history: [{ role: "user", content: "x".repeat(1500) }, { role: "assistant", content: "ok" }], added: [{ role: "assistant", content: "sure" }, { role: "user", content: "y" }] },
  { name: "maxMessageChars, new", limits: { maxMessageChars: 1000 }, history: [{ role: "user", content: "x" }, { role: "assistant", content: "ok" }], added: [{ role: "assistant", content: "z".repeat(1500) }, { role: "user", content: "y" }] },
  { name: "maxContentParts, reused", limits: { maxContentParts: 4 }, primeLimits: LOOSE, history: [{ role: "user", content: parts(5) }, { role: "assistant", content: "ok" }], added: [{ role: "assistant", content: "sure" }, { role: "user", content: "y" }] },
  { name: "maxContentParts, new", limits: { maxContentParts: 4 }, history: [{ role: "user", content: "x" }, { role: "assistant", content: "ok" }], added: [{ role: "assistant", content: "sure" }, { role: "user", content: parts(5) }] },
  { name: "maxMediaItems, reused", limits: { maxMediaItems: 3 }, history: [{ role: "user", content: [img("https://e.com/1.png"), img("https://e.com/2.png"), img("https://e.com/3.png")] }, { role: "assistant", content: "ok" }], added: [{ role: "assistant", content: "sure" }, { role: "user", content: [img("https://e.com/4.png")] }] },
  { name: "maxMediaItems, new", limits: { maxMediaItems: 3 }, history: [{ role: "user", content: "x" }, { role: "assistant", content: "ok" }], added: [{ role: "assistant", content: "sure" }, { role: "user", content: [1, 2, 3, 4].map((n) => img(`https://e.com/${n}.png`)) }] },
  { name: "maxUrlChars, reused", limits: { maxUrlChars: 100 }, primeLimits: LOOSE, history: [{ role: "user", content: [img(`https://e.com/${"u".repeat(200)}.png`)] }, { role: "assistant", content: "ok" }], added: [{ role: "assistant", content: "sure" }, { role: "user", content: "y" }] },
  { name: "maxUrlChars, new", limits: { maxUrlChars: 100 }, history: [{ role: "user", content: "x" }, { role: "assistant", content: "ok" }], added: [{ role: "assistant", content: "sure" }, { role: "user", content: [img(`https://e.com/${"u".repeat(200)}.png`)] }] },
  { name: "maxJsonValues, reused", limits: { maxJsonValues: 200 }, history: [{ role: "user", content: parts(55) }, { role: "assistant", content: "ok" }], added: [{ role: "assistant", content: "sure" }, { role: "user", content: parts(10) }] },
  { name: "maxJsonValues, new", limits: { maxJsonValues: 200 }, history: [{ role: "user", content: "x" }, { role: "assistant", content: "ok" }], added: [{ role: "assistant", content: "sure" }, { role: "user", content: parts(70) }] },
  { name: "maxJsonDepth, reused", limits: { maxJsonDepth: 9 }, primeLimits: LOOSE, history: [{ role: "user", content: "x" }, call(4), { role: "tool", tool_call_id: "c1", content: "r" }], added: [{ role: "assistant", content: "sure" }, { role: "user", content: "y" }] },
  { name: "maxJsonDepth, new", limits: { maxJsonDepth: 9 }, history: [{ role: "user", content: "x" }, { role: "assistant", content: "ok" }], added: [call(4), { role: "tool", tool_call_id: "c1", content: "r" }, { role: "assistant", content: "sure" }, { role: "user", content: "y" }] },
  // Data URLs are left out of the pre-parse count up to maxMediaItems, in document order: the reused ones use up the allowance.
  // A `"url": "data:…"` member the schema drops (an unknown field) is left out too: only the count says the third is over.
  { name: "characters outside data: URLs, reused", limits: { maxTotalChars: 1000, maxMediaItems: 2 }, history: [{ role: "user", content: "x", attachment: [{ url: dataUrl(50_000) }, { url: dataUrl(50_000) }] }, { role: "assistant", content: "ok" }], added: [{ role: "assistant", content: "sure" }, { role: "user", content: "y", attachment: { url: dataUrl(80_000) } }] },
  { name: "characters outside data: URLs, new", limits: { maxTotalChars: 1000 }, history: [{ role: "user", content: "x" }, { role: "assistant", content: "ok" }], added: [{ role: "assistant", content: "sure" }, { role: "user", content: "y".repeat(80_000) }] },
];

describe("every whole-body limit refuses as the whole parse does", () => {
  for (const c of LIMIT_CASES) {
    it(c.name, () => {
      const config = configWith(c.limits);
      const chain = new TurnChainCache({ checkRate: 0 });
      const primeConfig = c.primeLimits ? configWith(c.primeLimits) : config;
      const question: Msg = { role: "user", content: "q" };
      const primed = bodyOf(primeConfig, [...c.history, question]);
      expect(verdict(() => turn(primeConfig, chain, primed))).toBeNull();
      const body = bodyOf(config, [...c.history, question, ...c.added]);
      // The chain offers the history: the reduced parse is what runs.
      const found = chain.find(body, profileOf(config), "");
      expect(chain.reusedMessages(found)?.messages.length).toBe(c.history.length);
      const whole = verdict(() => parseChatBody(body, config.limits));
      expect(whole, "the whole body is over the limit").not.toBeNull();
      expect(verdict(() => parseChatTurn(body, config, "", {}, chain))).toEqual(whole);
    });
  }

  it("a history with more data URLs than a tally lists is parsed whole when the limit reaches past them", () => {
    const config = configWith({ maxMediaItems: 2000 });
    const chain = new TurnChainCache({ checkRate: 0 });
    const history: Msg[] = [{ role: "user", content: "x", attachment: Array.from({ length: 1100 }, () => ({ url: "data:," })) }, { role: "assistant", content: "ok" }];
    turn(config, chain, bodyOf(config, [...history, { role: "user", content: "q" }]));
    const body = bodyOf(config, [...history, { role: "user", content: "q" }, { role: "assistant", content: "a" }, { role: "user", content: "b" }]);
    expect(chain.reusedMessages(chain.find(body, profileOf(config), ""))?.tally.dataUrlsCut).toBe(true);
    const work: ParseWork = { parsedChars: 0, validatedMessages: 0 };
    const req = parseChatTurn(body, config, "", { work }, chain).req;
    expect(work.parsedChars).toBe(body.length);
    expect(JSON.stringify(req)).toBe(JSON.stringify(parseChatBody(body, config.limits)));
    // Under a limit the listed ones reach, the reduced parse runs.
    const tight = configWith({ maxMediaItems: 64 });
    const reduced: ParseWork = { parsedChars: 0, validatedMessages: 0 };
    parseChatTurn(body, tight, "", { work: reduced }, chain);
    expect(reduced.parsedChars).toBeLessThan(body.length / 4);
  });

  it("a body whose separator after the reused messages is not JSON's is refused as the whole parse refuses it", () => {
    const config = configWith();
    const chain = new TurnChainCache({ checkRate: 0 });
    const history: Msg[] = [{ role: "user", content: "a" }, { role: "assistant", content: "b" }];
    turn(config, chain, bodyOf(config, [...history, { role: "user", content: "c" }]));
    const elements = [...history, { role: "user", content: "c" }, { role: "assistant", content: "d" }, { role: "user", content: "e" }].map((m) => JSON.stringify(m));
    for (const gap of [",,", " ", ", ,", ",\u000b"]) {
      const body = `{"model":${JSON.stringify(config.models[0]!.id)},"messages":[${elements[0]},${elements[1]}${gap}${elements.slice(2).join(",")}],"max_tokens":8}`;
      const whole = verdict(() => parseChatBody(body, config.limits));
      expect(whole?.code, gap).toBe("invalid_json");
      expect(verdict(() => parseChatTurn(body, config, "", {}, chain)), gap).toEqual(whole);
    }
  });

  it("a body within every limit after a reused history is accepted, with the reused part's tally counted once", () => {
    const config = configWith({ maxMessages: 7, maxMediaItems: 4, maxJsonValues: 400 });
    const chain = new TurnChainCache({ checkRate: 0 });
    const history: Msg[] = [{ role: "user", content: [img("https://e.com/1.png"), img("https://e.com/2.png"), ...parts(20)] }, { role: "assistant", content: "ok" }];
    turn(config, chain, bodyOf(config, [...history, { role: "user", content: "q" }]));
    const body = bodyOf(config, [...history, { role: "user", content: "q" }, { role: "assistant", content: "a" }, { role: "user", content: [img("https://e.com/3.png"), img("https://e.com/4.png")] }]);
    const work: ParseWork = { parsedChars: 0, validatedMessages: 0 };
    const req = parseChatTurn(body, config, "", { work }, chain).req;
    expect(work.validatedMessages).toBe(3);
    expect(JSON.stringify(req)).toBe(JSON.stringify(parseChatBody(body, config.limits)));
  });
});

describe("the reduced parse's verdict is the whole parse's, for any new part", () => {
  // New messages as raw JSON text, valid or not: what a client could append after a reused history.
  const valid = fc.constantFrom(
    '{"role":"user","content":"fine"}',
    '{"role":"assistant","content":"sure","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":{"a":{"b":[1,2,3]}}}}]}',
    '{"role":"user","content":[{"type":"text","text":"t"},{"type":"image_url","image_url":{"url":"https://e.com/x.png"}}]}',
    '{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}',
    '{"role":"tool","tool_call_id":"c","content":"r"}',
    '{"role":"user","content":"' + "y".repeat(3000) + '"}',
  );
  const invalid = fc.constantFrom(
    '{"role":"user"}',
    '{"role":"bogus","content":"x"}',
    '{"role":"user","content":"\\ud800"}',
    '{"role":"user","content":"x","__proto__":{}}',
    '{"role":"user","content":[[[[[[[[[[1]]]]]]]]]]}',
    '{"role":"user","content":',
    "]",
    "1",
    "null",
  );
  const fragment = fc.oneof({ arbitrary: valid, weight: 6 }, { arbitrary: invalid, weight: 1 });
  // Near what the history already holds (33 JSON values, ~2.3k characters, 5 messages, 1 media item): the new part crosses them often.
  const LIMITS = { maxMessages: 9, maxTotalChars: 4500, maxMessageChars: 3500, maxContentParts: 3, maxMediaItems: 3, maxUrlChars: 200, maxJsonValues: 60, maxJsonDepth: 10 };

  it("refuses or accepts as the whole parse does, with the same error or the same request", () => {
    const config = configWith(LIMITS);
    const history: Msg[] = [
      { role: "system", content: "s".repeat(1500) },
      { role: "user", content: [{ type: "text", text: "look" }, img("https://e.com/1.png")] },
      { role: "assistant", content: "ok", tool_calls: [{ id: "c0", type: "function", function: { name: "f", arguments: { q: [1, 2] } } }] },
      { role: "tool", tool_call_id: "c0", content: "r".repeat(800) },
    ];
    const chain = new TurnChainCache({ checkRate: 0 });
    turn(config, chain, bodyOf(config, [...history, { role: "user", content: "q" }]));
    const head = JSON.stringify([...history, { role: "user", content: "q" }]).slice(0, -1);
    fc.assert(
      fc.property(fc.array(fragment, { minLength: 1, maxLength: 6 }), (added) => {
        const body = `{"model":${JSON.stringify(config.models[0]!.id)},"messages":${head},${added.join(",")}],"max_tokens":8}`;
        const whole = verdict(() => parseChatBody(body, config.limits));
        let req: unknown = null;
        const reduced = verdict(() => (req = parseChatTurn(body, config, "", {}, chain).req));
        expect(reduced).toEqual(whole);
        if (whole === null) expect(JSON.stringify(req)).toBe(JSON.stringify(parseChatBody(body, config.limits)));
      }),
      { numRuns: 300, seed: 3737 },
    );
    // The history was offered: the reduced parse is what ran.
    const valid = `{"model":${JSON.stringify(config.models[0]!.id)},"messages":${head},{"role":"user","content":"fine"}],"max_tokens":8}`;
    const work: ParseWork = { parsedChars: 0, validatedMessages: 0 };
    parseChatTurn(valid, config, "", { work }, chain);
    expect(work.validatedMessages).toBe(2);
  });

  it("a key JSON cannot decode is the whole parse's invalid_json, not an exception of the lookup", () => {
    const config = configWith();
    const chain = new TurnChainCache({ checkRate: 0 });
    const body = `{"\\q":1,"model":${JSON.stringify(config.models[0]!.id)},"messages":[{"role":"user","content":"hi"}]}`;
    expect(verdict(() => parseChatTurn(body, config, "", {}, chain))).toEqual(verdict(() => parseChatBody(body, DEFAULT_LIMITS)));
    expect(verdict(() => parseChatTurn(body, config, "", {}, chain))?.code).toBe("invalid_json");
  });
});
