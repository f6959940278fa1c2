/**
 * Python-exact integer rounding on IEEE doubles (SGLang qwen_vl.py round/ceil/floor_by_factor).
 * Python `round(x)` is round-half-to-even on the exact binary value; `Math.round` rounds half up.
 */
import { pyDiv } from "./py-errors.ts";

/** Python 3 `round(x)` for a float: nearest integer, exact ties to even. */
export function roundHalfEven(x: number): number {
  const f = Math.floor(x);
  const d = x - f; // exact: |x| < 2^52 has a representable fractional part, larger x are integers
  let r: number;
  if (d < 0.5) r = f;
  else if (d > 0.5) r = f + 1;
  else r = f % 2 === 0 ? f : f + 1;
  return r + 0; // Python ints have no negative zero
}

/** `round(number / factor) * factor` (Python: ZeroDivisionError on factor 0). */
export function roundByFactor(number: number, factor: number): number {
  return roundHalfEven(pyDiv(number, factor)) * factor;
}

/** `math.ceil(number / factor) * factor`. */
export function ceilByFactor(number: number, factor: number): number {
  return Math.ceil(pyDiv(number, factor)) * factor + 0;
}

/** `math.floor(number / factor) * factor`. */
export function floorByFactor(number: number, factor: number): number {
  return Math.floor(pyDiv(number, factor)) * factor + 0;
}

/** Python `int(x)` on a float: truncation toward zero. */
export function pyInt(x: number): number {
  return Math.trunc(x) + 0;
}
