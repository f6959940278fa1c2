/**
 * Python `f"{x:.1f}"`: the exact binary value of the double rounded to one decimal, ties to even.
 * JS `toFixed(1)` rounds ties up (0.25 -> "0.3"; Python "0.2"), so it cannot be used.
 */

const TWO_POW_40 = 2 ** 40;

/** Splits a finite double into an exact `mantissa * 2^exponent` (mantissa >= 0). */
export function decomposeDouble(x: number): { negative: boolean; mantissa: bigint; exponent: number } {
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, x);
  const hi = view.getUint32(0);
  const lo = view.getUint32(4);
  const negative = hi >>> 31 === 1;
  const biased = (hi >>> 20) & 0x7ff;
  const frac = (BigInt(hi & 0xfffff) << 32n) | BigInt(lo);
  if (biased === 0) return { negative, mantissa: frac, exponent: -1074 };
  return { negative, mantissa: frac | (1n << 52n), exponent: biased - 1075 };
}

/** round_half_even(|x| * 10) computed exactly in BigInt. */
function tenthsExact(x: number): bigint {
  const { mantissa, exponent } = decomposeDouble(x);
  const num = mantissa * 10n;
  if (exponent >= 0) return num << BigInt(exponent);
  const den = 1n << BigInt(-exponent);
  const q = num / den;
  const twiceRem = (num % den) * 2n;
  if (twiceRem > den) return q + 1n;
  if (twiceRem < den) return q;
  return q % 2n === 0n ? q : q + 1n;
}

/** Python `f"{x:.1f}"` for any double (including -0.0, inf, nan). */
export function formatFixed1(x: number): string {
  if (Number.isNaN(x)) return "nan";
  if (x === Infinity) return "inf";
  if (x === -Infinity) return "-inf";
  const negative = x < 0 || Object.is(x, -0);
  const ax = Math.abs(x);
  let tenths: bigint;
  const y = ax * 10;
  // Fast path: ax*10 is within y*2^-52 of the exact product, so unless that product sits next to a
  // .5 boundary the double result rounds the same way; near a boundary use exact BigInt arithmetic.
  const frac = y - Math.floor(y);
  if (y < TWO_POW_40 && Math.abs(frac - 0.5) > y * 1e-15) {
    tenths = BigInt(Math.floor(y + 0.5));
  } else {
    tenths = tenthsExact(ax);
  }
  const s = (tenths / 10n).toString() + "." + (tenths % 10n).toString();
  return negative ? "-" + s : s;
}
