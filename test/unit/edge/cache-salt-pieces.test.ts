/**
 * A warm turn namespaces only its new blocks: the prompt-prefix cache hands its hashes out as the
 * pieces it holds, and cache-salt.ts keeps each piece's namespaced copy. The result must equal
 * namespacing every hash, for each tenant, turn after turn.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { localBlockHashes, namespacedLocalHashes, namespaceTag } from "../../../src/blocks/block-hash.ts";
import { namespacedHashes, type RoutingNamespace } from "../../../src/edge/cache-salt.ts";
import { PrefixCache } from "../../../src/prompt/prefix-cache.ts";
import { getQwenTokenizer } from "../../../src/prompt/tokenizer/index.ts";
import { initHashing } from "../../../src/util/hash.ts";

beforeAll(() => initHashing());

const ns = (salt: string): RoutingNamespace => ({ cacheSalt: salt, tag: namespaceTag(salt) });

describe("namespaced hashes from the prefix cache's pieces", () => {
  it("equal namespacing every block hash, for two tenants over growing conversations", () => {
    const tok = getQwenTokenizer("qwen3_vl");
    const cache = new PrefixCache();
    let text = "<|im_start|>system\nYou are helpful.<|im_end|>\n";
    let multiPiece = 0;
    for (let turn = 0; turn < 8; turn++) {
      text += `<|im_start|>user\n${"question ".repeat(40)}${turn}<|im_end|>\n<|im_start|>assistant\n`;
      const enc = cache.encode(tok, text, 16);
      expect(enc.hashPieces.flat()).toEqual(enc.localHashes);
      if (enc.hashPieces.length > 1) multiPiece++;
      const plain = localBlockHashes(tok.encode(text), 16);
      for (const salt of ["tenant-a", "tenant-b", "tenant-a"]) {
        const n = ns(salt);
        expect(namespacedHashes(n, enc)).toEqual(namespacedLocalHashes(plain, n.tag!));
      }
      expect(namespacedHashes({ cacheSalt: null, tag: null }, enc)).toEqual(plain);
      text += `${"answer ".repeat(30)}${turn}<|im_end|>\n`;
    }
    expect(multiPiece, "later turns came from cached pieces").toBeGreaterThan(5);
  });
});
