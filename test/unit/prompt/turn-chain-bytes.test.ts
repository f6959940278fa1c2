/**
 * What the turn chain holds per conversation: its raw JSON and rendered text once each, with the
 * JSON escaping of its stored pieces and the long strings of its validated messages kept as views
 * of them. The estimate (stats().bytes) is checked against what V8 really frees when the chain is
 * cleared, on two-byte text (the estimate's own worst case), and the stored escaping is checked
 * against JSON.stringify of the text it stands for. A piece with non-ASCII text also keeps its
 * escaping's UTF-8 (the /generate body's bytes) from the first time it is sent as held history.
 */
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_LIMITS } from "../../../src/api/limits.ts";
import { parseChatBody, parseChatTurn } from "../../../src/edge/chat/parse.ts";
import { parseEdgeConfig } from "../../../src/config/config.ts";
import { TurnChainCache, type PromptPieces } from "../../../src/prompt/turn-chain.ts";
import { initHashing } from "../../../src/util/hash.ts";

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;
beforeAll(() => initHashing());

const profile = { family: "qwen3_vl", templateId: "qwen3vl-instruct" } as const;

/** Seeded prose with what JSON escapes (newlines, quotes, a backslash, tabs) and a two-byte dash (none when `ascii`). */
function prose(seed: number, chars: number, ascii = false): string {
  const words = ["the", "router", "cache", "prefix", "token", "edge", 'said "yes"', "path\\to", "index\tcol", ascii ? "block-hash" : "block—hash", "worker", "turn"];
  let x = (seed * 2654435761) >>> 0;
  let out = `#${seed} `;
  while (out.length < chars) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    out += words[x % words.length]! + (x % 11 === 0 ? ".\n\n" : " ");
  }
  return out;
}

/** Heap after a full GC plus array buffers' backing stores (a piece's UTF-8 is held outside the heap). */
const heap = () => {
  gc();
  gc();
  const m = process.memoryUsage();
  return m.heapUsed + m.arrayBuffers;
};

/**
 * A chat conversation grown turn by turn through the parse and prompt stages as the edge runs them
 * (~4 characters a token); each turn's stored pieces escape as JSON.stringify does. Its body's length.
 */
function converse(chain: TurnChainCache, seed: number, targetChars: number, ascii = false): number {
  const config = parseEdgeConfig({ KVEDGE_ACCESS: "public", KVEDGE_TURN_CHECK_RATE: "0" });
  const model = config.models[0]!;
  // With ASCII turns, the system message's dash still makes the whole body a two-byte string.
  const messages: { role: string; content: string }[] = [{ role: "system", content: "You are helpful — and brief." }];
  let body = "";
  for (let turn = 0; body.length < targetChars; turn++) {
    if (turn > 0) messages.push({ role: "assistant", content: prose(seed * 1000 + turn, 12_000, ascii) });
    messages.push({ role: "user", content: prose(seed * 1000 + 500 + turn, 1_200, ascii) });
    body = JSON.stringify({ model: model.id, messages });
    const parsed = parseChatTurn(body, config, "", {}, chain);
    const p = chain.prepare(parsed.req, body, { family: model.family, templateId: model.templateId }, "", { found: parsed.turn, validated: true });
    if (turn > 0) expect(escapedOf(p.pieces!)).toBe(JSON.stringify(p.pieces!.stable.join("")).slice(1, -1));
  }
  return body.length;
}

/** The chain's pieces as the /generate body carries them (UTF-8 bytes decoded back), joined. */
const escapedOf = (pieces: PromptPieces) => pieces.bodyParts.map((p) => (typeof p === "string" ? p : new TextDecoder().decode(p))).join("");

