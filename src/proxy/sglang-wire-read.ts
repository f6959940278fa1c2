/**
 * Reading a worker's answer (sglang-wire.ts GenerateResultSchema, GenerateResponseSchema) without
 * zod's interpreter on the common path. workerd forbids eval, so zod parses uncompiled; a streamed
 * answer parses one frame per token (warm 1k-token streamed request, perf: safeParse ~0.14 ms of
 * edge CPU for 17 frames). Each reader here accepts only
 * values its zod schema accepts and returns exactly the schema's output (shape keys in the shape's
 * order with defaults filled, then the input's other keys in its order, as zod's looseObject
 * builds it); anything else goes to the schema itself, so errors (and their messages) are zod's.
 * The schemas stay the definition: test/unit/proxy/sglang-wire-read.test.ts checks the readers
 * against them.
 */
import { z } from "zod";
import { GenerateResponseSchema, GenerateResultSchema, type SglangGenerateResult } from "./sglang-wire.ts";

const INVALID: unique symbol = Symbol("invalid");
type Accept = (value: unknown) => unknown;
/** A field's output when undefined: required (invalid), left out, or a default. */
type Absent = "required" | "omit" | { value: unknown };
interface LooseShape {
  keys: readonly string[];
  keySet: ReadonlySet<string>;
  fields: Readonly<Record<string, { accept: Accept; absent: Absent }>>;
}

function looseShape(fields: Record<string, { accept: Accept; absent: Absent }>): LooseShape {
  const keys = Object.keys(fields);
  return { keys, keySet: new Set(keys), fields };
}

function readLoose(shape: LooseShape, input: unknown): Record<string, unknown> | typeof INVALID {
  if (typeof input !== "object" || input === null || Array.isArray(input)) return INVALID;
  const from = input as Record<string, unknown>;
  const out: Record<string, unknown> = {};
  for (const key of shape.keys) {
    const field = shape.fields[key]!;
    const value = from[key];
    if (value === undefined) {
      if (field.absent === "required") return INVALID;
      if (field.absent !== "omit") out[key] = field.absent.value;
      else if (key in from) out[key] = undefined;
      continue;
    }
    const accepted = field.accept(value);
    if (accepted === INVALID) return INVALID;
    out[key] = accepted;
  }
  for (const key in from) {
    if (shape.keySet.has(key)) continue;
    if (key === "__proto__") return INVALID;
    out[key] = from[key];
  }
  return out;
}

const acceptString: Accept = (v) => (typeof v === "string" ? v : INVALID);
const acceptCount: Accept = (v) => (Number.isSafeInteger(v) && (v as number) >= 0 ? v : INVALID);
const acceptInt: Accept = (v) => (Number.isSafeInteger(v) ? v : INVALID);
const acceptNumberOrString: Accept = (v) => ((typeof v === "number" && Number.isFinite(v)) || typeof v === "string" ? v : INVALID);
const nullable = (accept: Accept): Accept => (v) => (v === null ? null : accept(v));

const FINISH_REASON_SHAPE = looseShape({
  type: { accept: acceptString, absent: "required" },
  matched: { accept: nullable(acceptNumberOrString), absent: "omit" },
  message: { accept: nullable(acceptString), absent: "omit" },
  status_code: { accept: nullable(acceptInt), absent: "omit" },
});
const zeroCount = { accept: acceptCount, absent: { value: 0 } } as const;
const optionalCount = { accept: acceptCount, absent: "omit" } as const;
const META_INFO_SHAPE = looseShape({
  id: { accept: acceptString, absent: "omit" },
  finish_reason: { accept: nullable((v) => readLoose(FINISH_REASON_SHAPE, v)), absent: "omit" },
  prompt_tokens: zeroCount,
  completion_tokens: zeroCount,
  cached_tokens: zeroCount,
  reasoning_tokens: zeroCount,
  image_tokens: optionalCount,
  video_tokens: optionalCount,
  audio_tokens: optionalCount,
  weight_version: { accept: acceptString, absent: "omit" },
});
const GENERATE_RESULT_SHAPE = looseShape({
  text: { accept: acceptString, absent: { value: "" } },
  meta_info: { accept: (v) => readLoose(META_INFO_SHAPE, v), absent: "required" },
  index: optionalCount,
});

/**
 * `schema.safeParse(raw)`, a throw included: zod's check of an array's length reads `raw.length`
 * as given, so an object whose `length` is an object with non-callable `valueOf`/`toString` throws a
 * TypeError instead of failing. A worker's answer is refused as malformed, never a crash.
 */
function schemaParse<T extends z.ZodType>(schema: T, raw: unknown): z.ZodSafeParseResult<z.output<T>> {
  try {
    return schema.safeParse(raw);
  } catch (e) {
    return { success: false, error: new z.ZodError([{ code: "custom", message: `unreadable value (${e instanceof Error ? e.message : String(e)})`, path: [], input: raw }]) as z.ZodError<z.output<T>> };
  }
}

/** `GenerateResultSchema.safeParse(raw)`. */
export function parseGenerateResult(raw: unknown): z.ZodSafeParseResult<SglangGenerateResult> {
  const read = readLoose(GENERATE_RESULT_SHAPE, raw);
  return read === INVALID ? schemaParse(GenerateResultSchema, raw) : { success: true, data: read as SglangGenerateResult };
}

/** `GenerateResponseSchema.safeParse(raw)`. */
export function parseGenerateResponse(raw: unknown): z.ZodSafeParseResult<z.output<typeof GenerateResponseSchema>> {
  if (!Array.isArray(raw)) {
    const read = readLoose(GENERATE_RESULT_SHAPE, raw);
    return read === INVALID ? schemaParse(GenerateResponseSchema, raw) : { success: true, data: read as SglangGenerateResult };
  }
  const results: SglangGenerateResult[] = [];
  for (const item of raw) {
    const read = readLoose(GENERATE_RESULT_SHAPE, item);
    if (read === INVALID) return schemaParse(GenerateResponseSchema, raw);
    results.push(read as SglangGenerateResult);
  }
  return results.length > 0 ? { success: true, data: results } : schemaParse(GenerateResponseSchema, raw);
}
