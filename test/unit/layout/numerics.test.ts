import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  PyValueError,
  decomposeDouble,
  formatFixed1,
  frameIndices,
  padValueFromHash,
  padValueFromMmHash,
  parsePythonHexInt,
  roundByFactor,
  roundHalfEven,
  sglangSmartResize,
} from "../../../src/layout/index.ts";

/**
 * Reference for Python f"{x:.1f}": write the double's exact decimal expansion (m*2^e = m*5^-e/10^-e)
 * as digits, then round that decimal string half-to-even at the first fractional digit.
 */
function refFormat1(x: number): string {
  const { negative, mantissa, exponent } = decomposeDouble(x);
  let intDigits: string;
  let fracDigits: string;
  if (exponent >= 0) {
    intDigits = (mantissa << BigInt(exponent)).toString();
    fracDigits = "";
  } else {
    const k = -exponent;
    const scaled = (mantissa * 5n ** BigInt(k)).toString().padStart(k + 1, "0");
    intDigits = scaled.slice(0, scaled.length - k);
    fracDigits = scaled.slice(scaled.length - k);
  }
  const first = Number(fracDigits[0] ?? "0");
  const rest = fracDigits.slice(1);
  let tenths = BigInt(intDigits) * 10n + BigInt(first);
  if (rest.length > 0 && rest[0]! > "5") tenths += 1n;
  else if (rest.length > 0 && rest[0] === "5") {
    if (!/^50*$/.test(rest)) tenths += 1n; // above half
    else if (tenths % 2n === 1n) tenths += 1n; // exact tie: to even
  }
  const s = `${tenths / 10n}.${tenths % 10n}`;
  return negative ? "-" + s : s;
}

/** Exact round-half-even of a double via BigInt. */
function refRoundHalfEven(x: number): number {
  const { negative, mantissa, exponent } = decomposeDouble(x);
  let q: bigint;
  if (exponent >= 0) q = mantissa << BigInt(exponent);
  else {
    const den = 1n << BigInt(-exponent);
    q = mantissa / den;
    const r2 = (mantissa % den) * 2n;
    if (r2 > den || (r2 === den && q % 2n === 1n)) q += 1n;
  }
  return Number(negative ? -q : q) + 0;
}

describe("roundHalfEven / by-factor rounding", () => {
  it("rounds exact ties to even (Python round)", () => {
    expect([0.5, 1.5, 2.5, 3.5, -0.5, -1.5, -2.5].map(roundHalfEven)).toEqual([0, 2, 2, 4, 0, -2, -2]);
    expect(roundByFactor(70, 28)).toBe(56); // 2.5 -> 2
    expect(roundByFactor(126, 28)).toBe(112); // 4.5 -> 4
    expect(Object.is(roundHalfEven(-0.4), -0)).toBe(false);
  });

  it("matches an exact BigInt reference on random doubles", () => {
    fc.assert(
      fc.property(fc.double({ noNaN: true, noDefaultInfinity: true, min: -(2 ** 60), max: 2 ** 60 }), (x) => {
        expect(roundHalfEven(x)).toBe(refRoundHalfEven(x));
      }),
      { numRuns: 20_000 },
    );
  });

  it("matches the reference on halves", () => {
    fc.assert(
      fc.property(fc.integer({ min: -(2 ** 40), max: 2 ** 40 }), (k) => {
        expect(roundHalfEven(k + 0.5)).toBe(refRoundHalfEven(k + 0.5));
      }),
    );
  });
});

describe("formatFixed1 (Python f'{x:.1f}')", () => {
  it("handles ties, negatives and specials like Python", () => {
    expect(formatFixed1(0.25)).toBe("0.2"); // toFixed says 0.3
    expect(formatFixed1(0.75)).toBe("0.8");
    expect(formatFixed1(0.35)).toBe("0.3"); // binary value is below .35
    expect(formatFixed1(0.45)).toBe("0.5"); // binary value is above .45
    expect(formatFixed1(-0.04)).toBe("-0.0");
    expect(formatFixed1(-0)).toBe("-0.0");
    expect(formatFixed1(1e21)).toBe("1000000000000000000000.0");
    expect(formatFixed1(5e-324)).toBe("0.0");
    expect(formatFixed1(NaN)).toBe("nan");
    expect(formatFixed1(-Infinity)).toBe("-inf");
  });

  it("equals the BigInt decimal-expansion reference on random doubles", () => {
    fc.assert(
      fc.property(fc.double({ noNaN: true, noDefaultInfinity: true }), (x) => {
        expect(formatFixed1(x)).toBe(refFormat1(x));
      }),
      { numRuns: 20_000 },
    );
  });

  it("equals the reference on timestamp-like values (quarters, thirds, idx/fps means)", () => {
    const fps = fc.constantFrom(24, 25, 30, 29.97, 30000 / 1001, 60, 12.5, 2, 3.1);
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 200_000 }), fc.integer({ min: 0, max: 200_000 }), fps, (a, b, f) => {
        const ts = (a / f + b / f) / 2;
        expect(formatFixed1(ts)).toBe(refFormat1(ts));
        expect(formatFixed1(a / 4)).toBe(refFormat1(a / 4));
        expect(formatFixed1(a / 20)).toBe(refFormat1(a / 20));
      }),
      { numRuns: 20_000 },
    );
  });
});

