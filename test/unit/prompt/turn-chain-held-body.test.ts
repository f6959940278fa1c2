/**
 * Held bodies: the turn chain keeps the bytes of a conversation's latest body up to its hit's
 * messages, and the next body's read (validate.ts readBody) takes that prefix's text instead of
 * decoding it. The text must be exactly the whole body's decoding (or the same refusal): checked
 * on conversations of non-ASCII, astral and U+FEFF text, then on bodies that share the held bytes
 * and go on with arbitrary bytes (invalid UTF-8, a U+FEFF's bytes right after the prefix, a
 * sequence cut short), bodies that differ inside the prefix, one byte-order-marked, and one over
 * the size limit. A held body serves only its own partition.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { httpStatusOf, type KvedgeError } from "../../../src/api/errors.ts";
import { readBody, type HeldPrefix } from "../../../src/api/validate.ts";
import { parseEdgeConfig } from "../../../src/config/config.ts";
import { parseChatTurn } from "../../../src/edge/chat/parse.ts";
import { TurnChainCache } from "../../../src/prompt/turn-chain.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { serveTwoTurns } from "../../helpers/held-conversation.ts";
import { framedBody, seededText } from "../../helpers/held-body-input.ts";

beforeAll(() => initHashing());

const config = parseEdgeConfig({ KVEDGE_ACCESS: "public", KVEDGE_TURN_CHECK_RATE: "0" });
const model = config.models[0]!;
const profile = { family: model.family, templateId: model.templateId };
const MAX_BODY = config.limits.maxBodyBytes;

const text = seededText;
const source = framedBody;

/** What decoding the whole body gives: its text, or the refusal's status. */
function reference(bytes: Uint8Array): string | number {
  if (bytes.length > MAX_BODY) return 413;
  try {
    return new TextDecoder("utf-8", { fatal: true, ignoreBOM: false }).decode(bytes);
  } catch {
    return 400;
  }
}

async function read(bytes: Uint8Array, held: HeldPrefix | null): Promise<{ out: string | number; heldBytes: number }> {
  try {
    const r = await readBody(source(bytes), config.limits, held);
    return { out: r.text, heldBytes: r.heldBytes };
  } catch (e) {
    return { out: httpStatusOf(e as KvedgeError), heldBytes: 0 };
  }
}

/** Parses and prepares `body` as the edge does (the read's bytes go with the lookup), so the chain may hold it. */
function serve(chain: TurnChainCache, body: string, bytes: Uint8Array, partition: string): void {
  const parsed = parseChatTurn(body, config, partition, { bytes }, chain);
  chain.prepare(parsed.req, body, profile, partition, { found: parsed.turn, validated: true });
}

const encode = (s: string) => new TextEncoder().encode(s);
const join = (...parts: Uint8Array[]) => {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
};

