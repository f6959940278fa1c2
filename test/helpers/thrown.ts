/** The InvalidRequestError that `f` throws, for asserting its param and message; anything else fails the test. */
import { InvalidRequestError } from "../../src/api/errors.ts";

export function thrown(f: () => unknown): InvalidRequestError {
  try {
    f();
  } catch (e) {
    if (e instanceof InvalidRequestError) return e;
    throw e;
  }
  throw new Error("did not throw");
}
