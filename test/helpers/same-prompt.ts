/**
 * The turn chain's prompt against the whole path's (preparePrompt): the text, its media and dropped
 * parts, and the continued assistant prefix must all be equal.
 */
import { expect } from "vitest";
import type { PreparedPrompt } from "../../src/prompt/index.ts";

export function expectSamePrompt(chained: PreparedPrompt, whole: PreparedPrompt): void {
  expect(chained.text).toBe(whole.text);
  expect(chained.mediaParts).toEqual(whole.mediaParts);
  expect(chained.droppedParts).toEqual(whole.droppedParts);
  expect(chained.assistantPrefix).toBe(whole.assistantPrefix);
}
