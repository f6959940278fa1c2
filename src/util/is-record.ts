/** A non-null object that is not an array: a JSON object as read from parsed or decoded data. */
export function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
