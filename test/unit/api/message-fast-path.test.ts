/**
 * The guard of message-fast-path.ts: for every list it accepts, its answer is exactly zod's
 * (deep and strictly equal, same key order); every list zod refuses it declines. Checked over
 * generated messages: valid, near-valid (a wrong type, an extra or null key, an upper-case role,
 * a bad URL) and hostile (__proto__ keys, huge and unusual unicode strings, arbitrary values).
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { fastMessages } from "../../../src/api/message-fast-path.ts";
import { ChatCompletionRequestObject, ChatCompletionRequestSchema } from "../../../src/api/openai-schema.ts";
import { parseChatRequest } from "../../../src/api/validate.ts";

const MessagesSchema = ChatCompletionRequestObject.shape.messages;

const ROLES = ["user", "user", "user", "assistant", "assistant", "system", "developer", "tool", "function", "latest_reminder", "User", "ASSISTANT", "bot", "", "__proto__", "constructor"];
const URLS = ["https://a.example/x.png", "http://b/c", "data:image/png;base64,iVBO", "data:,", "HTTPS://A/b", "ftp://x/y", "", "https:// x", " https://a", "data:nocomma", "https://", "javascript:alert(1)"];
const HUGE = "é\u{1F600}\n\"\\".repeat(40_000);

/** A string: ordinary, unicode (lone surrogates included), huge, or a key-like word. */
const text = fc.oneof({ arbitrary: fc.string(), weight: 6 }, fc.string({ unit: "grapheme" }), fc.string({ unit: "binary" }), fc.constant(HUGE), fc.constantFrom("__proto__", "auto", "text"));
/** A value of the wrong type, or of a type zod reads some other way. */
const odd = fc.oneof(fc.constant(null), fc.constant(undefined), fc.integer(), fc.boolean(), fc.constant([]), fc.constant({}), fc.anything());

/** An object with these members, some left out, maybe an extra one (a `__proto__` own key included). */
function record(members: Record<string, fc.Arbitrary<unknown>>, requiredKeys: string[]) {
  const extra = fc.option(fc.tuple(fc.constantFrom("foo", "__proto__", "uuid", "modalities", "name", "Content", "role"), fc.oneof(text, odd)), { freq: 2 });
  return fc.tuple(fc.record(members, { requiredKeys }), extra).map(([r, e]) => {
    const o: Record<string, unknown> = { ...r };
    if (e) Object.defineProperty(o, e[0], { value: e[1], enumerable: true, writable: true, configurable: true });
    return o;
  });
}

const imagePart = record(
  {
    type: fc.oneof({ arbitrary: fc.constant("image_url"), weight: 6 }, fc.constantFrom("video_url", "Image_url")),
    image_url: fc.oneof(
      { arbitrary: record({ url: fc.oneof({ arbitrary: fc.constantFrom(...URLS), weight: 4 }, text), detail: fc.oneof({ arbitrary: fc.constantFrom("auto", "low", "high", "AUTO", "medium"), weight: 4 }, odd) }, ["url"]), weight: 6 },
      odd,
    ),
  },
  ["type", "image_url"],
);
const textPart = record({ type: fc.oneof({ arbitrary: fc.constant("text"), weight: 6 }, fc.constantFrom("thinking", "Text")), text: fc.oneof({ arbitrary: text, weight: 6 }, odd) }, ["type", "text"]);
const content = fc.oneof({ arbitrary: text, weight: 4 }, { arbitrary: fc.array(fc.oneof(textPart, imagePart), { maxLength: 4 }), weight: 4 }, fc.constant(null), odd);
const message = fc.oneof(
  { arbitrary: record({ role: fc.constantFrom(...ROLES), content }, ["role", "content"]), weight: 4 },
  record({ role: fc.constantFrom(...ROLES), content }, ["role", "content"]),
  record({ role: fc.constantFrom(...ROLES), content, tool_call_id: fc.oneof(text, odd), name: fc.oneof(text, odd), reasoning_content: fc.oneof(text, odd) }, ["role"]),
  fc.anything(),
);
const messages = fc.oneof({ arbitrary: fc.array(message, { minLength: 1, maxLength: 2 }), weight: 4 }, fc.array(message, { maxLength: 5 }), odd);

/** Near-valid: each member from a small pool of values zod accepts and values it refuses, most often left as valid. */
function rarely<T>(arb: fc.Arbitrary<T>) {
  return fc.oneof({ arbitrary: fc.constant(undefined), weight: 5 }, { arbitrary: arb, weight: 1 });
}
/** An object of the members given a value (undefined: left out). */
function members(o: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined));
}
const nearImage = fc
  .tuple(fc.constantFrom(...URLS, null), rarely(fc.constantFrom("auto", "low", "high", "AUTO", null)), rarely(fc.constantFrom("image", null)), rarely(fc.constantFrom("u", null)), rarely(fc.constantFrom("video_url", "Image_url")))
  .map(([url, detail, modalities, uuid, type]) => members({ type: type ?? "image_url", image_url: members({ url, detail }), modalities, uuid }));
const nearText = fc.tuple(rarely(fc.constantFrom("Text", "thinking")), fc.constantFrom("a", "", null, 1)).map(([type, text]) => members({ type: type ?? "text", text }));
const nearMessage = fc
  .tuple(
    fc.constantFrom(...ROLES),
    fc.oneof(fc.constantFrom("hi", "", null, 3, undefined), fc.array(fc.oneof(nearText, nearImage), { maxLength: 3 })),
    rarely(fc.constantFrom("x", null, 1)),
    rarely(fc.constantFrom("x", "", null)),
  )
  .map(([role, content, tool_call_id, name]) => members({ role, content, tool_call_id, name }));

