/**
 * A zod object's parse that runs the schema only on the shape keys its input has. zod runs every
 * field of a shape on every parse, an absent one too (to give its default or leave it out); the
 * chat request has ~45 optional fields and a request sets a few, and workerd forbids eval, so zod
 * parses uncompiled: the absent fields were most of a warm chat turn's safeParse (Node, zod
 * jitless: ~50 µs whole, ~10 µs for model, messages and max_tokens alone).
 *
 * Exact by construction, because an object's fields parse independently (a strip object with no
 * catchall and no refinement of its own): what a field gives when absent is what zod gave for it
 * once, asked alone; the present fields are parsed by the same schema picked to them. The output
 * is assembled in shape order, as zod builds it. Anything the reader does not take (a required
 * field absent, a failed parse, a set of keys past MAX_PICKED_SCHEMAS) returns null and the caller parses with the schema itself, so
 * every verdict and error is zod's. test/unit/api/present-keys.test.ts checks the reader against
 * the schema.
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
  private absentOf: readonly Absent[] | null = null;
  private readonly picked = new Map<string, z.ZodObject>();

  constructor(schema: S) {
    this.schema = schema;
    this.keys = Object.keys(schema.shape);
  }

  /** `schema.safeParse(input).data` for a plain object `input`, or null: parse with the schema (its verdict and issues). */
  read(input: Record<string, unknown>): z.output<S> | null {
    const absent = (this.absentOf ??= this.keys.map((k) => absentOf(this.schema, k)));
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
    if (!sub.success) return null;
    const got = sub.data as Record<string, unknown>;
    const out: Record<string, unknown> = {};
    for (let i = 0; i < this.keys.length; i++) {
      const key = this.keys[i]!;
      const a = absent[i]!;
      if (run[i]) {
        if (key in got) out[key] = got[key];
      } else if (a.kind === "value") out[key] = a.value;
    }
    return out as z.output<S>;
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

/**
 * The field's answer for an absent key, as zod gives it with the key alone in the shape. A
 * required field, or one whose answer is an object (a fresh one each parse), is always parsed.
 */
function absentOf(schema: z.ZodObject, key: string): Absent {
  const alone = z.object({ [key]: schema.shape[key] as z.ZodType }).safeParse({});
  if (!alone.success) return { kind: "parse" };
  const data = alone.data as Record<string, unknown>;
  if (!(key in data)) return { kind: "omit" };
  const value = data[key];
  return typeof value === "object" && value !== null ? { kind: "parse" } : { kind: "value", value };
}
