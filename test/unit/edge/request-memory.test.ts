/**
 * The edge's memory per request is bounded: each maximal request (the whole text budget, a prompt
 * near the model's context, the 19 MB tool schema, a schema at the text budget, a body at the
 * 20 MiB cap) runs through the edge's per-request work (validate → template → context check →
 * tokenize → block hashes) in a child Node whose V8 old space is capped at 64 MiB — half a Workers
 * isolate's 128 MB. Exceeding it crashes the child, so the test fails. The figures (V8 heap the
 * request made V8 reserve) are printed for docs/reliability.md.
 */
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

const CHILD = join(import.meta.dirname, "request-memory-child.ts");

const cases: [string, RegExp][] = [
  ["text", /^refused: context_length_exceeded$/],
  ["context", /^ok: \d+ tokens, \d+ blocks$/],
  ["tools-19mb", /^refused: limit_exceeded$/],
  ["tools-budget", /^refused: context_length_exceeded$/],
  ["media-20mb", /^ok: /],
];

describe("peak memory per request", () => {
  for (const [name, outcome] of cases)
    it(`${name}: fits a 64 MiB V8 old space`, () => {
      const r = spawnSync(process.execPath, ["--expose-gc", "--max-old-space-size=64", CHILD, name], { encoding: "utf8", timeout: 120_000 });
      expect(r.status, r.stderr.slice(-2000)).toBe(0);
      const line = r.stdout.trim().split("\n").at(-1)!;
      console.log(`request memory: ${line}`);
      const fig = JSON.parse(line) as { outcome: string; requestPeakMb: number };
      expect(fig.outcome).toMatch(outcome);
    });
});
