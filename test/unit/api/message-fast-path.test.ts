/**
 * The guard of message-fast-path.ts: for every list it accepts, its answer is exactly zod's
 * (deep and strictly equal, same key order); every list zod refuses it declines. Checked over
 * generated messages: valid lists with a member edited (from values the schemas themselves take and
 * refuse, strings one edit away, keys the schemas read), near-valid (a wrong type, an extra or null
 * key, an upper-case role, a bad URL) and hostile (__proto__ keys, huge and unusual unicode strings,
 * arbitrary values). A single-point loosening of the fast path (a check dropped, a key or value let
 * through) is found by the broad property on every seed tried (numbers in the commit message).
 */
import fc from "fast-check";
import { beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { compilesDuring, modulesUnderZodMode, ZOD_MODES } from "../../helpers/zod-compiles.ts";
import {
  AudioUrlPartSchema,
  GENERIC_ROLES,
  GenericMessageSchema,
  IMAGE_DETAILS,
  ImagePartSchema,
  InputAudioPartSchema,
  TextPartSchema,
  ThinkingPartSchema,
  ToolCallSchema,
  UserMessageSchema,
  VideoPartSchema,
} from "../../../src/api/openai-schema.ts";

const ROLES = ["user", "user", "user", "assistant", "assistant", "system", "developer", "tool", "function", "latest_reminder", "User", "ASSISTANT", "bot", "", "__proto__", "constructor"];
const URLS = ["https://a.example/x.png", "http://b/c", "data:image/png;base64,iVBO", "data:,", "HTTPS://A/b", "ftp://x/y", "", "https:// x", " https://a", "data:nocomma", "https://", "javascript:alert(1)"];
const HUGE = "é\u{1F600}\n\"\\".repeat(40_000);

/** A string: ordinary, unicode (lone surrogates included), huge, or a key-like word. */
const text = fc.oneof({ arbitrary: fc.string(), weight: 6 }, fc.string({ unit: "grapheme" }), fc.string({ unit: "binary" }), fc.constant(HUGE), fc.constantFrom("__proto__", "auto", "text"));
/** A value of the wrong type, or of a type zod reads some other way. */
const odd = fc.oneof(fc.constant(null), fc.constant(undefined), fc.integer(), fc.boolean(), fc.constant([]), fc.constant({}), fc.anything());

type Shape = Record<string, z.ZodType>;
/**
 * The keys zod reads at each level of a message, from the schemas themselves (every part and
 * message schema, the media objects, a tool call), so a key the schema gains is sent as an extra
 * key at once; with a few it never reads. A key the fast path does not mirror must be declined.
 */
const LEVELS: Record<"message" | "part" | "media" | "call" | "fn", Shape[]> = {
  message: [UserMessageSchema.shape, GenericMessageSchema.shape, ToolCallSchema.shape],
  part: [TextPartSchema.shape, ThinkingPartSchema.shape, ImagePartSchema.shape, VideoPartSchema.shape, AudioUrlPartSchema.shape, InputAudioPartSchema.shape],
  media: [ImagePartSchema.shape.image_url.shape, VideoPartSchema.shape.video_url.shape, AudioUrlPartSchema.shape.audio_url.shape, InputAudioPartSchema.shape.input_audio.shape],
  call: [ToolCallSchema.shape, ToolCallSchema.shape.function.shape],
  fn: [ToolCallSchema.shape.function.shape, ToolCallSchema.shape],
};
const STRANGERS = ["foo", "__proto__", "Content", "constructor"];
/** JSON Schema as z.toJSONSchema writes the parts samplesOf reads. */
type JsonSchema = { type?: string | string[]; enum?: unknown[]; const?: unknown; anyOf?: JsonSchema[]; properties?: Record<string, JsonSchema>; required?: string[]; items?: JsonSchema };
/**
 * Values of a schema's own making, from its JSON Schema (input side): every enum value and constant,
 * a value of each type it names, an object of its required members and one of all, an empty and a
 * one-item list. A refine is not in a JSON Schema: URLS covers the media URL's.
 */
function samplesOf(j: JsonSchema): unknown[] {
  if ("const" in j) return [j.const];
  if (j.enum) return [...j.enum];
  if (j.anyOf) return j.anyOf.flatMap(samplesOf);
  return [j.type ?? []].flat().flatMap((type): unknown[] => {
    if (type === "string") return ["x"];
    if (type === "integer") return [1];
    if (type === "number") return [1.5];
    if (type === "boolean") return [true];
    if (type === "null") return [null];
    if (type === "array") return [[], ...(j.items ? samplesOf(j.items).slice(0, 1).map((v) => [v]) : [])];
    if (type !== "object") return [];
    const members = (keep: (k: string) => boolean) => Object.fromEntries(Object.entries(j.properties ?? {}).filter(([k]) => keep(k)).map(([k, s]) => [k, samplesOf(s)[0]]));
    return [members((k) => j.required?.includes(k) === true), members(() => true)];
  });
}
/**
 * Values valid and invalid for the schemas' keys: those every key of LEVELS' schemas makes
 * (samplesOf), the media URLs, and a few whose parse differs from the input (a tool call's
 * arguments as an object, patch counts).
 */
const EXTRA_VALUES: readonly unknown[] = (() => {
  const made = Object.values(LEVELS).flatMap((shapes) => shapes.flatMap((shape) => Object.values(shape).flatMap((s) => samplesOf(z.toJSONSchema(s, { io: "input", unrepresentable: "any" }) as JsonSchema))));
  const hand = [
    ...[null, true, 0, 1, 7, -1, 1.5, 2 ** 53, Number.MAX_SAFE_INTEGER, "", "x", "auto", "low", "medium", "image", "video", "multi-images", "thinking", "function", "Function", "https://a/b", "{}", '{"a":1}', "[1]", "null", '{"a":', " {} ", "\ufeff{}", "\u00a0{}", "{}\u2028"],
    ...[[], {}, [{ function: { name: "f", arguments: "{}" } }], [{ id: "c", index: 0, type: "function", function: { name: "f", arguments: { a: 1 } } }], [{ function: { arguments: "[1]" } }]],
    ...[{ url: "https://a/b" }, { url: "ftp://a/b" }, { data: "AA", format: "wav" }, [{ type: "text", text: "t" }]],
  ];
  const byText = new Map([...hand, ...made, ...URLS].map((v) => [JSON.stringify(v), v]));
  return [...byText.values()];
})();
/** For each level's key, the values of EXTRA_VALUES its schemas take (asked alone) and those they all refuse; found once, before any test. */
function valuesAt(shapes: Shape[]): Map<string, { taken: unknown[]; refused: unknown[] }> {
  const taken = new Map<string, Set<unknown>>();
  for (const shape of shapes) {
    for (const [key, schema] of Object.entries(shape)) {
      const alone = z.object({ [key]: schema });
      const set = taken.get(key) ?? new Set();
      for (const v of EXTRA_VALUES) if (alone.safeParse({ [key]: v }).success) set.add(v);
      taken.set(key, set);
    }
  }
  return new Map([...taken].map(([key, set]) => [key, { taken: [...set], refused: EXTRA_VALUES.filter((v) => !set.has(v)) }]));
}
/** valuesAt's taken values. */
function takenAt(shapes: Shape[]): Map<string, unknown[]> {
  return new Map([...valuesAt(shapes)].map(([key, v]) => [key, v.taken]));
}
/** An extra member: a key of these schemas (a value it takes, or any) or a stranger, maybe not enumerable (zod still reads it). */
function extraOf(shapes: Shape[], strangers: string[], leftOut: readonly string[] = []): fc.Arbitrary<{ key: string; value: unknown; enumerable: boolean }> {
  const taken = takenAt(shapes);
  for (const key of leftOut) taken.delete(key);
  const valueFor = (key: string) => {
    const ok = taken.get(key) ?? [];
    return ok.length === 0 ? fc.constantFrom(...EXTRA_VALUES) : fc.oneof({ arbitrary: fc.constantFrom(...ok), weight: 2 }, { arbitrary: fc.constantFrom(...EXTRA_VALUES), weight: 1 });
  };
  return fc
    .constantFrom(...taken.keys(), ...strangers)
    .chain((key) => fc.record({ key: fc.constant(key), value: valueFor(key), enumerable: fc.oneof({ arbitrary: fc.constant(true), weight: 4 }, fc.constant(false)) }));
}
const EXTRA = { message: extraOf(LEVELS.message, STRANGERS), part: extraOf(LEVELS.part, STRANGERS), media: extraOf(LEVELS.media, STRANGERS), call: extraOf(LEVELS.call, STRANGERS), fn: extraOf(LEVELS.fn, STRANGERS) };
/** `o` with the extra member, defined over any member of that name (an own `__proto__` key included). */
function withExtra(o: Record<string, unknown>, e: { key: string; value: unknown; enumerable: boolean } | undefined | null): Record<string, unknown> {
  if (e) Object.defineProperty(o, e.key, { value: e.value, enumerable: e.enumerable, writable: true, configurable: true });
  return o;
}

/**
 * An object with these members, some left out, maybe an extra one: from the level's keys, or
 * (as often) one of `own`'s keys not among the members, the likeliest to be taken by mistake.
 */
function record(level: keyof typeof LEVELS, members: Record<string, fc.Arbitrary<unknown>>, requiredKeys: string[], own?: Shape) {
  const ownExtra = own === undefined || Object.keys(own).every((k) => k in members) ? [] : [extraOf([own], [], Object.keys(members))];
  const extra = fc.oneof(EXTRA[level], ...ownExtra);
  return fc.tuple(fc.record(members, { requiredKeys }), fc.option(extra, { freq: 2 })).map(([r, e]) => withExtra({ ...r }, e));
}

// Biased toward the accepted shapes (valid values most often, one member off now and then), so a
// mirror that accepts one wrong value (a detail, an extra key, a URL) is found here too.
const imagePart = record(
  "part",
  {
    type: fc.oneof({ arbitrary: fc.constant("image_url"), weight: 12 }, fc.constantFrom("video_url", "Image_url")),
    image_url: fc.oneof(
      {
        arbitrary: record(
          "media",
          {
            url: fc.oneof({ arbitrary: fc.constantFrom(...URLS), weight: 6 }, text),
            detail: fc.oneof({ arbitrary: fc.constantFrom("auto", "low", "high", "AUTO", "medium"), weight: 8 }, odd),
          },
          ["url"],
          ImagePartSchema.shape.image_url.shape,
        ),
        weight: 12,
      },
      odd,
    ),
  },
  ["type", "image_url"],
  ImagePartSchema.shape,
);
const textPart = record("part", { type: fc.oneof({ arbitrary: fc.constant("text"), weight: 12 }, fc.constantFrom("thinking", "Text")), text: fc.oneof({ arbitrary: text, weight: 12 }, odd) }, ["type", "text"]);
const content = fc.oneof({ arbitrary: text, weight: 4 }, { arbitrary: fc.array(fc.oneof(textPart, imagePart), { maxLength: 4 }), weight: 6 }, fc.constant(null), odd);
/** Call arguments: JSON object texts (valid), other JSON and near-JSON texts, and other values. */
const ARGUMENTS = ["{}", '{"path":"src/a.ts"}', ' {"a": [1, 2]} ', "[]", "[1]", "null", "1", '"{}"', '{"a":', "", "{}x", "{\u0000}", "\ufeff{}", "\u00a0{}", "{}\u2028"];
// The last three: whitespace that String.prototype.trim strips and JSON.parse refuses.
const callArguments = fc.oneof({ arbitrary: fc.constantFrom(...ARGUMENTS), weight: 6 }, text, fc.dictionary(fc.string(), fc.jsonValue(), { maxKeys: 2 }), odd);
const toolCall = record(
  "call",
  {
    id: fc.oneof({ arbitrary: text, weight: 6 }, odd),
    index: fc.oneof({ arbitrary: fc.integer({ min: -1, max: 3 }), weight: 4 }, fc.constantFrom(-0, 1.5, 2 ** 53, Number.MAX_SAFE_INTEGER, NaN, Infinity, "0"), odd),
    type: fc.oneof({ arbitrary: fc.constant("function"), weight: 8 }, fc.constantFrom("Function", "tool", null)),
    function: fc.oneof(
      { arbitrary: record("fn", { name: fc.oneof({ arbitrary: text, weight: 6 }, odd), arguments: callArguments }, [], ToolCallSchema.shape.function.shape), weight: 10 },
      odd,
    ),
  },
  ["function"],
  ToolCallSchema.shape,
);
const toolCalls = fc.oneof({ arbitrary: fc.array(toolCall, { maxLength: 3 }), weight: 8 }, odd);
const message = fc.oneof(
  { arbitrary: record("message", { role: fc.constantFrom(...ROLES), content }, ["role", "content"]), weight: 6 },
  record("message", { role: fc.constantFrom(...ROLES), content, tool_call_id: fc.oneof({ arbitrary: text, weight: 3 }, odd), name: fc.oneof({ arbitrary: text, weight: 3 }, odd), reasoning_content: fc.oneof({ arbitrary: text, weight: 3 }, odd), tool_calls: toolCalls }, ["role"], GenericMessageSchema.shape),
  fc.anything(),
);
const messages = fc.oneof({ arbitrary: fc.array(message, { minLength: 1, maxLength: 2 }), weight: 8 }, fc.array(message, { maxLength: 5 }), odd);

/** A list of the mirrored shapes, every member valid (the roles, details and URLs the schema takes). */
const validList = (() => {
  const url = fc.constantFrom(...URLS.filter((u) => ImagePartSchema.shape.image_url.shape.url.safeParse(u).success));
  const part = fc.oneof(
    fc.record({ type: fc.constant("text"), text: fc.string() }),
    { arbitrary: fc.record({ type: fc.constant("image_url"), image_url: fc.record({ url, detail: fc.constantFrom(...IMAGE_DETAILS) }, { requiredKeys: ["url"] }) }), weight: 2 },
  );
  const content = fc.oneof(fc.string(), { arbitrary: fc.array(part, { minLength: 1, maxLength: 3 }), weight: 2 });
  const args = fc.oneof(fc.constantFrom("{}", '{"path":"src/a.ts"}', ' { "a" : [1] } '), fc.dictionary(fc.string(), fc.jsonValue(), { maxKeys: 2 }).map((o) => JSON.stringify(o)));
  const call = fc.record(
    { id: fc.string(), index: fc.nat({ max: 4 }), type: fc.constant("function"), function: fc.record({ name: fc.string(), arguments: args }, { requiredKeys: [] }) },
    { requiredKeys: ["function"] },
  );
  const generic = { role: fc.constantFrom(...GENERIC_ROLES), content: fc.option(content, { nil: null }), tool_call_id: fc.string(), name: fc.string(), reasoning_content: fc.string(), tool_calls: fc.array(call, { maxLength: 2 }) };
  return fc.array(fc.oneof(fc.record({ role: fc.constant("user"), content }), fc.record(generic, { requiredKeys: ["role", "content"] })), { minLength: 1, maxLength: 2 });
})();
const VALUES = { message: valuesAt(LEVELS.message), part: valuesAt(LEVELS.part), media: valuesAt(LEVELS.media), call: valuesAt(LEVELS.call), fn: valuesAt(LEVELS.fn) };
/**
 * Strings one edit from `s`: upper case, a capital, cut at a point, a space or a character less there,
 * a space after. The point is as often one just after a delimiter (`https://|`, `data:|`, `image/|`),
 * where a URL, a media type or a name checked by a looser pattern than zod's tells.
 */
function nearStrings(s: string): fc.Arbitrary<string> {
  const delimited = Array.from({ length: s.length }, (_, i) => i + 1).filter((i) => /[^\p{L}\p{N}]/u.test(s.charAt(i - 1)));
  // Unbiased: fast-check draws small numbers and first constants more often, the start of a string.
  const at = fc.noBias(delimited.length > 0 ? fc.oneof(fc.nat({ max: s.length }), fc.constantFrom(...delimited)) : fc.nat({ max: s.length }));
  return at.chain((k) => fc.constantFrom(s.toUpperCase(), s.charAt(0).toUpperCase() + s.slice(1), s.slice(0, k), `${s.slice(0, k)} ${s.slice(k)}`, s.slice(0, k) + s.slice(k + 1), `${s} `));
}
type Edit = { key: string; value: unknown; enumerable: boolean; drop: boolean };
/**
 * One member of `o` (a `level` object) set or removed: a member it has, or a key of the level's
 * schemas or a stranger; set to a value the key's schemas take, one they refuse (often of the type
 * there, or starting as a taken one), a string one edit from the value there, null, undefined or
 * anything; maybe not enumerable.
 */
function editOf(level: keyof typeof LEVELS, o: Record<string, unknown>): fc.Arbitrary<Edit> {
  const absent = [...VALUES[level].keys(), ...STRANGERS].filter((k) => !(k in o));
  // A call's function may have no members: then only a member it lacks is set.
  const present = Object.keys(o).length > 0 ? [fc.constantFrom(...Object.keys(o))] : [];
  return fc.noBias(fc.oneof(...present, fc.constantFrom(...absent))).chain((key) => {
    const { taken, refused } = VALUES[level].get(key) ?? { taken: [], refused: EXTRA_VALUES };
    const here = o[key];
    // A check looser than zod's most often still checks the type: refused values of the type there are drawn more.
    const alike = refused.filter((v) => typeof v === typeof here && v !== null && Array.isArray(v) === Array.isArray(here));
    // And refused strings that start as a taken one does (`https:// x` beside `https://a/b`): the likeliest to pass a loose pattern.
    const head = (v: unknown) => (typeof v === "string" ? v.slice(0, 2).toLowerCase() : null);
    const close = alike.filter((v) => head(v) !== null && taken.some((t) => head(t) === head(v)));
    const value = fc.oneof(
      ...(taken.length > 0 ? [fc.constantFrom(...taken)] : []),
      fc.constantFrom(...refused),
      ...(alike.length > 0 ? [{ arbitrary: fc.constantFrom(...alike), weight: 2 }] : []),
      ...(close.length > 0 ? [{ arbitrary: fc.constantFrom(...close), weight: 2 }] : []),
      ...(typeof here === "string" ? [{ arbitrary: nearStrings(here), weight: 3 }] : []),
      fc.constantFrom(null, undefined),
      odd,
    );
    const enumerable = fc.oneof({ arbitrary: fc.constant(true), weight: 4 }, fc.constant(false));
    return fc.oneof({ arbitrary: fc.record({ key: fc.constant(key), value, enumerable, drop: fc.constant(false) }), weight: 4 }, fc.constant({ key, value: undefined, enumerable: true, drop: true }));
  });
}
/** The objects of a list of the mirrored shapes, by level: the messages, their parts, the parts' media objects, their tool calls and the calls' functions. */
function objectsOf(list: Record<string, unknown>[]): Record<keyof typeof LEVELS, Record<string, unknown>[]> {
  const parts = list.flatMap((m) => (Array.isArray(m.content) ? (m.content as Record<string, unknown>[]) : []));
  const calls = list.flatMap((m) => (Array.isArray(m.tool_calls) ? (m.tool_calls as Record<string, unknown>[]) : []));
  return { message: list, part: parts, media: parts.flatMap((p) => (p.image_url === undefined ? [] : [p.image_url as Record<string, unknown>])), call: calls, fn: calls.map((c) => c.function as Record<string, unknown>) };
}
/**
 * A valid list with one member edited (editOf), or two, or none, each in an object of a level drawn
 * first, so the few media objects are edited as often as the messages: where a mirror's check is looser than
 * zod's on one member (a value, a key, a case, a URL), one edit finds it.
 */
const editedList = validList.chain((list) => {
  const objects = objectsOf(list);
  const levels = (Object.keys(objects) as (keyof typeof LEVELS)[]).filter((level) => objects[level].length > 0);
  const edit = fc.noBias(fc.constantFrom(...levels)).chain((level) => fc.noBias(fc.nat({ max: objects[level].length - 1 })).chain((i) => editOf(level, objects[level][i]!).map((e) => ({ level, i, ...e }))));
  const edits = fc.oneof({ arbitrary: fc.tuple(edit), weight: 4 }, { arbitrary: fc.tuple(edit, edit), weight: 2 }, fc.constant([]));
  return edits.map((edits) => {
    const copy = structuredClone(list);
    const into = objectsOf(copy);
    for (const e of edits) {
      const o = into[e.level][e.i]!;
      if (e.drop) delete o[e.key];
      else withExtra(o, e);
    }
    return copy;
  });
});

/** Near-valid: each member from a small pool of values zod accepts and values it refuses, most often left as valid. */
function rarely<T>(arb: fc.Arbitrary<T>) {
  return fc.oneof({ arbitrary: fc.constant(undefined), weight: 5 }, { arbitrary: arb, weight: 1 });
}
/** An object of the members given a value (undefined: left out). */
function members(o: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined));
}
const nearImage = fc
  .tuple(fc.constantFrom(...URLS, null), rarely(fc.constantFrom("auto", "low", "high", "AUTO", null)), rarely(fc.constantFrom("video_url", "Image_url")), rarely(EXTRA.part), rarely(EXTRA.media))
  .map(([url, detail, type, extra, mediaExtra]) => withExtra({ type: type ?? "image_url", image_url: withExtra(members({ url, detail }), mediaExtra) }, extra));
