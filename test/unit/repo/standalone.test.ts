/**
 * The repository stands alone: a clone with nothing beside it builds, tests and documents itself.
 * Every file git tracks or would add (bench/results/ excepted: run records keep the paths of the
 * machine they ran on) is read, and each finding names file:line:
 *  - no path into the developers' notes folder that sits beside the development checkout;
 *  - a design note or `<name>.md §N` citation names a Markdown file of the repository, and a numbered
 *    section it cites is a numbered heading of that file (upstream sources are cited by repo, file,
 *    line and commit instead);
 *  - code names no relative path that leaves the repository or leads nowhere, and no absolute path
 *    into a home or work folder;
 *  - relative Markdown links resolve inside the repository.
 * docs/*.md and README.md are reported apart from the rest.
 */
import { execFileSync } from "node:child_process";
import { existsSync, lstatSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve, sep } from "node:path";
import { describe, expect, it } from "vitest";

const ROOT = resolve(import.meta.dirname, "../../..");
// This file is left out of the scan: its examples break the rules on purpose.
const SELF = relative(ROOT, import.meta.filename);

// Spelled in pieces so that a search of the tree for the notes folder does not find this file.
const NOTES_DIR = "sha" + "red";
const NOTES_FOLDER = new RegExp(`(?:\\.\\./|/work/)${NOTES_DIR}\\b`);
const ARCH_NOTE = /\bARCHITECTURE\b/;
const REFERENCE_NOTE = /\breference\/[\w.-]+\.md\b/g;
const SECTION_CITATION = /([\w./-]*[\w-]\.md)`? §\s?(\d+(?:\.\d+)*)/g;
const CODE_FILE = /\.(?:ts|mts|cts|mjs|cjs|js)$/;
const RELATIVE_LITERAL = /(["'`])(\.\.\/[^"'`\s]*)/g;
const ABSOLUTE_HOME_LITERAL = /(["'`])(\/(?:work|home|root|Users|mnt)\/[^"'`\s]*)/g;
const MARKDOWN_LINK = /\]\(([^)\s#]+)(?:#[^)\s]*)?\)/g;

const files = execFileSync("git", ["ls-files", "-z", "--cached", "--others", "--exclude-standard"], { cwd: ROOT, encoding: "utf8", maxBuffer: 64 << 20 })
  .split("\0")
  // Plain files only: a deleted file git still lists, or a link, has no text of its own to check.
  .filter((f) => f !== "" && f !== SELF && !f.startsWith("bench/results/") && lstatSync(join(ROOT, f), { throwIfNoEntry: false })?.isFile() === true);
const isDoc = (f: string): boolean => f === "README.md" || /^docs\/[^/]+\.md$/.test(f);

function textOf(file: string): string | null {
  const bytes = readFileSync(join(ROOT, file));
  return bytes.includes(0) ? null : bytes.toString("utf8");
}

const markdownFiles = files.filter((f) => f.endsWith(".md"));
/** Numbered headings ("## 3. Title", "### 1.2 Title") of each Markdown file, as "3", "1.2". */
const headingNumbers = new Map(
  markdownFiles.map((f) => [f, new Set([...(textOf(f) ?? "").matchAll(/^#+\s+(\d+(?:\.\d+)*)\.?\s/gm)].map((m) => m[1]!))]),
);

function insideRoot(abs: string): boolean {
  return abs === ROOT || abs.startsWith(ROOT + sep);
}

/** A path git ignores (src/generated/ and the like): made by `npm run build:assets`, absent from a fresh clone. */
function isBuildOutput(abs: string): boolean {
  const rel = relative(ROOT, abs);
  try {
    // Both spellings: a missing folder matches a `dir/` pattern only with its slash.
    execFileSync("git", ["check-ignore", "--no-index", rel, `${rel}/`], { cwd: ROOT, stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}

/** The repository's Markdown files a citation of `cited` (a path or a bare name) can mean. */
function markdownTargets(citingFile: string, cited: string): string[] {
  const fromFile = relative(ROOT, resolve(ROOT, dirname(citingFile), cited));
  if (markdownFiles.includes(fromFile)) return [fromFile];
  if (markdownFiles.includes(cited)) return [cited];
  return cited.includes("/") ? [] : markdownFiles.filter((f) => f === cited || f.endsWith("/" + cited));
}

function problemsOf(file: string, text: string): string[] {
  const found: string[] = [];
  const code = CODE_FILE.test(file);
  text.split("\n").forEach((line, i) => {
    const at = `${file}:${i + 1}`;
    if (NOTES_FOLDER.test(line)) found.push(`${at}: path into the notes folder beside the checkout`);
    if (ARCH_NOTE.test(line) && markdownTargets(file, "ARCHITECTURE.md").length === 0) found.push(`${at}: cites ARCHITECTURE(.md), which is not in the repository`);
    for (const m of line.matchAll(REFERENCE_NOTE)) {
      if (markdownTargets(file, m[0]).length === 0) found.push(`${at}: ${m[0]} is not in the repository`);
    }
    for (const m of line.matchAll(SECTION_CITATION)) {
      const [cited, section] = [m[1]!, m[2]!];
      const targets = markdownTargets(file, cited.replace(/^\.\//, ""));
      if (targets.length === 0) found.push(`${at}: ${cited} §${section}: no such file in the repository`);
      else if (!targets.some((t) => headingNumbers.get(t)?.has(section))) found.push(`${at}: ${cited} §${section}: no heading numbered ${section} in ${targets.join(", ")}`);
    }
    if (code) {
      for (const m of line.matchAll(RELATIVE_LITERAL)) {
        // A template literal is checked up to its first substitution: the folder that part names.
        const fixed = m[2]!.split("${")[0]!;
        const abs = resolve(ROOT, dirname(file), fixed);
        const mustExist = fixed === m[2] || fixed.endsWith("/") ? abs : dirname(abs);
        if (!insideRoot(abs)) found.push(`${at}: "${m[2]}" leaves the repository`);
        else if (!existsSync(mustExist) && !isBuildOutput(mustExist)) found.push(`${at}: "${m[2]}" leads to nothing in the repository`);
      }
      for (const m of line.matchAll(ABSOLUTE_HOME_LITERAL)) found.push(`${at}: absolute path "${m[2]}"`);
    }
    if (file.endsWith(".md")) {
      for (const m of line.matchAll(MARKDOWN_LINK)) {
        const target = m[1]!;
        if (/^[a-z][\w+.-]*:/i.test(target)) continue; // https:, mailto: and other schemes
        const abs = target.startsWith("/") ? join(ROOT, target) : resolve(ROOT, dirname(file), target);
        if (!insideRoot(abs)) found.push(`${at}: link ${target} leaves the repository`);
        else if (!existsSync(abs)) found.push(`${at}: link ${target} leads to nothing in the repository`);
      }
    }
  });
  return found;
}

function problemsIn(selected: readonly string[]): string[] {
  return selected.flatMap((f) => {
    const text = textOf(f);
    return text === null ? [] : problemsOf(f, text);
  });
}

describe("the repository stands alone", () => {
  it("sees the whole tree (git lists the files)", () => {
    expect(files).toContain("package.json");
    expect(files).toContain("test/fixtures/golden/README.md");
    expect(files.some((f) => f.startsWith("bench/results/"))).toBe(false);
  });

  it("code, tests, scripts, fixtures and config read and cite nothing outside the clone", () => {
    expect(problemsIn(files.filter((f) => !isDoc(f)))).toEqual([]);
  });

  it("docs/*.md and README.md cite and link nothing outside the clone", () => {
    expect(problemsIn(files.filter(isDoc))).toEqual([]);
  });
});

describe("the rules catch what they are for", () => {
  const notesFolder = ["..", NOTES_DIR, "golden"].join("/");
  it.each([
    ["test/unit/x.test.ts", `const d = resolve(root, "${notesFolder}");`, "notes folder"],
    ["test/unit/x.test.ts", `const d = "/work/${NOTES_DIR}/golden";`, "notes folder"],
    ["src/x.ts", "// Fail closed (ARCHITECTURE.md §3)", "not in the repository"],
    ["src/x.ts", "// all agree (ARCHITECTURE §3)", "not in the repository"],
    ["src/x.ts", "// wire shapes (reference/sglang-generate-api.md §4.2)", "not in the repository"],
    ["src/x.ts", "// added tokens (tokenizer.md §4.3)", "no heading numbered 4.3"],
    ["bench/x.mjs", 'const p = join(ROOT, "x"); readFileSync("../../../etc/passwd");', "leaves the repository"],
    ["test/unit/x.test.ts", 'readFileSync(join(import.meta.dirname, "../nothing-here/x.json"));', "leads to nothing"],
    ["scripts/x.mjs", 'const home = "/home/someone/data";', "absolute path"],
    ["docs/x.md", "See [the notes](../../elsewhere/ARCH.md).", "leaves the repository"],
  ])("%s: %s", (file, line, reason) => {
    const found = problemsOf(file, line);
    expect(found.join("\n")).toContain(reason);
  });

  it.each([
    ["src/x.ts", "// Sharding (docs/scale.md §3)"],
    ["test/unit/layout/x.test.ts", 'import { y } from "../../../src/layout/index.ts";'],
    ["test/unit/layout/x.test.ts", "const d = join(ROOT, `../../fixtures/models/${fam}`);"],
    ["test/unit/prompt/x.test.ts", 'import { VOCAB_B64 } from "../../../src/generated/not-built-yet.js";'],
    ["docs/x.md", "[configuration](configuration.md), [upstream](https://github.com/sgl-project/sglang)"],
  ])("accepts %s: %s", (file, line) => {
    expect(problemsOf(file, line)).toEqual([]);
  });
});
