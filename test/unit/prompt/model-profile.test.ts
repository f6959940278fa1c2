import { describe, expect, it } from "vitest";
import { modelBasename, ModelProfileOverridesSchema, ModelProfileSchema, resolveModelProfile } from "../../../src/prompt/index.ts";

describe("model profiles", () => {
  it.each([
    ["Qwen/Qwen2-VL-7B-Instruct", "qwen2_vl", "qwen2vl"],
    ["Qwen/Qwen2.5-VL-7B-Instruct", "qwen2_5_vl", "qwen2vl"],
    ["Qwen/Qwen3-VL-8B-Instruct", "qwen3_vl", "qwen3vl-instruct"],
    ["Qwen/Qwen3-VL-8B-Thinking", "qwen3_vl", "qwen3vl-thinking"],
    ["/models/qwen3-vl-30b-a3b-instruct/", "qwen3_vl", "qwen3vl-instruct"],
    ["QWEN2.5-VL-72B-INSTRUCT", "qwen2_5_vl", "qwen2vl"],
  ])("%s → %s / %s", (name, family, templateId) => {
    expect(resolveModelProfile(name)).toEqual({ family, templateId });
  });

  it("unknown models and base checkpoints resolve to null", () => {
    expect(resolveModelProfile("Qwen/Qwen2-VL-7B")).toBeNull();
    expect(resolveModelProfile("meta-llama/Llama-3-8B-Instruct")).toBeNull();
  });

  it("overrides: exact name first, then basename, then the table", () => {
    const overrides = ModelProfileOverridesSchema.parse({
      "my-vl": { family: "qwen3_vl", templateId: "qwen3vl-thinking" },
      "org/Qwen3-VL-8B-Instruct": { family: "qwen3_vl", templateId: "qwen3vl-thinking" },
    });
    expect(resolveModelProfile("my-vl", overrides)).toEqual({ family: "qwen3_vl", templateId: "qwen3vl-thinking" });
    expect(resolveModelProfile("/srv/MY-VL", overrides)).toEqual({ family: "qwen3_vl", templateId: "qwen3vl-thinking" });
    expect(resolveModelProfile("Qwen/Qwen3-VL-8B-Instruct", overrides)?.templateId).toBe("qwen3vl-thinking");
    expect(resolveModelProfile("Qwen/Qwen2-VL-2B-Instruct", overrides)?.templateId).toBe("qwen2vl");
  });

  it("the schema rejects a template of another family and unknown keys", () => {
    expect(ModelProfileSchema.safeParse({ family: "qwen2_vl", templateId: "qwen3vl-instruct" }).success).toBe(false);
    expect(ModelProfileSchema.safeParse({ family: "qwen3_vl", templateId: "qwen2vl" }).success).toBe(false);
    expect(ModelProfileSchema.safeParse({ family: "qwen3_vl", templateId: "qwen3vl-instruct", x: 1 }).success).toBe(false);
    expect(() => resolveModelProfile("x", { x: { family: "qwen2_vl", templateId: "qwen3vl-thinking" } })).toThrow();
  });

  it("basename is case-folded and path-stripped", () => {
    expect(modelBasename("Qwen/Qwen3-VL-8B-Instruct")).toBe("qwen3-vl-8b-instruct");
    expect(modelBasename("C:\\models\\Qwen2-VL-7B-Instruct\\")).toBe("qwen2-vl-7b-instruct");
  });
});