const nearText = fc
  .tuple(rarely(fc.constantFrom("Text", "thinking")), fc.constantFrom("a", "", null, 1), rarely(EXTRA.part))
  .map(([type, text, extra]) => withExtra(members({ type: type ?? "text", text }), extra));
const nearMessage = fc
  .tuple(
    fc.constantFrom(...ROLES),
    fc.oneof(fc.constantFrom("hi", "", null, 3, undefined), fc.array(fc.oneof(nearText, nearImage), { maxLength: 3 })),
    rarely(fc.constantFrom("x", null, 1)),
    rarely(fc.constantFrom("x", "", null)),
    rarely(EXTRA.message),
  )
  .map(([role, content, tool_call_id, name, extra]) => withExtra(members({ role, content, tool_call_id, name }), extra));

/** As JSON.parse gives it (own `__proto__` keys kept), or the value itself where it has no JSON text. */
function viaJson(v: unknown): unknown {
  try {
    const s = JSON.stringify(v);
    return s === undefined ? v : JSON.parse(s);
  } catch {
    return v;
  }
}

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

/** The modules under test, imported afresh (so their schemas are built under the zod config of the moment). */
async function importModules() {
  return {
    fast: await import("../../../src/api/message-fast-path.ts"),
    schema: await import("../../../src/api/openai-schema.ts"),
    validate: await import("../../../src/api/validate.ts"),
  };
}

