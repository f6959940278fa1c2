// Template assets: SHA-256 pins enforced by the build, generated module = committed files, parse
// cache, rendering with code generation from strings disabled (as in workerd).
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";
import { CHAT_TEMPLATES } from "../../../src/generated/templates.js";
import { contentFormatOf, detectContentFormat, getTemplate, TemplateIdSchema } from "../../../src/prompt/index.ts";

const ROOT = fileURLToPath(new URL("../../../", import.meta.url));
const TEMPLATE_DIR = join(ROOT, "src/prompt/templates");
const IDS = TemplateIdSchema.options;

interface TemplatesBuilder {
  build(options?: { srcDir?: string; outDir?: string }): Promise<{ ids: string[]; outFile: string }>;
  PINNED_TEMPLATES: Record<string, { sha256: string; bytes: number }>;
}
const builderUrl = pathToFileURL(join(ROOT, "scripts/assets/15-templates.mjs")).href;
const loadBuilder = (): Promise<TemplatesBuilder> => import(builderUrl);

const temps: string[] = [];
function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), "kvedge-templates-"));
  temps.push(d);
  return d;
}
afterAll(() => {
  for (const d of temps) rmSync(d, { recursive: true, force: true });
});

function copyTemplates(): { src: string; out: string } {
  const root = tempDir();
  const src = join(root, "src");
  mkdirSync(src);
  for (const id of IDS) copyFileSync(join(TEMPLATE_DIR, `${id}.jinja`), join(src, `${id}.jinja`));
  return { src, out: join(root, "out") };
}

describe("template build (scripts/assets/15-templates.mjs)", () => {
  it("pins match the values in src/prompt/templates/README.md", async () => {
    const { PINNED_TEMPLATES } = await loadBuilder();
    // Table rows: | `<id>.jinja` | family | bytes | `<sha256>` | ...
    const readme = readFileSync(join(TEMPLATE_DIR, "README.md"), "utf8");
    const documented = Object.fromEntries(
      [...readme.matchAll(/^\| `([\w-]+)\.jinja` \|[^|]*\| (\d+) \| `([0-9a-f]{64})` \|/gm)].map((m) => [m[1], { sha256: m[3], bytes: Number(m[2]) }]),
    );
    expect(Object.keys(documented)).toEqual([...IDS]);
    expect(PINNED_TEMPLATES).toEqual(documented);
  });

  it("builds a module whose strings are byte-identical to the files", async () => {
    const { build } = await loadBuilder();
    const { src, out } = copyTemplates();
    const res = await build({ srcDir: src, outDir: out });
    expect(res.ids).toEqual([...IDS]);
    const mod = (await import(pathToFileURL(res.outFile).href)) as typeof import("../../../src/generated/templates.js");
    for (const id of IDS) {
      const bytes = readFileSync(join(TEMPLATE_DIR, `${id}.jinja`));
      expect(Buffer.from(mod.CHAT_TEMPLATES[id].text, "utf8").equals(bytes)).toBe(true);
      expect(mod.CHAT_TEMPLATES[id].sha256).toBe(createHash("sha256").update(bytes).digest("hex"));
    }
    expect(readFileSync(join(out, "templates.d.ts"), "utf8")).toContain('"qwen2vl" | "qwen3vl-instruct" | "qwen3vl-thinking"');
  });

  it("refuses a modified template (one trailing newline is enough)", async () => {
    const { build } = await loadBuilder();
    const { src, out } = copyTemplates();
    writeFileSync(join(src, "qwen2vl.jinja"), readFileSync(join(src, "qwen2vl.jinja"), "utf8") + "\n");
    await expect(build({ srcDir: src, outDir: out })).rejects.toThrow(/qwen2vl\.jinja does not match its pin.*git checkout -- src\/prompt\/templates\/qwen2vl\.jinja/);
  });

  it("refuses a missing pinned template and an unpinned extra one", async () => {
    const { build } = await loadBuilder();
    const a = copyTemplates();
    rmSync(join(a.src, "qwen3vl-thinking.jinja"));
    await expect(build({ srcDir: a.src, outDir: a.out })).rejects.toThrow(/"qwen3vl-thinking.jinja" is missing/);
    const b = copyTemplates();
    writeFileSync(join(b.src, "other.jinja"), "{{ messages }}");
    await expect(build({ srcDir: b.src, outDir: b.out })).rejects.toThrow(/other\.jinja has no pinned SHA-256/);
  });

  it("the generated module in src/generated matches the committed files", () => {
    for (const id of IDS) {
      expect(CHAT_TEMPLATES[id].text).toBe(readFileSync(join(TEMPLATE_DIR, `${id}.jinja`), "utf8"));
    }
  });
});

describe("template runtime", () => {
  it("parses each template once per isolate", () => {
    for (const id of IDS) expect(getTemplate(id)).toBe(getTemplate(id));
  });

  it("content format is openai for the VL templates (SGLang keyword shortcut), string otherwise", () => {
    for (const id of IDS) expect(contentFormatOf(id)).toBe("openai");
    expect(detectContentFormat("{% for m in messages %}{{ m.content }}{% endfor %}")).toBe("string");
    expect(detectContentFormat("{%- for c in message['content'] %}{{ c.text }}{% endfor %}")).toBe("openai");
  });

  it("renders with code generation from strings disabled (workerd forbids eval/new Function)", async () => {
    const dir = tempDir();
    const script = join(dir, "render.ts");
    writeFileSync(
      script,
      `import { renderChatPrompt } from ${JSON.stringify(pathToFileURL(join(ROOT, "src/prompt/index.ts")).href)};\n` +
        `let blocked = false; try { new Function("return 1"); } catch { blocked = true; }\n` +
        `const text = renderChatPrompt("qwen3_vl", "qwen3vl-thinking", { messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "u" } }, { type: "text", text: "hi" }] }], tools: [{ type: "function", function: { name: "f", parameters: { x: 1e20 } } }] });\n` +
        `console.log(JSON.stringify({ blocked, text }));\n`,
    );
    const { stdout } = await promisify(execFile)(process.execPath, ["--disallow-code-generation-from-strings", script], { cwd: ROOT });
    const out = JSON.parse(stdout) as { blocked: boolean; text: string };
    expect(out.blocked).toBe(true);
    expect(out.text).toContain('{"x": 1e+20}');
    expect(out.text.endsWith("<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>hi<|im_end|>\n<|im_start|>assistant\n<think>\n")).toBe(true);
  });
});
