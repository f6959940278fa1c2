// The tool-call (qwen25) and reasoning (qwen3 / qwen3-thinking) parsers against SGLang's own parser
// code: test/fixtures/golden/sglang-parsers/ holds what SGLang's modules answered for generated
// model outputs, one-shot and streamed at several chunkings (generator and provenance:
// scripts/golden/gen_sglang_parsers.py; each file's `sources` name every upstream file by sha256
// and commit, or by the source index's id where the commit is not known). Two sets: cases.json
// (SGLang's 2025 tool-call modules, stream assembled from the detectors alone) and
// cases-current.json (the newest stored modules, with current serving_chat.py's end of stream:
// parse_stream_end and _check_for_unstreamed_tool_args). Every case is replayed through kvedge in
// both modes. Where kvedge follows SGLang the answers must be equal; where it differs on purpose
// (docs/api.md "Differences") the answer must be SGLang's own answer changed by exactly that
// documented rule; anything else fails.
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { describe, expect, it } from "vitest";
import type { ToolDefinition } from "../../../src/api/openai-schema.ts";
import { finishChoiceText, type ChatOutputPlan } from "../../../src/proxy/chat-output.ts";
import { pyStrip } from "../../../src/util/py-str.ts";
import { streamedAnswer } from "../../helpers/choice-stream.ts";

interface Call {
  name: string | null;
  arguments: string;
}
interface Answer {
  reasoning: string;
  content: string;
  calls: Call[];
}
interface ToolAnswer {
  hasToolCall: boolean;
  normal: string;
  calls: Call[];
  /** The detector raised (a non-object item); `calls`/`normal` are then the parse without such items. */
  error?: string;
}
interface GoldenCase {
  id: string;
  text: string;
  tools: boolean;
  reasoning: { force: boolean; stream: boolean } | null;
  ownChunking: number[];
  sglang: {
    oneShot: { reasoning: string | null; normal: string; tool: ToolAnswer | null; toolOnWhole: ToolAnswer | null };
    stream: (Answer & { chunkings: number[]; calls: (Call & { index: number })[] })[];
  };
}
interface GoldenFile {
  /** `commit` is null when the source index holds that text without a commit id (`indexId` then). */
  sources: { repo: string; path: string; commit: string | null; commitKnown?: false; indexId?: string; note?: string; sha256: string }[];
  tools: string[];
  chunkings: number[][];
  cases: GoldenCase[];
}

const readGolden = (name: string) => JSON.parse(readFileSync(resolve(import.meta.dirname, "../../fixtures/golden/sglang-parsers", name), "utf8")) as GoldenFile;
const SETS: [string, GoldenFile][] = [
  ["SGLang 2025 tool-call modules (cases.json)", readGolden("cases.json")],
  ["current SGLang modules and serving end of stream (cases-current.json)", readGolden("cases-current.json")],
];
const tool = (name: string): ToolDefinition => ({ type: "function", function: { name, description: undefined, parameters: undefined, strict: false } });

function plan(golden: GoldenFile, c: GoldenCase): ChatOutputPlan {
  return { tools: c.tools ? { list: golden.tools.map(tool) } : null, reasoning: c.reasoning, logprobs: false, continuousUsage: false };
}

/** kvedge one-shot, with null read as "" (SGLang's `x or None`). */
function kvedgeOneShot(p: ChatOutputPlan, text: string): Answer {
  const m = finishChoiceText(p, text, "stop", null);
  return { reasoning: m.reasoning_content ?? "", content: m.content ?? "", calls: (m.tool_calls ?? []).map((c) => ({ name: c.function.name, arguments: c.function.arguments })) };
}

/**
 * What SGLang's server answers one-shot: ReasoningParser.parse_non_stream, then
 * FunctionCallParser.parse_non_stream (function_call_parser.py @00828e56: the detector's
 * normal_text when it found calls or markup, else the whole text), and serving_chat.py's
 * `except Exception` around it (the text as it is, no calls).
 */
function sglangOneShot(c: GoldenCase): Answer {
  const o = c.sglang.oneShot;
  const t = o.tool;
  const base = { reasoning: o.reasoning ?? "", content: o.normal, calls: [] as Call[] };
  if (t === null || t.error !== undefined) return base;
  if (t.calls.length > 0 || t.hasToolCall) return { ...base, content: t.normal, calls: t.calls };
  return base;
}

type OneShotClass = "late-think" | "no-call-markup" | "non-object-item";

/**
 * kvedge's documented one-shot answer, built from SGLang's own outputs:
 * - late-think: without force_reasoning only a leading `<think>` opens reasoning, so the whole
 *   output goes to the tool-call parser (SGLang's answer for the whole text, `toolOnWhole`);
 * - no-call-markup: markup that yields no call leaves the whole text in content (SGLang answers the
 *   text before the markup);
 * - non-object-item: an item that is not an object is skipped and the block's other calls kept
 *   (in both sets SGLang's parse_base_json raises there, and serving_chat's `except` answers the
 *   text without calls; a stored base_format_detector.py with a fail-open layer skips such items).
 */
