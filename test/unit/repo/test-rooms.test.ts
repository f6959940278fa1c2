/**
 * Unit tests live in the room they test: test/unit/<room>/ where the room is a folder of src/ or
 * services/, or bench/ (the benchmark harness), scripts/ (the repository's scripts) or repo/
 * (checks of the whole repository); support/ holds helpers that tests of several rooms share. A
 * test is named after what it tests, without its folder's name in front (proxy/sse.test.ts, not
 * proxy/proxy-sse.test.ts) unless that is the name of the file it tests (load/load-tracker.test.ts).
 */
import { existsSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

const ROOT = join(import.meta.dirname, "../../..");
const UNIT = join(ROOT, "test/unit");
const folders = (dir: string): string[] => readdirSync(dir).filter((n) => statSync(join(dir, n)).isDirectory());
const filesUnder = (dir: string): string[] =>
  readdirSync(dir).flatMap((n) => (statSync(join(dir, n)).isDirectory() ? filesUnder(join(dir, n)).map((f) => `${n}/${f}`) : [n]));

const sourceRooms = new Map<string, string>([
  ...folders(join(ROOT, "src")).filter((n) => n !== "generated").map((n): [string, string] => [n, `src/${n}`]),
  ...folders(join(ROOT, "services")).map((n): [string, string] => [n, `services/${n}`]),
  ["scripts", "scripts"],
]);
const otherRooms = new Set(["bench", "repo", "support"]);

describe("test/unit rooms", () => {
  it("keeps no file at the top of test/unit", () => {
    expect(readdirSync(UNIT).filter((n) => !statSync(join(UNIT, n)).isDirectory())).toEqual([]);
  });

  it("has a folder only per room of src/ or services/, or bench, scripts, repo, support", () => {
    expect(sourceRooms.size).toBeGreaterThan(15);
    expect(folders(UNIT).filter((n) => !sourceRooms.has(n) && !otherRooms.has(n))).toEqual([]);
  });

  it("keeps tests out of support/", () => {
    const support = join(UNIT, "support");
    expect(existsSync(support) ? filesUnder(support).filter((f) => f.endsWith(".test.ts")) : []).toEqual([]);
  });

  it("names no test after its folder unless a file of the room has that name", () => {
    const bad: string[] = [];
    for (const room of folders(UNIT)) {
      for (const file of filesUnder(join(UNIT, room)).filter((f) => f.endsWith(".test.ts"))) {
        const base = file.replace(/^.*\//, "").replace(/\.test\.ts$/, "");
        const source = sourceRooms.get(room);
        if (base.startsWith(`${room}-`) && !(source && ["ts", "mjs"].some((ext) => existsSync(join(ROOT, source, `${base}.${ext}`)))))
          bad.push(`test/unit/${room}/${file}`);
      }
    }
    expect(bad).toEqual([]);
  });
});
