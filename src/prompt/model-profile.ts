/**
 * Which chat template and tokenizer family a served model name maps to. Resolution is by the
 * case-insensitive basename (`Qwen/Qwen3-VL-8B-Instruct` → `qwen3-vl-8b-instruct`), so local paths
 * and hub ids both work; deployments can add or override entries by exact name or basename.
 * Unknown names resolve to null: the caller refuses them rather than guessing a template.
 */
import { z } from "zod";

export const ModelFamilySchema = z.enum(["qwen2_vl", "qwen2_5_vl", "qwen3_vl"]);
export type ModelFamily = z.infer<typeof ModelFamilySchema>;

export const TemplateIdSchema = z.enum(["qwen2vl", "qwen3vl-instruct", "qwen3vl-thinking"]);
export type TemplateId = z.infer<typeof TemplateIdSchema>;

/** Templates each family may use: Qwen2/2.5-VL share one template, Qwen3-VL has two variants. */
export const TEMPLATES_BY_FAMILY: Readonly<Record<ModelFamily, readonly TemplateId[]>> = {
  qwen2_vl: ["qwen2vl"],
  qwen2_5_vl: ["qwen2vl"],
  qwen3_vl: ["qwen3vl-instruct", "qwen3vl-thinking"],
};

export function isCompatible(family: ModelFamily, templateId: TemplateId): boolean {
  return TEMPLATES_BY_FAMILY[family].includes(templateId);
}

export const ModelProfileSchema = z
  .object({ family: ModelFamilySchema, templateId: TemplateIdSchema })
  .strict()
  .refine((p) => isCompatible(p.family, p.templateId), {
    message: "templateId is not a template of this model family",
    path: ["templateId"],
  });
export type ModelProfile = z.infer<typeof ModelProfileSchema>;

/** Override table from config: served name (exact) or basename (case-insensitive) → profile. */
export const ModelProfileOverridesSchema = z.record(z.string().min(1), ModelProfileSchema);
export type ModelProfileOverrides = z.infer<typeof ModelProfileOverridesSchema>;

function entries(family: ModelFamily, templateId: TemplateId, names: string[]): Array<[string, ModelProfile]> {
  return names.map((n) => [n.toLowerCase(), { family, templateId }]);
}

/** Official instruction-tuned checkpoints (lower-cased basenames); base models have no chat template. */
export const SUPPORTED_MODELS: ReadonlyMap<string, ModelProfile> = new Map([
  ...entries("qwen2_vl", "qwen2vl", ["Qwen2-VL-2B-Instruct", "Qwen2-VL-7B-Instruct", "Qwen2-VL-72B-Instruct"]),
  ...entries("qwen2_5_vl", "qwen2vl", [
    "Qwen2.5-VL-3B-Instruct",
    "Qwen2.5-VL-7B-Instruct",
    "Qwen2.5-VL-32B-Instruct",
    "Qwen2.5-VL-72B-Instruct",
  ]),
  ...entries("qwen3_vl", "qwen3vl-instruct", [
    "Qwen3-VL-2B-Instruct",
    "Qwen3-VL-4B-Instruct",
    "Qwen3-VL-8B-Instruct",
    "Qwen3-VL-32B-Instruct",
    "Qwen3-VL-30B-A3B-Instruct",
    "Qwen3-VL-235B-A22B-Instruct",
  ]),
  ...entries("qwen3_vl", "qwen3vl-thinking", [
    "Qwen3-VL-2B-Thinking",
    "Qwen3-VL-4B-Thinking",
    "Qwen3-VL-8B-Thinking",
    "Qwen3-VL-32B-Thinking",
    "Qwen3-VL-30B-A3B-Thinking",
    "Qwen3-VL-235B-A22B-Thinking",
  ]),
]);

/** `Qwen/Qwen3-VL-8B-Instruct/` → `qwen3-vl-8b-instruct`. */
export function modelBasename(servedName: string): string {
  const trimmed = servedName.trim().replace(/[/\\]+$/, "");
  const cut = Math.max(trimmed.lastIndexOf("/"), trimmed.lastIndexOf("\\"));
  return trimmed.slice(cut + 1).toLowerCase();
}

/**
 * Profile for a served model name: an override for the exact name wins, then an override for the
 * basename, then the built-in table. Overrides are validated (call ModelProfileOverridesSchema at
 * config load to fail early; this re-checks so a bad table can never pick a mismatched template).
 */
export function resolveModelProfile(servedName: string, overrides?: ModelProfileOverrides): ModelProfile | null {
  const base = modelBasename(servedName);
  if (overrides) {
    const exact = overrides[servedName];
    if (exact) return ModelProfileSchema.parse(exact);
    for (const [key, profile] of Object.entries(overrides)) {
      if (modelBasename(key) === base) return ModelProfileSchema.parse(profile);
    }
  }
  return SUPPORTED_MODELS.get(base) ?? null;
}
