/**
 * `/generate` logprob output → OpenAI `choices[].logprobs`, as SGLang's chat endpoint builds it
 * (sgl-project/sglang python/sglang/srt/entrypoints/openai/utils.py `to_openai_style_logprobs` and
 * serving_chat.py @0c078e6f `_process_logprobs_tokens`): `meta_info.output_token_logprobs` holds
 * `[logprob, token_id, token_text]` per output token (text present because the router sends
 * `return_text_in_logprobs: true`), `output_top_logprobs` a list of such triples per position (or
 * null). Each token becomes `{token, bytes: UTF-8 of token, logprob, top_logprobs: [...]}`; the top
 * alternatives go through a dict keyed by token text, so equal texts collapse into one entry holding
 * the last logprob at the first position (Python dict semantics). Streams slice both arrays by the
 * count already sent (sgl-project/sglang python/sglang/srt/managers/tokenizer_manager.py @9d147fd
 * L2178-2351).
 */
import { z } from "zod";

const Triple = z.tuple([z.number().nullable(), z.number().int(), z.string().nullable()]).rest(z.unknown());
export const LogprobMetaSchema = z.looseObject({
  output_token_logprobs: z.array(Triple).optional(),
  output_top_logprobs: z.array(z.array(Triple).nullable()).optional(),
});
export type LogprobMeta = z.output<typeof LogprobMetaSchema>;

export interface TopLogprob {
  token: string;
  bytes: number[];
  logprob: number;
}
export interface TokenLogprob extends TopLogprob {
  top_logprobs: TopLogprob[];
}
export interface ChoiceLogprobs {
  content: TokenLogprob[];
}

const encoder = new TextEncoder();
function bytesOf(s: string): number[] {
  return Array.from(encoder.encode(s));
}

/** Python's `float('-inf')` serialises as -Infinity; JSON has no such value, so clamp as OpenAI does. */
function finite(x: number | null): number {
  if (x === null || Number.isNaN(x)) return -9999;
  return Number.isFinite(x) ? x : x < 0 ? -9999 : 0;
}

/** Entries `from`…end of the logprob arrays as OpenAI token logprobs. */
export function toChoiceLogprobs(meta: LogprobMeta, from = 0): ChoiceLogprobs {
  const tokens = meta.output_token_logprobs ?? [];
  const tops = meta.output_top_logprobs ?? [];
  const content: TokenLogprob[] = [];
  for (let i = from; i < tokens.length; i++) {
    const [lp, , text] = tokens[i]!;
    const token = text ?? "";
    const top: TopLogprob[] = [];
    const alternatives = tops[i];
    if (alternatives) {
      const byText = new Map<string, number>();
      for (const [alp, , atext] of alternatives) byText.set(atext ?? "", finite(alp));
      for (const [t, v] of byText) top.push({ token: t, bytes: bytesOf(t), logprob: v });
    }
    content.push({ token, bytes: bytesOf(token), logprob: finite(lp), top_logprobs: top });
  }
  return { content };
}
