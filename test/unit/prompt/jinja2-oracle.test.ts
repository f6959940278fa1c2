// Differential test: kvedge's render of random preprocessed requests vs Jinja2 set up the way
// transformers' apply_chat_template sets it up. Needs python3 with jinja2: skipped locally without
// them (with a printed reason), required under CI=true (.ci/run installs python3-jinja2).
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { requireInCi } from "../../helpers/required.ts";
import { contentFormatOf, preprocessChat, PyNumber, renderTemplate, type TemplateId } from "../../../src/prompt/index.ts";

const TEMPLATE_DIR = fileURLToPath(new URL("../../../src/prompt/templates/", import.meta.url));

const hasJinja2 = requireInCi(spawnSync("python3", ["-c", "import jinja2"], { encoding: "utf8" }).status === 0, "python3 with jinja2", "the independent Jinja2 oracle for the chat-template renderer");

// transformers' environment: ImmutableSandboxedEnvironment(trim_blocks, lstrip_blocks, loopcontrols)
// with its own tojson (json.dumps, ensure_ascii=False, no key sorting) and raise_exception.
const ORACLE = `
import json, sys
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.ext import loopcontrols
from jinja2.exceptions import TemplateError
def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
def raise_exception(m):
    raise TemplateError(m)
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
tdir = sys.argv[1]
cache = {}
out = []
for line in sys.stdin:
    d = json.loads(line)
    t = cache.get(d["id"])
    if t is None:
        t = cache[d["id"]] = env.from_string(open(tdir + d["id"] + ".jinja", encoding="utf-8").read())
    c = d["ctx"]
    try:
        out.append(t.render(messages=c["messages"], tools=c["tools"], documents=None, add_generation_prompt=True, **c["kwargs"]))
    except Exception as e:
        out.append({"error": repr(e)})
sys.stdout.write(json.dumps(out))
`;

/** JSON whose numbers are written as their Python text, so json.loads restores int vs float. */
function pythonTypedJson(x: unknown): string {
  if (x instanceof PyNumber) return x.pythonText;
  if (x === null || x === undefined) return "null";
  if (typeof x !== "object") return JSON.stringify(x);
  if (Array.isArray(x)) return `[${x.map(pythonTypedJson).join(",")}]`;
  return `{${Object.entries(x).map(([k, v]) => `${JSON.stringify(k)}:${pythonTypedJson(v)}`).join(",")}}`;
}

function randomRequests(seed: number, count: number): Array<{ id: TemplateId; request: Record<string, unknown> }> {
  let s = seed;
  const rnd = (): number => (s = (Math.imul(s, 1103515245) + 12345) & 0x7fffffff) / 0x80000000;
  const pick = <T>(a: readonly T[]): T => a[Math.floor(rnd() * a.length)]!;
  const words = ["  lead", "trail  ", "\n\n", " \n x \n ", "</think>\n  y", "<think>\n r \n</think>\n\n z", "hello", "ünï 你好", "<tool_response>", "</tool_response>", 'a"b', "🎉", "", "\t"];
  const nums = ["1.0", "1e20", "-0.0", "1.5e-7", "3", "0.1", "12345678901234567890", "1e16", "0.00001", "-2", "2.5E+3"];
  const text = (): string => Array.from({ length: Math.floor(rnd() * 4) }, () => pick(words)).join("");
  const parts = (): unknown[] =>
    Array.from({ length: Math.floor(rnd() * 4) }, () => {
      const t = pick(["text", "image_url", "video_url", "input_text", "refusal", "text"]);
      if (t === "text" || t === "input_text") return { type: t, text: text() };
      if (t === "image_url") return { type: t, image_url: { url: "u" } };
      if (t === "video_url") return { type: t, video_url: { url: "v" } };
      return { type: t, refusal: "no" };
    });
  const args = (): string =>
    `{${Array.from({ length: Math.floor(rnd() * 4) }, (_, i) => `"k${i}": ${rnd() < 0.6 ? pick(nums) : JSON.stringify(text())}`).join(", ")}}`;
  const message = (i: number): Record<string, unknown> => {
    const role = pick(["user", "user", "assistant", "tool", "system"]);
    const c = rnd();
    const m: Record<string, unknown> = { role, content: role === "user" ? (c < 0.5 ? text() : parts()) : c < 0.4 ? text() : c < 0.7 ? parts() : c < 0.85 ? null : undefined };
    if (role === "assistant" && rnd() < 0.5) {
      m["tool_calls"] = Array.from({ length: 1 + Math.floor(rnd() * 2) }, (_, j) => ({ id: `c${i}${j}`, type: "function", function: { name: `fn${j}`, arguments: args() } }));
    }
    if (role === "assistant" && rnd() < 0.3) m["reasoning_content"] = text();
    return m;
  };
  const ids: TemplateId[] = ["qwen2vl", "qwen3vl-instruct", "qwen3vl-thinking"];
  return Array.from({ length: count }, (_, n) => {
    const request: Record<string, unknown> = { messages: Array.from({ length: 1 + Math.floor(rnd() * 6) }, (_, i) => message(i)) };
    if (rnd() < 0.4) {
      request["tools"] = [{ type: "function", function: { name: "t", description: text(), parameters: { type: "object", properties: { p: { type: "number", minimum: 0.5, maximum: 1e20 } } } } }];
    }
    if (rnd() < 0.3) request["chat_template_kwargs"] = { add_vision_id: rnd() < 0.5 };
    if (rnd() < 0.2) request["continue_final_message"] = true;
    return { id: ids[n % 3]!, request };
  });
}

describe.skipIf(!hasJinja2)("render = Jinja2 with transformers' settings (python3 + jinja2)", () => {
  it("1,500 random requests render byte-identically", () => {
    const lines: string[] = [];
    const ours: string[] = [];
    for (const { id, request } of randomRequests(20261130, 1500)) {
      let pre;
      try {
        pre = preprocessChat(request as never, contentFormatOf(id));
      } catch {
        continue; // refused requests (a lone continued assistant message) have nothing to compare
      }
      ours.push(renderTemplate(id, { messages: pre.messages, tools: pre.tools, kwargs: pre.templateKwargs }));
      lines.push(`{"id":${JSON.stringify(id)},"ctx":${pythonTypedJson({ messages: pre.messages, tools: pre.tools, kwargs: pre.templateKwargs })}}`);
    }
    expect(lines.length).toBeGreaterThan(1400);
    const py = spawnSync("python3", ["-c", ORACLE, TEMPLATE_DIR], { input: lines.join("\n"), encoding: "utf8", maxBuffer: 256 * 1024 * 1024 });
    expect(py.status, py.stderr).toBe(0);
    const theirs = JSON.parse(py.stdout) as Array<string | { error: string }>;
    const mismatches = theirs.flatMap((t, i) => (t === ours[i] ? [] : [{ i, jinja2: t, kvedge: ours[i] }]));
    expect(mismatches.slice(0, 3)).toEqual([]);
  });
});