describe("held bodies", () => {
  it("decodes a growing conversation's bodies past the held prefix, each exactly as a whole decode", async () => {
    const chain = new TurnChainCache({ checkRate: 0 });
    const messages: { role: string; content: string }[] = [{ role: "system", content: text(1, 2000) }];
    let heldReads = 0;
    for (let turn = 0; turn < 8; turn++) {
      if (turn > 0) messages.push({ role: "assistant", content: text(100 + turn, 3000) });
      messages.push({ role: "user", content: text(200 + turn, 300) });
      const bytes = encode(JSON.stringify({ model: model.id, messages, max_tokens: 16 }));
      const { out, heldBytes } = await read(bytes, (b) => chain.heldBodyText(b, "tenant-a"));
      expect(out).toBe(reference(bytes));
      if (heldBytes > 0) heldReads++;
      // A body is held at its hit (the entry before the first query, then the entries through each
      // turn's query): from the fourth turn on, the text of all but the last two messages comes
      // from the previous body's bytes.
      const held = turn >= 2 ? encode(JSON.stringify({ model: model.id, messages: messages.slice(0, turn === 2 ? 1 : 2 * turn - 2) })).length - 2 : 0;
      expect(heldBytes).toBe(held);
      serve(chain, out as string, bytes, "tenant-a");
    }
    expect(heldReads).toBe(6);
    expect(chain.stats().heldBodies).toBe(6);
  });

  it("gives the whole decode's text or refusal for any bytes after the held prefix, and for bodies that differ inside it", async () => {
    const chain = new TurnChainCache({ checkRate: 0 });
    const messages = [
      { role: "system", content: text(7, 2000) },
      { role: "user", content: text(8, 400) },
      { role: "assistant", content: text(9, 2000) },
      { role: "user", content: text(10, 300) },
    ];
    // Two turns: the second hits the first's entry and holds its bytes up to the hit's messages.
    serveTwoTurns(chain, config, messages, "p");
    const base = encode(JSON.stringify({ model: model.id, messages }));
    const probe = chain.heldBodyText(join(base, encode(" ")), "p");
    expect(probe).not.toBeNull();
    const prefix = base.subarray(0, probe!.length);
    expect(probe!.head + probe!.gap.join("")).toBe(reference(prefix));
    let x = 12345;
    const rand = (n: number) => ((x = (Math.imul(x, 1103515245) + 12345) >>> 0) % n);
    const tails: Uint8Array[] = [
      encode(`,${JSON.stringify({ role: "user", content: text(11, 500) })}]}`),
      Uint8Array.of(0xef, 0xbb, 0xbf, 0x2c, 0x7b, 0x7d, 0x5d, 0x7d), // U+FEFF right after the prefix: text, kept
      Uint8Array.of(0xe2, 0x80), // a sequence cut short at the end
      Uint8Array.of(0x2c, 0xf0, 0x9f, 0x98), // a four-byte sequence cut short
      Uint8Array.of(0x80, 0x2c), // a continuation byte with no lead
      Uint8Array.of(0xed, 0xa0, 0x80), // an encoded surrogate
      Uint8Array.of(0xc0, 0xaf), // an overlong encoding
      base.subarray(probe!.length), // the rest of the held body itself
    ];
    for (let i = 0; i < 60; i++) tails.push(Uint8Array.from({ length: 1 + rand(40) }, () => (rand(4) === 0 ? 0x80 + rand(128) : 0x20 + rand(95))));
    const before = chain.stats().heldBodies;
    for (const tail of tails) {
      const bytes = join(prefix, tail);
      const { out, heldBytes } = await read(bytes, (b) => chain.heldBodyText(b, "p"));
      expect(out).toBe(reference(bytes));
      if (typeof out === "string") expect(heldBytes).toBe(prefix.length);
    }
    expect(chain.stats().heldBodies).toBe(before + tails.length);
    // Inside the prefix: a byte changed (into another character, or into invalid UTF-8, or the last
    // byte of a multi-byte character), and the prefix behind a byte order mark: decoded whole.
    const multi = prefix.findIndex((b) => b >= 0xc0);
    const changed: Uint8Array[] = [];
    for (const [at, to] of [[40, 0x41], [prefix.length - 1, 0x5d], [multi, 0xff], [multi + 1, 0x41], [multi + 1, 0xbf]] as const) {
      const b = join(prefix, tails[0]!);
      b[at] = to === b[at] ? to ^ 1 : to;
      changed.push(b);
    }
    changed.push(join(Uint8Array.of(0xef, 0xbb, 0xbf), prefix, tails[0]!));
    const heldBefore = chain.stats().heldBodies;
    for (const bytes of changed) {
      const { out, heldBytes } = await read(bytes, (b) => chain.heldBodyText(b, "p"));
      expect(out).toBe(reference(bytes));
      expect(heldBytes).toBe(0);
    }
    expect(chain.stats().heldBodies).toBe(heldBefore);
    // Over the size limit: refused before any read, held prefix or not.
    const big = join(prefix, new Uint8Array(MAX_BODY - prefix.length + 1).fill(0x20));
    expect((await read(big, (b) => chain.heldBodyText(b, "p"))).out).toBe(413);
  });

  it("serves a held body only to its own partition", async () => {
    const chain = new TurnChainCache({ checkRate: 0 });
    const messages = [
      { role: "system", content: text(20, 2000) },
      { role: "user", content: text(21, 400) },
      { role: "assistant", content: text(22, 2000) },
      { role: "user", content: text(23, 300) },
    ];
    serveTwoTurns(chain, config, messages, "owner");
    const next = encode(JSON.stringify({ model: model.id, messages: [...messages, { role: "assistant", content: "ok" }, { role: "user", content: "more" }] }));
    expect(chain.heldBodyText(next, "other")).toBeNull();
    expect(chain.heldBodyText(next, "")).toBeNull();
    expect(chain.heldBodyText(next, "owner")).not.toBeNull();
  });

  it("holds no ASCII prefix (its decode costs about what the join does), and a short prefix is not looked for", () => {
    const chain = new TurnChainCache({ checkRate: 0 });
    const ascii = (seed: number, chars: number) => text(seed, chars).replace(/[^\x00-\x7f]/g, "?");
    const messages = [
      { role: "system", content: ascii(40, 2000) },
      { role: "user", content: ascii(41, 400) },
      { role: "assistant", content: text(42, 2000) },
      { role: "user", content: text(43, 300) },
    ];
    serveTwoTurns(chain, config, messages, "");
    const next = encode(JSON.stringify({ model: model.id, messages: [...messages, { role: "assistant", content: "ok" }, { role: "user", content: "more" }] }));
    expect(chain.heldBodyText(next, "")).toBeNull();
    // The same conversation with a non-ASCII character in its system message: held.
    const wide = new TurnChainCache({ checkRate: 0 });
    messages[0] = { role: "system", content: `${ascii(40, 2000)}é` };
    serveTwoTurns(wide, config, messages, "");
    const held = encode(JSON.stringify({ model: model.id, messages: [...messages, { role: "assistant", content: "ok" }, { role: "user", content: "more" }] }));
    expect(wide.heldBodyText(held, "")).not.toBeNull();
    // A body more than 2^3 times as long as the held prefix: not looked for.
    const long = encode(JSON.stringify({ model: model.id, messages: [...messages, { role: "assistant", content: "x".repeat(20 * held.length) }, { role: "user", content: "more" }] }));
    expect(wide.heldBodyText(long, "")).toBeNull();
  });

  it("counts a held body in the chain's bytes: the body's buffer when it ends soon after the prefix, else a copy of the prefix", () => {
    // [system, user, assistant, user]; the second body's hit holds its bytes up to the system message.
    const held = (messages: { role: string; content: string }[]) => {
      const first = encode(JSON.stringify({ model: model.id, messages: messages.slice(0, 2) }));
      const second = encode(JSON.stringify({ model: model.id, messages }));
      const chain = new TurnChainCache({ checkRate: 0 });
      serve(chain, reference(first) as string, first, "");
      const parsed = parseChatTurn(reference(second) as string, config, "", {}, chain);
      chain.prepare(parsed.req, reference(second) as string, profile, "", { found: parsed.turn, validated: true });
      const without = chain.stats().bytes;
      chain.clear();
      serve(chain, reference(first) as string, first, "");
      serve(chain, reference(second) as string, second, "");
      const prefix = encode(JSON.stringify({ model: model.id, messages: messages.slice(0, 1) })).length - 2;
      return { counted: chain.stats().bytes - without, prefix, body: second.length };
    };
    // A short reply and question after a long history: the view of the body's buffer is kept, counted whole.
    const near = held([
      { role: "system", content: text(30, 3000) },
      { role: "user", content: text(31, 150) },
      { role: "assistant", content: text(32, 100) },
      { role: "user", content: text(33, 100) },
    ]);
    expect(near.body).toBeLessThan(near.prefix * 1.25);
    expect(near.counted).toBeGreaterThanOrEqual(near.body);
    expect(near.counted).toBeLessThan(near.body + 2_000);
    // A long new turn (an image's data URL, a pasted file): only a copy of the prefix is kept and counted.
    const far = held([
      { role: "system", content: text(30, 300) },
      { role: "user", content: text(31, 400) },
      { role: "assistant", content: text(32, 2000) },
      { role: "user", content: text(33, 3000) },
    ]);
    expect(far.body).toBeGreaterThan(far.prefix * 2);
    expect(far.counted).toBeGreaterThanOrEqual(far.prefix);
    expect(far.counted).toBeLessThan(far.prefix + 2_000);
  });

  it("a hit whose new message carries a large image keeps its prefix, not the image, and evicts no other tenant's entries", () => {
    const chain = new TurnChainCache({ checkRate: 0, maxBytes: 4 << 20 });
    const conversation = (seed: number, turns: number, last: unknown = text(seed + 9, 200)) => {
      const messages: { role: string; content: unknown }[] = [{ role: "system", content: text(seed, 1500) }];
      for (let i = 0; i < turns; i++) messages.push({ role: "user", content: text(seed + 1 + i, 500) }, { role: "assistant", content: text(seed + 5 + i, 1500) });
      messages.push({ role: "user", content: last });
      return encode(JSON.stringify({ model: model.id, messages }));
    };
    for (let t = 0; t < 30; t++) for (const turns of [0, 1, 2]) {
      const bytes = conversation(100 * t, turns);
      serve(chain, reference(bytes) as string, bytes, `tenant-${t}`);
    }
    const before = chain.stats();
    expect(before.evictions).toBe(0);
    // Another tenant's second turn sends a 3 MB data URL (under the request limit, over the chain's quarter).
    const first = conversation(7000, 0);
    serve(chain, reference(first) as string, first, "other");
    const image = [{ type: "text", text: "look" }, { type: "image_url", image_url: { url: `data:image/png;base64,${"A".repeat(3 << 20)}` } }];
    const big = conversation(7000, 1, image);
    serve(chain, reference(big) as string, big, "other");
    const after = chain.stats();
    expect(after.evictions).toBe(0);
    expect(after.entries).toBeGreaterThan(before.entries);
    expect(after.bytes - before.bytes).toBeLessThan(1 << 20);
    // Its prefix is held all the same: the next turn's body reads it.
    expect(chain.heldBodyText(conversation(7000, 2), "other")).not.toBeNull();
  });

  it("holds no body whose kept bytes are over a quarter of the budget, and keeps the conversation's earlier held body then", () => {
    const chain = new TurnChainCache({ checkRate: 0, maxBytes: 2 << 20 });
    // Three-byte characters: the held bytes grow faster than the entries' two-byte text.
    const cjk = (seed: number, chars: number) => `${seed}:${"日本語の文章です。".repeat(Math.ceil(chars / 9)).slice(0, chars)}`;
    const messages: { role: string; content: string }[] = [{ role: "system", content: cjk(1, 30_000) }];
    const prefixOf = (n: number) => encode(JSON.stringify({ model: model.id, messages: messages.slice(0, n) })).length - 2;
    const quarter = (2 << 20) / 4;
    const sizes: number[] = [];
    for (let turn = 0; turn < 7; turn++) {
      if (turn > 0) messages.push({ role: "assistant", content: cjk(10 + turn, turn < 6 ? 30_000 : 100) });
      messages.push({ role: "user", content: cjk(20 + turn, 100) });
      const bytes = encode(JSON.stringify({ model: model.id, messages }));
      sizes.push(bytes.length);
      serve(chain, reference(bytes) as string, bytes, "p");
    }
    // Turn 4 held its hit's 8 messages (through turn 3's query) in its body's buffer; turns 5 and 6
    // would keep buffers (their prefixes of 10 and 12 messages, over 0.8 of the body: not copied)
    // over a quarter.
    expect(sizes[4]).toBeLessThan(quarter);
    expect(prefixOf(10)).toBeGreaterThan(0.8 * sizes[5]!);
    expect(sizes[5]).toBeGreaterThan(quarter);
    const next = encode(JSON.stringify({ model: model.id, messages: [...messages, { role: "assistant", content: "ok" }, { role: "user", content: "more" }] }));
    expect(chain.heldBodyText(next, "p")?.length).toBe(prefixOf(8));
    expect(chain.stats().evictions).toBe(0);
  });

  it("an agent loop (each step ends with a tool result) keeps one held body: each step's body replaces the one before", () => {
    const tools = [{ type: "function", function: { name: "read_file", parameters: { type: "object", properties: {} } } }];
    // Non-ASCII tool output (an ASCII prefix is not held); `withBytes` false serves the same bodies unheld.
    const loop = (withBytes: boolean) => {
      const chain = new TurnChainCache({ checkRate: 0 });
      const messages: unknown[] = [{ role: "system", content: "agent" }, { role: "user", content: "Fix the bug — naïve." }];
      let last = 0;
      for (let k = 1; k <= 16; k++) {
        messages.push({ role: "assistant", content: "", tool_calls: [{ id: `c${k}`, type: "function", function: { name: "read_file", arguments: `{"p":"${k}"}` } }] }, { role: "tool", tool_call_id: `c${k}`, content: `日本語 output ${k} `.repeat(400) });
        const bytes = encode(JSON.stringify({ model: model.id, tools, messages, max_tokens: 8 }));
        const parsed = parseChatTurn(reference(bytes) as string, config, "", withBytes ? { bytes } : {}, chain);
        chain.prepare(parsed.req, reference(bytes) as string, profile, "", { found: parsed.turn, validated: true });
        last = bytes.length;
      }
      return { chain, bytes: chain.stats().bytes, last, messages };
    };
    const held = loop(true);
    const heldBytes = held.bytes - loop(false).bytes;
    // Step 16 held its hit's prefix (through step 15's tool result), under its body's length; earlier steps' bodies went.
    expect(heldBytes).toBeGreaterThan(0);
    expect(heldBytes).toBeLessThan(held.last + 2_000);
    // A branch from step 8 (another tool result) finds no body held along it.
    const branch = encode(JSON.stringify({ model: model.id, tools, messages: [...held.messages.slice(0, 2 + 2 * 8), { role: "user", content: "stop" }] }));
    expect(held.chain.heldBodyText(branch, "")).toBeNull();
  });

  it("an agent loop of parallel calls whose results come one request at a time keeps one held body", () => {
    const tools = [{ type: "function", function: { name: "read_file", parameters: { type: "object", properties: {} } } }];
    // Each request's held body goes on from the entry through the step's calls, which the next
    // result's request hits: each body replaces the one before.
    const loop = (withBytes: boolean) => {
      const chain = new TurnChainCache({ checkRate: 0 });
      const messages: unknown[] = [{ role: "system", content: "agent" }, { role: "user", content: "Fix the bug — naïve." }];
      let last = 0;
      for (let k = 1; k <= 12; k++) {
        messages.push({ role: "assistant", content: "", tool_calls: [0, 1, 2].map((i) => ({ id: `c${k}_${i}`, type: "function", function: { name: "read_file", arguments: `{"p":"${k}"}` } })) });
        for (let i = 0; i < 3; i++) {
          messages.push({ role: "tool", tool_call_id: `c${k}_${i}`, content: `日本語 output ${k}.${i} `.repeat(200) });
          const bytes = encode(JSON.stringify({ model: model.id, tools, messages, max_tokens: 8 }));
          const parsed = parseChatTurn(reference(bytes) as string, config, "", withBytes ? { bytes } : {}, chain);
          chain.prepare(parsed.req, reference(bytes) as string, profile, "", { found: parsed.turn, validated: true });
          last = bytes.length;
        }
      }
      return { bytes: chain.stats().bytes, last };
    };
    const held = loop(true);
    const heldBytes = held.bytes - loop(false).bytes;
    // The last request held its hit's prefix (through the step's second result), under its body's length.
    expect(heldBytes).toBeGreaterThan(0);
    expect(heldBytes).toBeLessThan(held.last + 2_000);
  });

  it("conversations sharing a system prompt: each reads its own longest held prefix, and one going on keeps the shared body another relies on", async () => {
    const chain = new TurnChainCache({ checkRate: 0 });
    // ~10 kB of shared system prompt: both conversations' held prefixes list under the same window of it.
    const system = `${"You are a helpful agent. ".repeat(400)}é`;
    const chats = [0, 1].map(() => [{ role: "system", content: system }] as { role: string; content: string }[]);
    const prefixOf = (messages: { role: string; content: string }[]) => encode(JSON.stringify({ model: model.id, messages })).length - 2;
    const turn = async (c: number, t: number) => {
      const messages = chats[c]!;
      if (t > 0) messages.push({ role: "assistant", content: `answer ${c}.${t} ${"z".repeat(1500 + 37 * c + 11 * t)}` });
      messages.push({ role: "user", content: `question ${c}.${t} ${"q".repeat(300 + 13 * c)}` });
      const bytes = encode(JSON.stringify({ model: model.id, messages }));
      const { out, heldBytes } = await read(bytes, (b) => chain.heldBodyText(b, "one-key"));
      expect(out).toBe(reference(bytes));
      serve(chain, out as string, bytes, "one-key");
      return heldBytes;
    };
    for (let t = 0; t < 3; t++) await turn(0, t);
    // One body per conversation: its earlier (shorter) held prefixes went when it held the newest.
    const earlier = encode(JSON.stringify({ model: model.id, messages: [...chats[0]!.slice(0, 2), { role: "assistant", content: "another reply" }, { role: "user", content: "and on" }] }));
    expect(chain.heldBodyText(earlier, "one-key")).toBeNull();
    // Another user of the same key starts a conversation: its hit (the system prompt) holds a shorter body under the same window.
    expect(await turn(1, 0)).toBe(0);
    // The first conversation reads its own, longer prefix; going on, it leaves the shared body held.
    // (Turn t reads what turn t - 1 held: its hit, the messages through turn t - 2's query, or
    // before it when turn t - 2 had no hit or added only its query.)
    expect(await turn(0, 3)).toBe(prefixOf(chats[0]!.slice(0, 4)));
    expect(await turn(1, 1)).toBe(prefixOf(chats[1]!.slice(0, 1)));
    expect(await turn(1, 2)).toBe(prefixOf(chats[1]!.slice(0, 1)));
    // The second went on past the system prompt: its body there went too.
    const fresh = encode(JSON.stringify({ model: model.id, messages: [{ role: "system", content: system }, { role: "user", content: "hello" }, { role: "assistant", content: "hi" }, { role: "user", content: "more" }] }));
    expect(chain.heldBodyText(fresh, "one-key")).toBeNull();
    expect(await turn(1, 3)).toBe(prefixOf(chats[1]!.slice(0, 4)));
    expect(await turn(0, 4)).toBe(prefixOf(chats[0]!.slice(0, 6)));
  });
});