/** As JSON.parse gives it (own `__proto__` keys kept), or the value itself where it has no JSON text. */
function viaJson(v: unknown): unknown {
  try {
    const s = JSON.stringify(v);
    return s === undefined ? v : JSON.parse(s);
  } catch {
    return v;
  }
}

/** fastMessages agrees with zod on `list`; returns whether it accepted. */
function agrees(list: unknown): boolean {
  const fast = fastMessages(list);
  const zod = MessagesSchema.safeParse(list);
  if (fast === null) return false;
  expect(zod.success).toBe(true);
  expect(fast).toStrictEqual(zod.data);
  expect(JSON.stringify(fast)).toBe(JSON.stringify(zod.data));
  return true;
}

describe("fastMessages mirrors zod's messages schema", () => {
  it("answers exactly zod's output for every list it accepts, and declines every list zod refuses", () => {
    let accepted = 0;
    let runs = 0;
    fc.assert(
      fc.property(messages, (list) => {
        runs += 2;
        if (agrees(list)) accepted++;
        if (agrees(viaJson(list))) accepted++;
      }),
      { numRuns: 2000 },
    );
    // Not vacuous: the generators reach the fast path's shapes (~3 % of these mostly refused lists: ~115 of 4000).
    expect(accepted).toBeGreaterThan(runs / 80);
  });

  it("agrees with zod on near-valid messages, one member off at a time", () => {
    let accepted = 0;
    fc.assert(
      fc.property(fc.array(nearMessage, { minLength: 1, maxLength: 2 }), (list) => {
        if (agrees(list)) accepted++;
      }),
      { numRuns: 3000 },
    );
    expect(accepted).toBeGreaterThan(30);
  });

  it("accepts the common shapes (a chat turn, a vision message) with zod's defaults", () => {
    const list = [
      { role: "system", content: "Be brief." },
      { role: "user", content: [{ type: "text", text: "What is this?" }, { type: "image_url", image_url: { url: "https://a.example/x.png" } }] },
      { role: "assistant", content: "A cat." },
      { role: "tool", content: "42", tool_call_id: "call_1" },
      { role: "assistant", content: null },
    ];
    expect(agrees(list)).toBe(true);
    expect(fastMessages(list)![1]).toStrictEqual({ role: "user", content: [{ type: "text", text: "What is this?" }, { type: "image_url", image_url: { url: "https://a.example/x.png", detail: "auto" }, modalities: "image" }] });
  });

  it("declines what it does not mirror, so zod reads it", () => {
    for (const m of [
      { role: "User", content: "x" },
      { role: "user", content: "x", name: "bob" },
      { role: "assistant", content: "x", name: null },
      { role: "user", content: [{ type: "image_url", image_url: { url: "https://a/b" }, uuid: "u" }] },
      { role: "user", content: [{ type: "image_url", image_url: { url: "ftp://a/b" } }] },
      { role: "assistant", content: [{ type: "thinking", thinking: "hm" }] },
      { role: "user" },
      JSON.parse('{"role":"user","content":"x","__proto__":{"a":1}}'),
    ]) {
      expect(fastMessages([m])).toBeNull();
    }
    expect(fastMessages([])).toBeNull();
  });
});

describe("parseChatRequest with the fast path", () => {
  const others = fc.record(
    {
      max_tokens: fc.oneof(fc.integer({ min: -2, max: 50 }), fc.constant(null), fc.constant("7")),
      temperature: fc.oneof(fc.double({ min: -1, max: 3, noNaN: true }), fc.constant(null)),
      stream: fc.oneof(fc.boolean(), fc.constant("yes")),
      user: fc.oneof(fc.string(), fc.integer()),
      extra_field: fc.string(),
    },
    { requiredKeys: [] },
  );
  it("gives the whole schema's verdict and output for bodies of fast-path messages", () => {
    const valid = fc.array(
      fc.oneof(
        fc.record({ role: fc.constantFrom("user", "assistant", "system"), content: fc.string() }),
        fc.record({ role: fc.constant("user"), content: fc.array(fc.oneof(fc.record({ type: fc.constant("text"), text: fc.string() }), fc.record({ type: fc.constant("image_url"), image_url: fc.record({ url: fc.constantFrom(...URLS.slice(0, 4)) }) })), { maxLength: 3 }) }),
      ),
      { minLength: 1, maxLength: 4 },
    );
    fc.assert(
      fc.property(valid, fc.constantFrom("m", "", 3), others, (msgs, model, rest) => {
        expect(fastMessages(msgs)).not.toBeNull();
        const body = JSON.stringify({ model, messages: msgs, ...rest });
        const zod = ChatCompletionRequestSchema.safeParse(JSON.parse(body));
        let got: unknown = null;
        let refused: unknown = null;
        try {
          got = parseChatRequest(body);
        } catch (e) {
          refused = e;
        }
        if (!zod.success) {
          expect(refused).not.toBeNull();
          const issue = zod.error.issues[0]!;
          expect((refused as { param?: unknown }).param ?? null).toBe(issue.path.length > 0 ? issue.path.map((k) => (typeof k === "number" ? `[${k}]` : k)).join(".").replace(/\.\[/g, "[") : null);
        } else if (refused === null) {
          expect(got).toStrictEqual(zod.data);
        }
      }),
      { numRuns: 600 },
    );
  });
});
