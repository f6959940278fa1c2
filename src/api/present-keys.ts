/**
 * A zod object's parse that runs the schema only on the shape keys its input has. zod runs every
 * field of a shape on every parse, an absent one too (to give its default or leave it out); the
 * chat request has ~45 optional fields and a request sets a few, and workerd forbids eval, so zod
 * parses uncompiled: the absent fields were most of a warm chat turn's safeParse (Node, zod
 * jitless: ~50 µs whole, ~10 µs for model, messages and max_tokens alone).
 *
 * Exact by construction, because the fields of a plain strip object parse independently: what a
 * field gives when absent is what zod gave for it asked alone, and the present fields (and those
 * that must always run) are parsed by the same schema picked to them, whose fields are the
 * schema's own and run in shape order. So the output, assembled in shape order as zod builds it,
 * is zod's; and a refused body's issues are zod's too, in zod's order: an absent field that
 * answers alone never has an issue, and every other field runs in the picked schema as in the
 * whole. The constructor refuses schemas for which this does not hold (see assumptionsOf). A set
 * of keys past MAX_PICKED_SCHEMAS is not read (null): the caller parses with the schema itself.
 * test/unit/api/present-keys.test.ts checks the reader against the schema, output and issues.
 */
import { z } from "zod";

/**
 * Picked schemas kept per set of present keys. A client chooses the set and a new one costs ~0.4 ms
 * to pick and first run (Node, jitless; the whole schema ~0.1 ms): past the bound a new set is
 * parsed by the whole schema, as before, so rotating sets costs at most this many picks per isolate.
 */
export const MAX_PICKED_SCHEMAS = 32;

/** What a field gives when its key is absent: nothing (left out), a value, or no constant answer. */
type Absent = { kind: "omit" } | { kind: "value"; value: unknown } | { kind: "parse" };

export class PresentKeysReader<S extends z.ZodObject> {
  private readonly schema: S;
  private readonly keys: readonly string[];
  private readonly absent: readonly Absent[];
  private readonly picked = new Map<string, z.ZodObject>();

  /**
   * Throws (at startup, where the reader is built) for a schema the reader would not read as zod
   * does: anything but a plain strip object, a catchall (loose, strict or typed: unknown keys are
   * parsed or refused by the object), checks of the object's own (a refinement reads the whole
   * output; zod's pick refuses such an object), a symbol key, or a field whose answer when absent
   * is not a constant (a default computed per parse, e.g. `.default(() => Date.now())`: the
   * reader gives the answer it saw at construction). An object answer (zod gives a fresh one each
   * parse) is not a constant: such a field is always parsed. The check asks each field twice, so
   * it sees a varying answer only when the two differ: a schema given to the reader must not
   * compute a field's absent answer per parse at all.
   */
  constructor(schema: S) {
    const refused = assumptionsOf(schema);
    if (refused !== null) throw new Error(`PresentKeysReader: ${refused}`);
    this.schema = schema;
    this.keys = Object.keys(schema.shape);
    this.absent = this.keys.map((k) => absentOf(schema, k));
  }

  /**
   * `schema.safeParse(input)` for a plain object `input` (its data, or its issues in its order), or
   * null where the reader holds no picked schema for the input's keys: parse with the schema.
   */
  read(input: Record<string, unknown>): z.ZodSafeParseResult<z.output<S>> | null {
    const absent = this.absent;
    const run: boolean[] = [];
    let signature = "";
    for (let i = 0; i < this.keys.length; i++) {
      // Present as zod reads it (`key in input`); a required field's absence is zod's verdict.
      const a = absent[i]!;
      const here = this.keys[i]! in input || a.kind === "parse";
      run.push(here);
      if (here) signature += `${i},`;
    }
    const picked = this.pickedFor(signature, run);
    if (picked === null) return null;
    const sub = picked.safeParse(input);
    // The picked schema's issues are the schema's (see the header): no second parse for a refusal.
    if (!sub.success) return sub as z.ZodSafeParseResult<z.output<S>>;
    const got = sub.data as Record<string, unknown>;
    const out: Record<string, unknown> = {};
    for (let i = 0; i < this.keys.length; i++) {
      const key = this.keys[i]!;
      const a = absent[i]!;
      if (run[i]) {
        if (key in got) out[key] = got[key];
      } else if (a.kind === "value") out[key] = a.value;
    }
    return { success: true, data: out as z.output<S> };
  }

  private pickedFor(signature: string, run: readonly boolean[]): z.ZodObject | null {
    const held = this.picked.get(signature);
    if (held) return held;
    if (this.picked.size >= MAX_PICKED_SCHEMAS) return null;
    const mask: Record<string, true> = {};
    this.keys.forEach((k, i) => {
      if (run[i]) mask[k] = true;
    });
    const schema = this.schema.pick(mask) as unknown as z.ZodObject;
    this.picked.set(signature, schema);
    return schema;
  }
}

/** Why the reader cannot read `schema` as zod does (the object's own parts), or null. */
function assumptionsOf(schema: z.ZodObject): string | null {
  const def = schema._zod.def;
  const type: string = def.type;
  if (type !== "object") return `expected a zod object, got a ${type}`;
  if (def.catchall !== undefined) return `the object has a catchall (${def.catchall._zod.def.type}; loose or strict object): its unknown keys are the object's, not one field's`;
  if (def.checks !== undefined && def.checks.length > 0) return "the object has checks of its own (a refinement reads the whole output)";
  if (Object.getOwnPropertySymbols(schema.shape).length > 0) return "the shape has a symbol key";
  return null;
}

/**
 * The field's answer for an absent key, as zod gives it with the key alone in the shape (asked
 * twice: a differing answer is refused). A required field, or one whose answer is an object (a
 * fresh one each parse), is always parsed.
 */
function absentOf(schema: z.ZodObject, key: string): Absent {
  const alone = z.object({ [key]: schema.shape[key] as z.ZodType });
  const [first, second] = [answerOf(alone, key), answerOf(alone, key)];
  if (first.kind !== second.kind || (first.kind === "value" && !Object.is(first.value, (second as typeof first).value))) {
    throw new Error(`PresentKeysReader: field '${key}' answers differently when absent (a default computed per parse?): the reader needs a constant answer`);
  }
  return first;
}

function answerOf(alone: z.ZodObject, key: string): Absent {
  const got = alone.safeParse({});
  if (!got.success) return { kind: "parse" };
  const data = got.data as Record<string, unknown>;
  if (!(key in data)) return { kind: "omit" };
  const value = data[key];
  return typeof value === "object" && value !== null ? { kind: "parse" } : { kind: "value", value };
}
