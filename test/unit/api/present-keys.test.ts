import fc from "fast-check";
import { beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { ChatCompletionRequestObject } from "../../../src/api/openai-schema.ts";
import { MAX_PICKED_SCHEMAS, PresentKeysReader } from "../../../src/api/present-keys.ts";
import { compilesDuring, modulesUnderZodMode, ZOD_MODES } from "../../helpers/zod-compiles.ts";

/** A value's JSON with key order and keys holding undefined kept (zod's output is compared as built). */
function exactly(v: unknown): string {
  return JSON.stringify(v, (_k, x: unknown) => (x === undefined ? "\u0000undefined" : x));
}

/** What the client gets of an error. */
function errorFields(e: unknown): { name: string; message: string; param: unknown; code: unknown } {
  const x = e as { constructor: { name: string }; message: string; param?: unknown; code?: unknown };
  return { name: x.constructor.name, message: x.message, param: x.param, code: x.code };
}

const FIELDS = Object.keys(ChatCompletionRequestObject.shape);

/** Values of every JSON kind, valid and invalid for the request's fields. */
const VALUES: readonly unknown[] = [
  ...[null, true, false, 0, 1, -1, 0.5, 2.5, 21, 1e6, -3, "", "auto", "none", "required", "text", "json_object", "x", "hi", "low", "priority", "\n"],
  ...[[], ["a"], [""], [1, 2], {}, { type: "text" }, { type: "json_schema", json_schema: { schema: { type: "object" } } }, { type: "function", function: { name: "f" } }],
  ...[{ include_usage: true }, { enable_thinking: false }, { "5": 1 }, [{ type: "function", function: { name: "f", parameters: { type: "object" } } }]],
];
const anyValue = fc.constantFrom(...VALUES);

/** Of VALUES, those each field takes (asked alone); found here, before any test counts compiles. */
const TAKEN = new Map(
  Object.entries(ChatCompletionRequestObject.shape as Record<string, z.ZodType>).map(([field, schema]) => {
    const alone = z.object({ [field]: schema });
    return [field, VALUES.filter((v) => alone.safeParse({ [field]: v }).success)];
  }),
);

/** A value for `field`: mostly one the field takes, else any. */
function valueFor(field: string): fc.Arbitrary<unknown> {
  const taken = TAKEN.get(field) ?? [];
  return taken.length === 0 ? anyValue : fc.oneof({ arbitrary: fc.constantFrom(...taken), weight: 12 }, { arbitrary: anyValue, weight: 1 });
}

const message = fc.oneof(
  { arbitrary: fc.record({ role: fc.constantFrom("user", "User", "system", "assistant"), content: fc.string() }), weight: 4 },
  fc.record({ role: fc.constantFrom("user", "User", "system", "assistant", "tool", "nobody"), content: fc.oneof(fc.string(), fc.constant(null), fc.constant([{ type: "text", text: "t" }]), fc.constant(7)) }),
  fc.record({ role: fc.constant("assistant"), content: fc.constant(null), tool_calls: fc.constant([{ function: { name: "f", arguments: "{}" } }]) }),
);

/** A request body: messages and model mostly there, any subset of `fields`, some unknown keys. */
function bodyOver(fields: readonly string[]): fc.Arbitrary<Record<string, unknown>> {
  return fc
    .record(
      {
        messages: fc.oneof({ arbitrary: fc.array(message, { minLength: 1, maxLength: 3 }), weight: 4 }, { arbitrary: anyValue, weight: 1 }),
        model: fc.oneof({ arbitrary: fc.constant("qwen"), weight: 4 }, { arbitrary: anyValue, weight: 1 }),
        extra: fc
          .uniqueArray(fc.constantFrom(...fields, "unknown_key", "logprobs_extra"), { maxLength: 6 })
          .chain((keys) => fc.tuple(...keys.map(valueFor)).map((values) => keys.map((k, i) => [k, values[i]] as const))),
      },
      { requiredKeys: ["extra"] },
    )
    .map(({ extra, ...rest }) => ({ ...rest, ...Object.fromEntries(extra) }) as Record<string, unknown>);
}

const body = bodyOver(FIELDS);
/** Bodies over four fields: at most 16 sets of fields, so a reader never passes its bound on them. */
const fewSetsBody = bodyOver(["n", "tools", "tool_choice", "response_format"]);

/** The modules under test, imported afresh (so their schemas are built under the zod config of the moment). */
async function importModules() {
  return {
    schema: await import("../../../src/api/openai-schema.ts"),
    keys: await import("../../../src/api/present-keys.ts"),
    validate: await import("../../../src/api/validate.ts"),
  };
}
type Modules = Awaited<ReturnType<typeof importModules>>;

/** The reader's answer against the whole schema's: the same output, or the same issues in the same order. */
function agrees(m: Modules, reader: PresentKeysReader<typeof ChatCompletionRequestObject>, input: Record<string, unknown>): void {
  const whole = m.schema.ChatCompletionRequestObject.safeParse(input);
  const read = reader.read(input);
  expect(read).not.toBeNull();
  if (!whole.success) {
    expect(read!.success).toBe(false);
    expect(exactly(read!.error!.issues)).toBe(exactly(whole.error.issues));
    return;
  }
  expect(read!.success).toBe(true);
  expect(exactly(read!.data)).toBe(exactly(whole.data));
  const full = m.schema.ChatCompletionRequestSchema.safeParse(input);
  expect(exactly(m.schema.withSglangDefaults(read!.data!))).toBe(exactly(full.data));
}

describe.each(ZOD_MODES)("PresentKeysReader against the schema, zod %s", (_name, jitless) => {
  // Schema and reader alike are imported afresh under the mode.
  const loaded = modulesUnderZodMode(jitless, importModules);
  let m: Modules;
  beforeAll(() => {
    m = loaded();
  });

  it("gives zod's output (key order and left-out keys included) or zod's issues (in order), for any subset of fields", () => {
    // A fresh reader every 16 bodies: each new set of fields is picked, none left to the schema for the bound.
    let reader = new m.keys.PresentKeysReader(m.schema.ChatCompletionRequestObject);
    let runs = 0;
    let refused = 0;
    const compiles = compilesDuring(() =>
      fc.assert(
        fc.property(body, (input) => {
          if (++runs % 16 === 0) reader = new m.keys.PresentKeysReader(m.schema.ChatCompletionRequestObject);
          if (!m.schema.ChatCompletionRequestObject.safeParse(input).success) refused++;
          agrees(m, reader, input);
        }),
        { numRuns: 1500 },
      ),
    );
    expect(refused).toBeGreaterThan(300);
    expect(runs - refused).toBeGreaterThan(300);
    // Both sides ran as configured: compiled parsers (the schema's and the picks') or none at all.
    if (jitless) expect(compiles).toBe(0);
    else expect(compiles).toBeGreaterThan(0);
  });

  it("takes the common bodies (so the fast path is what these tests check)", () => {
    const reader = new m.keys.PresentKeysReader(m.schema.ChatCompletionRequestObject);
    const bodies = [
      { model: "qwen", messages: [{ role: "user", content: "hi" }] },
      { model: "qwen", messages: [{ role: "user", content: "hi" }], max_tokens: 16, stream: true, stream_options: { include_usage: true } },
      { model: "qwen", messages: [{ role: "User", content: "hi" }], temperature: null, tools: [{ type: "function", function: { name: "f" } }], reasoning_effort: "low" },
    ];
    for (const b of bodies) {
      expect(reader.read(b)?.success).toBe(true);
      agrees(m, reader, b);
    }
  });

  it("refuses as the schema does, with its issues: a required field absent, a bad value, a bad message, several at once", () => {
    const reader = new m.keys.PresentKeysReader(m.schema.ChatCompletionRequestObject);
    const refusals = [
      { model: "qwen" },
      { messages: [{ role: "user", content: "hi" }] },
      { model: "qwen", messages: [{ role: "user", content: "hi" }], n: 0 },
      { model: "qwen", messages: [{ role: "nobody", content: "hi" }] },
      { model: 1, messages: [{ role: "user", content: 7 }], n: 0, tools: [{}], temperature: "hot" },
    ];
    for (const b of refusals) {
      expect(reader.read(b)?.success).toBe(false);
      agrees(m, reader, b);
    }
  });

  // parseChatRequest's own reader is held by validate.ts (bounded per module): bodies of few sets of
  // fields first, so their refusals are all the reader's; then any body, past the bound too.
  it.each([
    ["of few sets of fields", fewSetsBody],
    ["of any fields", body],
  ])("parseChatRequest gives the schema's output, or its error (message, param, code), for bodies %s", (_kind, bodies) => {
    let refused = 0;
    fc.assert(
      fc.property(bodies, (input) => {
        // JSON round trip: the body is sent as JSON (undefined members do not travel).
        const sent = JSON.parse(JSON.stringify(input)) as Record<string, unknown>;
        const whole = m.schema.ChatCompletionRequestSchema.safeParse(sent);
        let got: unknown;
        let error: unknown = null;
        try {
          got = m.validate.parseChatRequest(JSON.stringify(input));
        } catch (e) {
          error = e;
        }
        if (!whole.success) {
          refused++;
          expect(errorFields(error)).toEqual(errorFields(m.validate.issueToError(whole.error.issues)));
        } else if (error === null) expect(exactly(got)).toBe(exactly(whole.data));
        // else refused by validate.ts's own checks after the schema (tools, limits): openai-schema.test.ts
      }),
      { numRuns: 800 },
    );
    expect(refused).toBeGreaterThan(100);
  });
});

describe("PresentKeysReader's picked schemas", () => {
  it("stay bounded: past the bound a new set of fields is left to the schema, the held sets still read", async () => {
    const m = await importModules();
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
      if (mask < MAX_PICKED_SCHEMAS) agrees(m, reader, b);
      else {
        expect(reader.read(b)).toBeNull();
        expect(ChatCompletionRequestObject.safeParse(b).success).toBe(true);
      }
    }
    expect((reader as unknown as { picked: Map<string, unknown> }).picked.size).toBe(MAX_PICKED_SCHEMAS);
    for (let mask = 0; mask < MAX_PICKED_SCHEMAS; mask++) expect(reader.read(bodyOf(mask))?.success).toBe(true);
  });
});

