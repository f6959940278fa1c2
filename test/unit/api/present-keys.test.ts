import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { ChatCompletionRequestObject, ChatCompletionRequestSchema, withSglangDefaults } from "../../../src/api/openai-schema.ts";
import { MAX_PICKED_SCHEMAS, PresentKeysReader } from "../../../src/api/present-keys.ts";
import { parseChatRequest } from "../../../src/api/validate.ts";

/** A value's JSON with key order and keys holding undefined kept (zod's output is compared as built). */
function exactly(v: unknown): string {
  return JSON.stringify(v, (_k, x: unknown) => (x === undefined ? "\u0000undefined" : x));
}

const FIELDS = Object.keys(ChatCompletionRequestObject.shape);

/** Values of every JSON kind, valid and invalid for the request's fields. */
const anyValue: fc.Arbitrary<unknown> = fc.oneof(
  fc.constantFrom(null, true, false, 0, 1, -1, 0.5, 2.5, 21, 1e6, -3, "", "auto", "none", "required", "text", "json_object", "x", "hi", "low", "priority", "\n"),
  fc.constantFrom(
    [],
    ["a"],
    [""],
    [1, 2],
    {},
    { type: "text" },
    { type: "json_schema", json_schema: { schema: { type: "object" } } },
    { type: "function", function: { name: "f" } },
    { include_usage: true },
    { enable_thinking: false },
    { "5": 1 },
    [{ type: "function", function: { name: "f", parameters: { type: "object" } } }],
  ),
);

const message = fc.oneof(
  fc.record({ role: fc.constantFrom("user", "User", "system", "assistant", "tool", "nobody"), content: fc.oneof(fc.string(), fc.constant(null), fc.constant([{ type: "text", text: "t" }]), fc.constant(7)) }),
  fc.record({ role: fc.constant("assistant"), content: fc.constant(null), tool_calls: fc.constant([{ function: { name: "f", arguments: "{}" } }]) }),
);

/** A request body: messages and model mostly there, any subset of the other fields, some unknown keys. */
const body = fc
  .record(
    {
      messages: fc.oneof(fc.array(message, { minLength: 1, maxLength: 3 }), anyValue),
      model: fc.oneof(fc.constant("qwen"), anyValue),
      extra: fc.dictionary(fc.constantFrom(...FIELDS, "unknown_key", "logprobs_extra"), anyValue, { maxKeys: 6 }),
    },
    { requiredKeys: ["extra"] },
  )
  .map(({ extra, ...rest }) => ({ ...rest, ...extra }) as Record<string, unknown>);

function agrees(reader: PresentKeysReader<typeof ChatCompletionRequestObject>, input: Record<string, unknown>): void {
  const whole = ChatCompletionRequestObject.safeParse(input);
  const read = reader.read(input);
  if (read === null) {
    // Not taken: the schema gives the verdict; only a refused body may be left to it.
    expect(whole.success).toBe(false);
    return;
  }
  expect(whole.success).toBe(true);
  expect(exactly(read)).toBe(exactly(whole.data));
  const full = ChatCompletionRequestSchema.safeParse(input);
  expect(exactly(withSglangDefaults(read))).toBe(exactly(full.data));
}

describe.each([
  ["compiled", false],
  ["jitless (as in workerd, which forbids eval)", true],
])("PresentKeysReader against the schema, zod %s", (_name, jitless) => {
  let before: boolean | undefined;
  beforeAll(() => {
    before = z.config().jitless;
    z.config({ jitless });
  });
  afterAll(() => {
    z.config({ jitless: before });
  });

  it("gives zod's output, key order and left-out keys included, for any subset of fields", () => {
    // A fresh reader every 16 bodies: each new set of fields is picked, none left to the schema for the bound.
    let reader = new PresentKeysReader(ChatCompletionRequestObject);
    let runs = 0;
    fc.assert(
      fc.property(body, (input) => {
        if (++runs % 16 === 0) reader = new PresentKeysReader(ChatCompletionRequestObject);
        agrees(reader, input);
      }),
      { numRuns: 1500 },
    );
  });

  it("takes the common bodies (so the fast path is what these tests check)", () => {
    const reader = new PresentKeysReader(ChatCompletionRequestObject);
    const bodies = [
      { model: "qwen", messages: [{ role: "user", content: "hi" }] },
      { model: "qwen", messages: [{ role: "user", content: "hi" }], max_tokens: 16, stream: true, stream_options: { include_usage: true } },
      { model: "qwen", messages: [{ role: "User", content: "hi" }], temperature: null, tools: [{ type: "function", function: { name: "f" } }], reasoning_effort: "low" },
    ];
    for (const b of bodies) {
      expect(reader.read(b)).not.toBeNull();
      agrees(reader, b);
    }
  });

  it("leaves refusals to the schema: a required field absent, a bad value, a bad message", () => {
    const reader = new PresentKeysReader(ChatCompletionRequestObject);
    for (const b of [{ model: "qwen" }, { messages: [{ role: "user", content: "hi" }] }, { model: "qwen", messages: [{ role: "user", content: "hi" }], n: 0 }, { model: "qwen", messages: [{ role: "nobody", content: "hi" }] }]) {
      expect(reader.read(b)).toBeNull();
      expect(ChatCompletionRequestObject.safeParse(b).success).toBe(false);
    }
  });
});

describe("PresentKeysReader's picked schemas", () => {
  it("stay bounded: past the bound a new set of fields is left to the schema, the held sets still read", () => {
    const reader = new PresentKeysReader(ChatCompletionRequestObject);
    const values: Record<string, unknown> = { min_tokens: 0, n: 1, ignore_eos: false, stream: false, logprobs: false, no_stop_trim: false };
    const keys = Object.keys(values);
    const bodyOf = (mask: number) => {
      const b: Record<string, unknown> = { model: "qwen", messages: [{ role: "user", content: "hi" }] };
      keys.forEach((k, i) => {
        if (mask & (1 << i)) b[k] = values[k];
      });
      return b;
    };
    // Every subset of six fields: more sets than the bound.
    expect(2 ** keys.length).toBeGreaterThan(MAX_PICKED_SCHEMAS);
    for (let mask = 0; mask < 2 ** keys.length; mask++) {
      const b = bodyOf(mask);
      const read = reader.read(b);
      if (mask < MAX_PICKED_SCHEMAS) agrees(reader, b);
      else {
        expect(read).toBeNull();
        expect(ChatCompletionRequestObject.safeParse(b).success).toBe(true);
      }
    }
    expect((reader as unknown as { picked: Map<string, unknown> }).picked.size).toBe(MAX_PICKED_SCHEMAS);
    for (let mask = 0; mask < MAX_PICKED_SCHEMAS; mask++) expect(reader.read(bodyOf(mask))).not.toBeNull();
  });
});

describe("parseChatRequest reads the request as the schema does", () => {
  it("gives the schema's output for accepted bodies", () => {
    fc.assert(
      fc.property(body, (input) => {
        const whole = ChatCompletionRequestSchema.safeParse(input);
        let got: unknown;
        try {
          got = parseChatRequest(JSON.stringify(input));
        } catch {
          return; // refused (by the schema or by validate.ts's own checks): errors are tested in openai-schema.test.ts
        }
        expect(whole.success).toBe(true);
        // JSON round trip: the body was sent as JSON (undefined members do not travel).
        expect(exactly(got)).toBe(exactly(ChatCompletionRequestSchema.parse(JSON.parse(JSON.stringify(input)))));
      }),
      { numRuns: 800 },
    );
  });
});
