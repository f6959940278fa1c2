/**
 * Scripted model output, so tests can drive the whole chat path (tool calls, thinking blocks,
 * JSON for a schema) through a real worker protocol: a prompt holding `[[sim-output:<base64url>]]`
 * makes the simulated model answer exactly that UTF-8 text (its tokens, then EOS). The last marker in
 * the prompt wins, so a multi-turn conversation scripts its newest turn. Not in SGLang.
 *
 * Also the simulator's stand-ins for two engine outputs: deterministic per-token logprobs (SGLang's
 * `[logprob, token_id, text|null]` triples, sgl-project/sglang python/sglang/srt/managers/
 * tokenizer_manager.py @9d147fd L2178-2351) and the reasoning
 * token count a scheduler reports when `require_reasoning` is set (tokens up to and including the
 * one that closes `</think>`).
 */
import type { QwenTokenizer } from "../../src/prompt/tokenizer/index.ts";

const MARKER = /\[\[sim-output:([A-Za-z0-9_-]*)\]\]/g;

/** The marker that scripts `text` as the model's answer (for tests). */
export function simOutputMarker(text: string): string {
  return `[[sim-output:${Buffer.from(text, "utf8").toString("base64url")}]]`;
}

/** The scripted answer of a prompt, or null. */
export function scriptedAnswer(prompt: string): string | null {
  let last: string | null = null;
  for (const m of prompt.matchAll(MARKER)) last = m[1]!;
  return last === null ? null : Buffer.from(last, "base64url").toString("utf8");
}

export type LogprobTriple = [number, number, string | null];

/** A deterministic logprob in (-2, 0] for token `id` at output position `pos`. */
function fakeLogprob(id: number, pos: number): number {
  const h = (Math.imul(id, 2654435761) ^ Math.imul(pos + 1, 40503)) >>> 0;
  return -Math.round((h % 2000) / 1.0) / 1000;
}

/**
 * `output_token_logprobs` / `output_top_logprobs` for output ids: the chosen token is always the most
 * likely alternative, followed by `topN - 1` other vocabulary words with lower logprobs.
 */
export function fakeOutputLogprobs(
  ids: readonly number[],
  tokenizer: QwenTokenizer,
  alternatives: readonly number[],
  topN: number,
  withText: boolean,
): { tokens: LogprobTriple[]; top: LogprobTriple[][] } {
  const text = (id: number): string | null => (withText ? tokenizer.decode([id]) : null);
  const tokens: LogprobTriple[] = [];
  const top: LogprobTriple[][] = [];
  ids.forEach((id, pos) => {
    const lp = fakeLogprob(id, pos);
    tokens.push([lp, id, text(id)]);
    const alts: LogprobTriple[] = topN > 0 ? [[lp, id, text(id)]] : [];
    for (let j = 0; alts.length < topN && j < alternatives.length; j++) {
      const alt = alternatives[(pos + j) % alternatives.length]!;
      if (alt !== id) alts.push([lp - 0.25 * alts.length - 0.5, alt, text(alt)]);
    }
    top.push(alts);
  });
  return { tokens, top };
}

/** Output tokens up to and including the one that completes `</think>` (all of them when none does). */
export function reasoningTokenCount(ids: readonly number[], tokenizer: QwenTokenizer): number {
  let text = "";
  for (let k = 0; k < ids.length; k++) {
    text += tokenizer.decode([ids[k]!]);
    if (text.includes("</think>")) return k + 1;
  }
  return ids.length;
}