describe("turn chain bytes", () => {
  it("a resent conversation that is the least recently used keeps its entry when its chain's tally grows the budget past full", () => {
    const config = parseEdgeConfig({ KVEDGE_ACCESS: "public", KVEDGE_TURN_CHECK_RATE: "0" });
    const model = config.models[0]!;
    const send = (chain: TurnChainCache, messages: { role: string; content: string }[]) => {
      const body = JSON.stringify({ model: model.id, messages });
      const parsed = parseChatTurn(body, config, "", {}, chain);
      return { body, prompt: chain.prepare(parsed.req, body, { family: model.family, templateId: model.templateId }, "", { found: parsed.turn, validated: true }) };
    };
    const turns = (seed: number, n: number) => {
      const messages = [{ role: "user", content: prose(seed, 400, true) }];
      for (let t = 1; t < n; t++) messages.push({ role: "assistant", content: prose(seed + t, 300, true) }, { role: "user", content: prose(seed + 100 + t, 200, true) });
      return messages;
    };
    // Conversation A's first three turns (entries of two and five messages), then others' second turns (an entry each).
    const fill = (chain: TurnChainCache) => {
      for (let n = 1; n <= 3; n++) send(chain, turns(1, n));
      for (let c = 2; c < 30; c++) send(chain, turns(c * 1000, 2));
    };
    const measure = new TurnChainCache({ checkRate: 0, maxBytes: 1 << 30 });
    fill(measure);
    // Full but for less than the tally A's next turn adds (its chain of three entries joined).
    const chain = new TurnChainCache({ checkRate: 0, maxBytes: measure.stats().bytes + 64 });
    fill(chain);
    expect(chain.stats().evictions).toBe(0);
    const third = turns(1, 3);
    const reused = chain.find(JSON.stringify({ model: model.id, messages: turns(1, 4) }), { family: model.family, templateId: model.templateId }, "")!.hit!.node.messages;
    expect(reused).toBeGreaterThan(0);
    const fourth = send(chain, turns(1, 4));
    expect(fourth.prompt.reusedMessages, "the LRU conversation's turn reused its chain").toBe(reused);
    expect(chain.stats().evictions, "the budget was exceeded").toBeGreaterThan(0);
    // The entry reused is still held: a request going on from it finds it.
    const again = chain.find(JSON.stringify({ model: model.id, messages: [...third, { role: "assistant", content: "other" }, { role: "user", content: "other" }] }), { family: model.family, templateId: model.templateId }, "");
    expect(again?.hit?.node.messages, "the entry reused is still held").toBe(reused);
  });

  it("a 100k-token conversation holds its raw and rendered text once each, and the estimate covers what V8 frees", () => {
    const chain = new TurnChainCache({ checkRate: 0, maxBytes: 1 << 30 });
    const before = heap();
    let chars = 0;
    // Three conversations to ~100k tokens each (~400k body characters).
    for (let seed = 1; seed <= 3; seed++) chars += converse(chain, seed, 400_000);
    const held = heap();
    const estimate = chain.stats().bytes;
    chain.clear();
    const freed = held - heap();
    expect(held).toBeGreaterThan(before);
    // Two-byte text: raw JSON and rendered text at 2 B a character, and the UTF-8 of the pieces
    // sent again as held history at ~1 B, are ~5 B per body character. A further copy (the escaped
    // pieces as strings, or the parsed messages' strings) would be ~7 B.
    expect(estimate / chars, `estimate ${estimate} B for ${chars} body characters`).toBeLessThan(5.6);
    expect(freed / chars, `freed ${freed} B for ${chars} body characters`).toBeLessThan(5.6);
    // The estimate is what V8 frees (within heap measurement's few per cent), not a loose bound.
    expect(freed).toBeLessThan(estimate * 1.05);
    expect(freed).toBeGreaterThan(estimate * 0.75);
  });

  it("ASCII turns of a two-byte body are kept at one byte a character, and counted so", () => {
    const chain = new TurnChainCache({ checkRate: 0, maxBytes: 1 << 30 });
    let chars = 0;
    for (let seed = 1; seed <= 3; seed++) chars += converse(chain, seed, 400_000, true);
    const held = heap();
    const estimate = chain.stats().bytes;
    chain.clear();
    const freed = held - heap();
    // Raw JSON and rendered text at 1 B a character: ~2 B per body character (4 B if kept as cut from the body).
    expect(estimate / chars, `estimate ${estimate} B for ${chars} body characters`).toBeLessThan(2.6);
    expect(freed).toBeLessThan(estimate * 1.05);
    expect(freed).toBeGreaterThan(estimate * 0.75);
  });

  it("a piece's UTF-8 is made when it is first sent as held history, counted once, and only for non-ASCII text", () => {
    for (const system of ["You are helpful — and brief. 😀", "You are helpful - and brief."]) {
      const chain = new TurnChainCache({ checkRate: 0 });
      const body = JSON.stringify({ model: "m", messages: [{ role: "system", content: `${system} ${prose(7, 3000, true)}` }, { role: "user", content: "Hi" }] });
      const send = () => chain.prepare(parseChatBody(body, DEFAULT_LIMITS), body, profile, "", { validated: true });
      expect(send().pieces).toBeUndefined();
      const stored = chain.stats().bytes;
      // The same body again: a hit on the stored system prompt, nothing new to store.
      const first = send().pieces!;
      const escaped = escapedOf(first);
      const utf8 = Buffer.from(escaped, "utf8");
      if (system.includes("😀")) {
        expect(first.bodyParts).toHaveLength(1);
        expect(Buffer.from(first.bodyParts[0] as Uint8Array).equals(utf8)).toBe(true);
        expect(chain.stats().bytes - stored).toBe(utf8.length + 200);
      } else {
        // ASCII pieces are sent as their one-byte strings, which a Blob writes about as fast as it copies bytes.
        expect(first.bodyParts.join("")).toBe(escaped);
        expect(chain.stats().bytes).toBe(stored);
      }
      const grown = chain.stats().bytes;
      const again = send().pieces!;
      expect(again.bodyParts[0]).toBe(first.bodyParts[0]);
      expect(chain.stats().bytes).toBe(grown);
      expect(chain.stats()).toMatchObject({ hits: 2, stores: 1 });
    }
  });

  it("stored escaping is JSON.stringify's, whatever the text's escapes and however the client escaped its JSON", () => {
    const chain = new TurnChainCache({ checkRate: 0 });
    const tricky = ["\u0001 control", "emoji 😀 pair", "quote \" and back\\slash", "slash / and </script>", "\u2028 line sep", "é accent"];
    const messages: { role: string; content: string }[] = [{ role: "system", content: "S" }];
    for (let turn = 0; turn < 6; turn++) {
      messages.push({ role: "user", content: `${tricky[turn]} ${prose(turn, 600)} ${tricky[(turn + 1) % tricky.length]}` });
      // A client that escapes every non-ASCII character (Python's ensure_ascii) and one that writes them as they are.
      const json = JSON.stringify({ model: "m", messages });
      const body = turn % 2 === 0 ? json : json.replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
      const p = chain.prepare(parseChatBody(body, DEFAULT_LIMITS), body, profile, "", { validated: true });
      if (turn > 0) {
        const pieces = p.pieces!;
        expect(pieces.stable.join("") + pieces.rest).toBe(p.text);
        expect(escapedOf(pieces)).toBe(JSON.stringify(pieces.stable.join("")).slice(1, -1));
      }
      messages.push({ role: "assistant", content: `answer ${turn}\n${prose(100 + turn, 400)}` });
    }
    expect(chain.stats().hits).toBe(5);
  });
});

