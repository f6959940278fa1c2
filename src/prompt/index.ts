/**
 * Prompt rendering: an OpenAI chat request → the exact prompt string SGLang renders for it
 * (preprocessing in messages.ts, template in template.ts), plus the media parts in prompt order.
 * Rules, gaps and the number policy: docs/prompt.md.
 */
import { InternalError } from "../api/errors.ts";
import { preprocessChat, type ChatRequestLike, type DroppedPart, type MediaPart } from "./messages.ts";
import { isCompatible, type ModelFamily, type ModelProfile, type TemplateId } from "./model-profile.ts";
import { contentFormatOf, renderTemplate, templateSource } from "./template.ts";

export type { ChatRequestLike, DroppedPart, MediaPart } from "./messages.ts";
export { preprocessChat } from "./messages.ts";
export type { ModelFamily, ModelProfile, TemplateId } from "./model-profile.ts";
export { modelBasename, ModelProfileOverridesSchema, ModelProfileSchema, resolveModelProfile, TemplateIdSchema } from "./model-profile.ts";
export { contentFormatOf, detectContentFormat, getTemplate, renderTemplate } from "./template.ts";
export { parseJsonKeepingNumbers, parseToolsKeepingNumbers, PyNumber, pythonNumberTextFromLexeme, pythonNumberTextFromValue } from "./py-json.ts";
export { pythonFloatRepr } from "../util/py-float.ts";

export interface PreparedPrompt {
  /** The full prompt: rendered template + continuation prefix (SGLang's `text` for /generate). */
  text: string;
  /** Image, video and audio parts in order of appearance (SGLang's image_data/video_data order per kind). */
  mediaParts: MediaPart[];
  /** Audio parts were present: Qwen-VL models have no audio input; the edge should refuse them. */
  hasAudio: boolean;
  /** Parts SGLang drops without error (unknown types), for logging or refusal by the edge. */
  droppedParts: DroppedPart[];
  /** continue_final_message prefix appended after the generation prompt, or null. */
  assistantPrefix: string | null;
  family: ModelFamily;
  templateId: TemplateId;
  /** SHA-256 of the template used, to compare with the worker's snapshot. */
  templateSha256: string;
}

function checkPairing(family: ModelFamily, templateId: TemplateId): void {
  if (!isCompatible(family, templateId)) {
    throw new InternalError(`chat template ${templateId} is not a template of model family ${family}`);
  }
}

/** Preprocesses and renders one request for a model profile. Client errors throw InvalidRequestError. */
export function preparePrompt(request: ChatRequestLike, profile: ModelProfile): PreparedPrompt {
  checkPairing(profile.family, profile.templateId);
  const pre = preprocessChat(request, contentFormatOf(profile.templateId));
  const rendered = renderTemplate(profile.templateId, { messages: pre.messages, tools: pre.tools, kwargs: pre.templateKwargs });
  return assemblePrompt(rendered, pre, profile);
}

/** The prompt from a rendered template and its request's parts (also the turn chain's, turn-chain.ts). */
export function assemblePrompt(
  rendered: string,
  parts: Pick<PreparedPrompt, "mediaParts" | "hasAudio" | "droppedParts" | "assistantPrefix">,
  profile: ModelProfile,
): PreparedPrompt {
  return {
    text: rendered + (parts.assistantPrefix ?? ""),
    mediaParts: parts.mediaParts,
    hasAudio: parts.hasAudio,
    droppedParts: parts.droppedParts,
    assistantPrefix: parts.assistantPrefix,
    family: profile.family,
    templateId: profile.templateId,
    templateSha256: templateSource(profile.templateId).sha256,
  };
}

/**
 * The prompt string SGLang's /v1/chat/completions renders for `request` (the simulated worker's
 * entry point). Accepts any OpenAI-shaped request; extra fields such as tool_choice,
 * continue_final_message and reasoning_effort are honoured when present.
 */
export function renderChatPrompt(
  family: ModelFamily,
  templateId: TemplateId,
  request: { messages: unknown[]; tools?: unknown[]; chat_template_kwargs?: Record<string, unknown> },
): string {
  return preparePrompt(request, { family, templateId }).text;
}