describe("frame indices (floor of float linspace, last pinned, unique)", () => {
  it("is strictly increasing from 0 to N-1 with n entries when n <= N", () => {
    fc.assert(
      fc.property(fc.integer({ min: 2, max: 100_000 }), fc.integer({ min: 2, max: 768 }), (total, n0) => {
        const n = Math.min(n0, total);
        const idx = frameIndices(total, n);
        expect(idx.length).toBe(n);
        expect(idx[0]).toBe(0);
        expect(idx[n - 1]).toBe(total - 1);
        for (let i = 1; i < n; i++) expect(idx[i]!).toBeGreaterThan(idx[i - 1]!);
      }),
    );
  });

  it("reproduces numpy's float linspace (46 -> 34 frames)", () => {
    expect(frameIndices(46, 34)).toEqual([
      0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, 16, 17, 19, 20, 21, 23, 24, 25, 27, 28, 29, 31, 32, 34, 35, 36, 38, 39, 40, 42, 43, 45,
    ]);
  });
});

describe("SGLang pre-resize", () => {
  it("uses ties-to-even (406x700 -> 392x700)", () => {
    expect(sglangSmartResize(406, 700, 28, 100352, 602112)).toEqual([392, 700]);
  });
  it("can return 0 in the unguarded downscale branch", () => {
    expect(sglangSmartResize(20, 3000, 28, 3136, 20 * 28 * 28)[0]).toBe(0);
  });
  it("raises ValueError above aspect 200 and allows exactly 200", () => {
    expect(() => sglangSmartResize(201, 1)).toThrow(PyValueError);
    expect(() => sglangSmartResize(200, 1)).not.toThrow();
  });
});

describe("pad values from mm_hash strings (Python int(s, 16))", () => {
  it("accepts Python's spellings", () => {
    expect(padValueFromMmHash("0")).toBe(1_000_000);
    expect(padValueFromMmHash("3fffffff")).toBe(1_074_741_823);
    expect(padValueFromMmHash("40000000")).toBe(1_000_000);
    expect(padValueFromMmHash("DEADBEEF")).toBe(515_703_087);
    expect(padValueFromMmHash("0X1F")).toBe(1_000_031);
    expect(padValueFromMmHash(" abc ")).toBe(1_002_748);
    expect(padValueFromMmHash("\u3000abc\u2028")).toBe(1_002_748);
    expect(padValueFromMmHash("ab_cd")).toBe(1_043_981);
    expect(padValueFromMmHash("0x_1f")).toBe(1_000_031);
    expect(padValueFromMmHash("-10")).toBe(1_074_741_808);
    expect(parsePythonHexInt("\u0661\u0662")).toBe(0x12n); // Arabic-Indic digits are decimal digits
  });

  it("rejects what Python rejects", () => {
    for (const s of ["xyz", "", "12g4", "1__2", "_1", "1_", "0x", "0x__1", "- 1", "+", "\ufeff1", "Ａ"]) {
      expect(() => parsePythonHexInt(s), JSON.stringify(s)).toThrow(PyValueError);
    }
    expect(parsePythonHexInt("１")).toBe(1n); // fullwidth digit one is a Unicode decimal digit
  });

  it("agrees with BigInt hex parsing on random hex, case and separators", () => {
    fc.assert(
      fc.property(fc.array(fc.constantFrom(..."0123456789abcdefABCDEF"), { minLength: 1, maxLength: 64 }), fc.boolean(), (digits, prefix) => {
        const s = digits.join("");
        const v = BigInt("0x" + s);
        expect(parsePythonHexInt((prefix ? "0x" : "") + s)).toBe(v);
        expect(parsePythonHexInt(digits.join("_"))).toBe(v);
        expect(padValueFromHash(v)).toBe(1_000_000 + Number(v & ((1n << 30n) - 1n)));
      }),
    );
  });
});
