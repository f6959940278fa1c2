/**
 * Optional local tools, required in CI. A test that needs something a fresh machine lacks (a
 * native ffprobe for the native-vs-wasm comparison, Python's jinja2 for the template oracle, a
 * browser when none arrives with npm ci) skips locally with a printed reason; under CI=true the
 * same test fails instead, so CI never passes with it silently skipped (.ci/run installs them).
 */
import { it } from "vitest";

export const inCi = process.env.CI === "true";

/**
 * Returns true when the tool is there. When it is not: in CI registers a failing test named after
 * it; locally prints why the dependent tests skip. Callers use the result with describe.skipIf.
 */
export function requireInCi(available: boolean, what: string, why: string): boolean {
  if (available) return true;
  if (inCi) {
    it(`${what} is present (required under CI=true)`, () => {
      throw new Error(`${what} is missing under CI=true: ${why}. .ci/run installs it; install it or unset CI.`);
    });
  } else {
    console.log(`[skip] ${what} is not installed here: ${why} (required under CI=true)`);
  }
  return false;
}