function documentedOneShot(c: GoldenCase): { answer: Answer; classes: OneShotClass[] } {
  const o = c.sglang.oneShot;
  const classes: OneShotClass[] = [];
  const lateThink = c.reasoning !== null && !c.reasoning.force && !c.text.startsWith("<think>") && c.text.includes("<think>");
  if (lateThink) classes.push("late-think");
  const reasoning = lateThink ? "" : (o.reasoning ?? "");
  const normal = lateThink ? c.text : o.normal;
  const t = lateThink ? o.toolOnWhole : o.tool;
  if (t === null) return { answer: { reasoning, content: normal, calls: [] }, classes };
  if (t.error !== undefined && t.calls.length > 0) classes.push("non-object-item");
  if (t.calls.length > 0) return { answer: { reasoning, content: t.normal, calls: t.calls }, classes };
  if (t.hasToolCall && t.error === undefined && t.normal !== normal) classes.push("no-call-markup");
  return { answer: { reasoning, content: normal, calls: [] }, classes };
}

const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b);
/** Python `s.lstrip()`. */
const pyLstrip = (s: string) => pyStrip(s + "x").slice(0, -1);

describe.each(SETS)("kvedge's parsers = SGLang's parser code on generated outputs (golden, both modes): %s", (_set, golden) => {
  it("the golden file names SGLang's parser files by sha256 and commit (or, commit unknown, the index id)", () => {
    const paths = golden.sources.filter((s) => s.repo === "sgl-project/sglang").map((s) => s.path);
    for (const p of ["python/sglang/srt/parser/reasoning_parser.py", "python/sglang/srt/function_call/qwen25_detector.py", "python/sglang/srt/function_call/base_format_detector.py"]) {
      expect(paths).toContain(p);
    }
    for (const s of golden.sources) {
      expect(s.sha256).toMatch(/^[0-9a-f]{64}$/);
      if (s.commit !== null) expect(s.commit).toMatch(/^[0-9a-f]{40}$/);
      else expect([s.commitKnown, s.indexId, s.note?.startsWith("commit not known")]).toEqual([false, expect.stringMatching(/^[0-9]+$/), true]);
    }
    expect(golden.cases.length).toBeGreaterThanOrEqual(500);
  });

  it("one-shot: equal to SGLang, or SGLang's answer changed by exactly a documented rule", () => {
    const counts: Record<string, number> = { agree: 0, "late-think": 0, "no-call-markup": 0, "non-object-item": 0, withCalls: 0 };
    const mismatches: unknown[] = [];
    for (const c of golden.cases) {
      const got = kvedgeOneShot(plan(golden, c), c.text);
      const sglang = sglangOneShot(c);
      const { answer, classes } = documentedOneShot(c);
      if (!same(got, answer)) mismatches.push({ id: c.id, text: c.text, reasoning: c.reasoning, tools: c.tools, sglang, documented: answer, got });
      if (answer.calls.length > 0) counts["withCalls"]!++;
      if (same(answer, sglang)) counts["agree"]!++;
      else if (classes.length === 0) mismatches.push({ id: c.id, undocumented: true, sglang, got });
      for (const k of same(answer, sglang) ? [] : classes) counts[k]!++;
    }
    expect(mismatches.slice(0, 3)).toEqual([]);
    // The generated outputs reach every rule.
    expect(counts["withCalls"]).toBeGreaterThan(150);
    for (const k of ["late-think", "no-call-markup", "non-object-item"]) expect(counts[k], k).toBeGreaterThan(0);
    expect(counts["agree"]).toBeGreaterThan(golden.cases.length / 2);
  });

  it("stream: equal to SGLang's stream where SGLang's stream answers its own one-shot answer; else equal to kvedge's one-shot answer", () => {
    const counts: Record<string, number> = { runs: 0, agree: 0, sglangStreamDiffers: 0, leadingWhitespace: 0 };
    const mismatches: unknown[] = [];
    const whole = golden.chunkings.length;
    for (const c of golden.cases) {
      const p = plan(golden, c);
      const kOneShot = kvedgeOneShot(p, c.text);
      const sglang = sglangOneShot(c);
      for (const s of c.sglang.stream) {
        const theirs: Answer = { reasoning: s.reasoning, content: s.content, calls: s.calls.map(({ name, arguments: a }) => ({ name, arguments: a })) };
        for (const k of s.chunkings) {
          counts["runs"]!++;
          const sizes = k < whole ? golden.chunkings[k]! : k === whole ? [Math.max(1, c.text.length)] : c.ownChunking;
          const got = streamedAnswer(p, c.text, sizes);
          if (same(theirs, sglang) && same(kOneShot, sglang)) {
            counts["agree"]!++;
            if (!same(got, theirs)) mismatches.push({ id: c.id, chunking: sizes, text: c.text, want: theirs, got });
            continue;
          }
          // SGLang's stream and one-shot disagree (or kvedge's one-shot differs by a documented
          // rule): kvedge's stream answers its own one-shot answer, except that whitespace at the
          // very start of an answer that calls a tool is streamed (the one-shot parse strips it).
          if (!same(theirs, sglang)) counts["sglangStreamDiffers"]!++;
          const lead = kOneShot.calls.length > 0 ? got.content.slice(0, got.content.length - pyLstrip(got.content).length) : "";
          if (lead !== "") counts["leadingWhitespace"]!++;
          if (!same({ ...got, content: got.content.slice(lead.length) }, kOneShot)) mismatches.push({ id: c.id, chunking: sizes, text: c.text, want: kOneShot, got, sglangStream: theirs });
        }
      }
    }
    expect(mismatches.slice(0, 3)).toEqual([]);
    expect(counts["runs"]).toBe(golden.cases.length * (golden.chunkings.length + 2));
    expect(counts["agree"]).toBeGreaterThan(0);
    expect(counts["sglangStreamDiffers"]).toBeGreaterThan(0);
  });
});
