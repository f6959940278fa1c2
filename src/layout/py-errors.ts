/**
 * Errors that mirror the Python exception an SGLang worker (or transformers) would raise for the
 * same input. Layout code throws these so callers (and the golden test) can tell "the worker would
 * fail here" apart from a bug; `pyType` is the Python class name.
 */
export type PyErrorType = "ValueError" | "ZeroDivisionError" | "AssertionError";

export abstract class PyError extends Error {
  abstract readonly pyType: PyErrorType;
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

export class PyValueError extends PyError {
  readonly pyType = "ValueError" as const;
}

export class PyZeroDivisionError extends PyError {
  readonly pyType = "ZeroDivisionError" as const;
}

export class PyAssertionError extends PyError {
  readonly pyType = "AssertionError" as const;
}

export function isPyError(e: unknown): e is PyError {
  return e instanceof PyError;
}

/** Python `a / b` on numbers: raises instead of yielding Infinity/NaN. */
export function pyDiv(a: number, b: number): number {
  if (b === 0) throw new PyZeroDivisionError("division by zero");
  return a / b;
}