describe.each(ZOD_MODES)("fastMessages mirrors zod's messages schema, zod %s", (_name, jitless) => {
  const loaded = modulesUnderZodMode(jitless, importModules);
  let m: Awaited<ReturnType<typeof importModules>>;
  let fastMessages: (typeof m)["fast"]["fastMessages"];
  beforeAll(() => {
    m = loaded();
    fastMessages = m.fast.fastMessages;
  });

  /** fastMessages agrees with zod on `list`; returns whether it accepted. */
  function agrees(list: unknown): boolean {
    const fast = fastMessages(list);
    const zod = m.schema.ChatCompletionRequestObject.shape.messages.safeParse(list);
    if (fast === null) return false;
    expect(zod.success).toBe(true);
    expect(fast).toStrictEqual(zod.data);
    expect(JSON.stringify(fast)).toBe(JSON.stringify(zod.data));
    return true;
  }

  it("answers exactly zod's output for every list it accepts, and declines every list zod refuses", () => {
    let accepted = 0;
    let runs = 0;
    const compiles = compilesDuring(() =>
      fc.assert(
        fc.property(fc.oneof({ arbitrary: editedList, weight: 5 }, messages), (list) => {
          runs += 2;
          if (agrees(list)) accepted++;
          if (agrees(viaJson(list))) accepted++;
        }),
        { numRuns: 2000 },
      ),
    );
    // Not vacuous: the generators reach the fast path's shapes (a third of these lists, about half the edited ones).
    expect(accepted).toBeGreaterThan(runs / 5);
    // zod ran as configured: compiled parsers or none at all.
    if (jitless) expect(compiles).toBe(0);
    else expect(compiles).toBeGreaterThan(0);
  });

  it("agrees with zod on near-valid messages, one member off at a time", () => {
    let accepted = 0;
    fc.assert(
      fc.property(fc.array(nearMessage, { minLength: 1, maxLength: 2 }), (list) => {
        if (agrees(list)) accepted++;
      }),
      { numRuns: 3000 },
    );
    expect(accepted).toBeGreaterThan(100);
  });

  it("declines a member zod reads that it does not mirror, however defined (not enumerable, or next to valid ones)", () => {
    const call = [{ function: { name: "f", arguments: "{}" } }];
    const hidden = (o: Record<string, unknown>, key: string, value: unknown) => withExtra(o, { key, value, enumerable: false });
    // A call's members as zod reads them, a hidden one too: taken as zod takes them.
    for (const list of [
      [{ role: "assistant", content: null, tool_calls: call }],
      [hidden({ role: "assistant", content: null }, "tool_calls", call)],
      [{ role: "assistant", content: "", tool_calls: [hidden({ function: { arguments: "{}" } }, "id", "c1")] }],
    ]) {
      expect(agrees(list)).toBe(true);
    }
    for (const list of [
      [hidden({ role: "assistant", content: "x" }, "tool_calls", "not a list")],
      [{ role: "assistant", content: "", tool_calls: [hidden({ function: { arguments: "{}" } }, "id", 1)] }],
      [{ role: "assistant", content: "", tool_calls: [{ function: hidden({ name: "f" }, "arguments", "[1]") }] }],
      [{ role: "assistant", content: "", tool_calls: [{ function: { name: "f", arguments: { a: 1 } } }] }],
      [hidden({ role: "user", content: "x" }, "name", 1)],
      [{ role: "user", content: [hidden({ type: "image_url", image_url: { url: "https://a/b" } }, "modalities", "video")] }],
      [{ role: "user", content: [{ type: "image_url", image_url: hidden({ url: "https://a/b" }, "max_dynamic_patch", 1.5) }] }],
      [{ role: "user", content: [{ type: "image_url", image_url: { url: "https://a/b", max_dynamic_patch: 4 } }] }],
      [{ role: "user", content: [hidden({ type: "text", text: "t" }, "thinking", "hm")] }],
    ]) {
      expect(fastMessages(list)).toBeNull();
      agrees(list);
    }
  });

  it("accepts the common shapes (a chat turn, a vision message, an agent's step) with zod's defaults", () => {
    const list = [
      { role: "system", content: "Be brief." },
      { role: "user", content: [{ type: "text", text: "What is this?" }, { type: "image_url", image_url: { url: "https://a.example/x.png" } }] },
      { role: "assistant", content: "A cat." },
      { role: "assistant", content: "", tool_calls: [{ id: "call_1", type: "function", function: { name: "read_file", arguments: '{"path":"src/a.ts"}' } }, { index: 1, function: { arguments: "{}" } }] },
      { role: "tool", content: "42", tool_call_id: "call_1" },
      { role: "assistant", content: null, tool_calls: [] },
    ];
    expect(agrees(list)).toBe(true);
    expect(fastMessages(list)![1]).toStrictEqual({ role: "user", content: [{ type: "text", text: "What is this?" }, { type: "image_url", image_url: { url: "https://a.example/x.png", detail: "auto" }, modalities: "image" }] });
    expect(fastMessages(list)![3]).toStrictEqual({ role: "assistant", content: "", tool_calls: [{ id: "call_1", type: "function", function: { name: "read_file", arguments: '{"path":"src/a.ts"}' } }, { index: 1, type: "function", function: { arguments: "{}" } }] });
  });

  it("declines what it does not mirror, so zod reads it", () => {
    for (const msg of [
      { role: "User", content: "x" },
      { role: "user", content: "x", name: "bob" },
      { role: "assistant", content: "x", name: null },
      { role: "user", content: [{ type: "image_url", image_url: { url: "https://a/b" }, uuid: "u" }] },
      { role: "user", content: [{ type: "image_url", image_url: { url: "ftp://a/b" } }] },
      { role: "assistant", content: [{ type: "thinking", thinking: "hm" }] },
      { role: "assistant", content: null, tool_calls: null },
      { role: "assistant", content: null, tool_calls: [{ type: null, function: {} }] },
      { role: "assistant", content: null, tool_calls: [{ function: { name: "f", arguments: "[]" } }] },
      { role: "assistant", content: null, tool_calls: [{ function: { name: "f", arguments: { a: 1 } } }] },
      { role: "assistant", content: null, tool_calls: [{ index: 1.5, function: {} }] },
      { role: "assistant", content: null, tool_calls: [{ function: {} }], extra: 1 },
      { role: "user", content: "x", tool_calls: [] },
      { role: "user" },
      JSON.parse('{"role":"user","content":"x","__proto__":{"a":1}}'),
    ]) {
      expect(fastMessages([msg])).toBeNull();
    }
    expect(fastMessages([])).toBeNull();
  });

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
        const zod = m.schema.ChatCompletionRequestSchema.safeParse(JSON.parse(body));
        let got: unknown = null;
        let refused: unknown = null;
        try {
          got = m.validate.parseChatRequest(body);
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

describe("the schema parts message-fast-path.ts mirrors", () => {
  // A pin, not a property: it fails on any edit of these schema parts (a key, a type, an allowed value)
  // until message-fast-path.ts is reviewed against the edit. The differential tests above send the
  // schemas' own keys, but only the values they list: re-check that the fast path still accepts
  // only what zod accepts (its key lists, GENERIC_STRINGS, the part shapes), that these tests'
  // value pools (ROLES, URLS, EXTRA_VALUES, the detail values) cover the new values, then update
  // this expectation. The detail values and defaults are read from openai-schema.ts's constants,
  // and MEDIA_URL (a refine: not in a JSON Schema) is shared, so those cannot drift.
  it("are as reviewed", () => {
    const io = { io: "input", unrepresentable: "any" } as const;
    const json = (s: z.ZodType) => {
      const { $schema: _, ...rest } = z.toJSONSchema(s, io);
      return rest;
    };
    const nullable = (type: string) => ({ type: [type, "null"] });
    const safeInt = { anyOf: [{ type: "integer", minimum: -9007199254740991, maximum: 9007199254740991 }, { type: "null" }] };
    const toolCallJson = {
      type: "object",
      properties: {
        id: nullable("string"),
        index: safeInt,
        type: { anyOf: [{ type: "string", const: "function" }, { type: "null" }] },
        function: {
          type: "object",
          properties: { name: nullable("string"), arguments: { anyOf: [{ anyOf: [{ type: "string" }, { type: "object", propertyNames: { type: "string" }, additionalProperties: {} }] }, { type: "null" }] } },
        },
      },
      required: ["function"],
    };
    expect({
      userKeys: Object.keys(UserMessageSchema.shape),
      genericKeys: Object.keys(GenericMessageSchema.shape),
      generic: json(GenericMessageSchema.pick({ role: true, tool_call_id: true, name: true, reasoning_content: true })),
      toolCall: json(ToolCallSchema),
      toolCalls: json(GenericMessageSchema.shape.tool_calls),
      text: json(TextPartSchema),
      image: json(ImagePartSchema),
    }).toStrictEqual({
      userKeys: ["role", "content"],
      genericKeys: ["role", "content", "tool_call_id", "name", "reasoning_content", "tool_calls"],
      generic: {
        type: "object",
        properties: {
          role: { type: "string", enum: ["system", "developer", "assistant", "tool", "function", "latest_reminder"] },
          tool_call_id: nullable("string"),
          name: nullable("string"),
          reasoning_content: nullable("string"),
        },
        required: ["role"],
      },
      toolCall: toolCallJson,
      // the list itself: no bound on its length beyond the body's, which the fast path relies on
      toolCalls: { anyOf: [{ type: "array", items: toolCallJson }, { type: "null" }] },
      text: { type: "object", properties: { type: { type: "string", const: "text" }, text: { type: "string" } }, required: ["type", "text"] },
      image: {
        type: "object",
        properties: {
          type: { type: "string", const: "image_url" },
          image_url: {
            type: "object",
            properties: {
              url: { type: "string", minLength: 1 },
              detail: { anyOf: [{ type: "string", enum: ["auto", "low", "high"] }, { type: "null" }] },
              max_dynamic_patch: safeInt,
              min_dynamic_patch: safeInt,
            },
            required: ["url"],
          },
          modalities: { anyOf: [{ type: "string", enum: ["image", "multi-images", "video"] }, { type: "null" }] },
          uuid: nullable("string"),
        },
        required: ["type", "image_url"],
      },
    });
  });
});