describe("PresentKeysReader refuses, when built, a schema it would not read as zod does", () => {
  let k = 0;
  it.each<[string, () => z.ZodType, RegExp]>([
    // A loose object keeps unknown keys, a strict one refuses them: the reader's picks saw only the fields.
    ["a loose object", () => z.looseObject({ a: z.string() }), /catchall \(unknown; loose or strict object\)/],
    ["a strict object", () => z.strictObject({ a: z.string() }), /catchall \(never; loose or strict object\)/],
    ["an object with a typed catchall", () => z.object({ a: z.string() }).catchall(z.number()), /catchall \(number/],
    // zod's pick throws a plain Error on these, which parseChatRequest would answer as "Invalid request body."
    ["a refined object", () => z.object({ a: z.string() }).refine((o) => o.a !== "bad"), /checks of its own/],
    ["a superRefined object", () => z.object({ a: z.string() }).superRefine(() => undefined), /checks of its own/],
    // The reader would give the first answer forever.
    ["a default computed per parse", () => z.object({ a: z.string(), id: z.number().default(() => ++k) }), /field 'id' answers differently when absent/],
    ["a catch computed per parse", () => z.object({ a: z.string(), at: z.number().catch(() => ++k) }), /field 'at' answers differently when absent/],
    ["a symbol key", () => z.object({ a: z.string(), [Symbol("s")]: z.string() }), /symbol key/],
    ["a transformed object", () => z.object({ a: z.string() }).transform((o) => o), /expected a zod object, got a pipe/],
  ])("%s", (_name, schema, why) => {
    expect(() => new PresentKeysReader(schema() as z.ZodObject)).toThrow(why);
  });

  it("takes a plain strip object, constant and object defaults included, and reads it as zod does", () => {
    const schema = z.object({
      a: z.string(),
      b: z.number().default(3),
      c: z.string().optional(),
      d: z.object({ x: z.number() }).default({ x: 1 }),
      e: z.array(z.string()).default(() => []),
    });
    const reader = new PresentKeysReader(schema);
    for (const input of [{ a: "s" }, { a: "s", b: 4, c: "c" }, { a: 1, d: { x: "y" } }, { b: "x" }, { a: "s", e: ["t"] }]) {
      const whole = schema.safeParse(input);
      const read = reader.read(input)!;
      expect(exactly(read.success ? read.data : read.error.issues)).toBe(exactly(whole.success ? whole.data : whole.error.issues));
    }
    // An object answer is zod's fresh one each parse, never one shared between requests.
    expect(reader.read({ a: "s" })!.data!.d).not.toBe(reader.read({ a: "s" })!.data!.d);
  });
});