describe("turn chain bytes: the scope", () => {
  /** Tools of about `chars` characters of JSON: functions with long descriptions. */
  function tools(chars: number) {
    const out: unknown[] = [];
    for (let i = 0; JSON.stringify(out).length < chars; i++) {
      out.push({ type: "function", function: { name: `tool_${i}`, description: prose(900 + i, 600, true), parameters: { type: "object", properties: { path: { type: "string", description: prose(950 + i, 200, true) } }, required: ["path"] } } });
    }
    return out;
  }

  it("a tools-heavy conversation holds its tools' text once, not once per stored turn nor with a request body", () => {
    const config = parseEdgeConfig({ KVEDGE_ACCESS: "public", KVEDGE_TURN_CHECK_RATE: "0" });
    const model = config.models[0]!;
    const chain = new TurnChainCache({ checkRate: 0, maxBytes: 1 << 30 });
    const before = heap();
    const toolList = tools(20_000);
    let bodies = 0;
    for (let seed = 1; seed <= 3; seed++) {
      const messages: { role: string; content: string }[] = [{ role: "system", content: "You are an agent." }];
      for (let turn = 0; turn < 24; turn++) {
        if (turn > 0) messages.push({ role: "assistant", content: prose(seed * 1000 + turn, 300, true) });
        messages.push({ role: "user", content: prose(seed * 1000 + 500 + turn, 200, true) });
        // Each request is its own string, as a body read from the network is.
        const body = JSON.stringify({ model: model.id, tools: toolList, messages });
        bodies += body.length;
        const parsed = parseChatTurn(body, config, "", {}, chain);
        chain.prepare(parsed.req, body, { family: model.family, templateId: model.templateId }, "", { found: parsed.turn, validated: true });
      }
    }
    expect(chain.stats().stores).toBeGreaterThan(60);
    const held = heap();
    const estimate = chain.stats().bytes;
    chain.clear();
    const freed = held - heap();
    expect(held).toBeGreaterThan(before);
    // Every stored turn keeping its request's scope (20 kB of tools, 40 kB two-byte) or its whole
    // body would hold several MB beyond the estimate; the bodies sent total:
    expect(bodies).toBeGreaterThan(1_500_000);
    expect(freed, `freed ${freed} B, estimate ${estimate} B`).toBeLessThan(estimate * 1.1 + 64 * 1024);
  });
});
