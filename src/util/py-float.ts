/** Python's text for floats, where an error message or a dump must read as Python's would. */

/** Python `repr(float)`: shortest round-trip digits; exponent form when decpt ≤ -4 or > 16. */
export function pythonFloatRepr(x: number): string {
  if (Number.isNaN(x)) return "NaN";
  if (x === Infinity) return "Infinity";
  if (x === -Infinity) return "-Infinity";
  if (x === 0) return Object.is(x, -0) ? "-0.0" : "0.0";
  const sign = x < 0 ? "-" : "";
  // toExponential() with no argument gives the shortest round-trip digits, like repr.
  const m = /^(\d)(?:\.(\d+))?e([+-]\d+)$/.exec(Math.abs(x).toExponential());
  if (!m) throw new Error(`unexpected exponential form for ${x}`);
  const digits = m[1]! + (m[2] ?? "");
  const exp10 = Number(m[3]);
  const decpt = exp10 + 1; // value = 0.DIGITS × 10^decpt
  if (decpt <= -4 || decpt > 16) {
    const mantissa = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
    const e = Math.abs(exp10).toString().padStart(2, "0");
    return `${sign}${mantissa}e${exp10 < 0 ? "-" : "+"}${e}`;
  }
  if (decpt <= 0) return `${sign}0.${"0".repeat(-decpt)}${digits}`;
  if (decpt < digits.length) return `${sign}${digits.slice(0, decpt)}.${digits.slice(decpt)}`;
  return `${sign}${digits}${"0".repeat(decpt - digits.length)}.0`;
}
