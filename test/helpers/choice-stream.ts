/**
 * A choice's stream as a client assembles it: `text` cut into pieces of `sizes` (cycled) and pushed
 * through kvedge's ChoiceOutput, then its finish; reasoning and content deltas joined, and per call
 * index the name and arguments of its delta (null for a delta without a name, the value SGLang's
 * golden answers hold for a call that never got one).
 */
import { ChoiceOutput, type ChatOutputPlan } from "../../src/proxy/chat-output.ts";

export interface StreamedAnswer {
  reasoning: string;
  content: string;
  calls: { name: string | null; arguments: string }[];
}

export function streamedAnswer(p: ChatOutputPlan, text: string, sizes: readonly number[]): StreamedAnswer {
  const out = new ChoiceOutput(p);
  const r: StreamedAnswer = { reasoning: "", content: "", calls: [] };
  const take = (ds: ReturnType<ChoiceOutput["push"]>) => {
    for (const d of ds) {
      if (d.kind === "reasoning") r.reasoning += d.text;
      else if (d.kind === "content") r.content += d.text;
      else r.calls[d.call.index] = { name: d.call.function.name ?? null, arguments: d.call.function.arguments };
    }
  };
  for (let at = 0, k = 0; at < text.length; k++) {
    const n = sizes[k % sizes.length]!;
    take(out.push(text.slice(at, at + n)));
    at += n;
  }
  take(out.finish());
  return r;
}
