/**
 * A warm turn namespaces only its new blocks: the prompt-prefix cache hands its hashes out as the
 * pieces it holds, and cache-salt.ts keeps each piece's namespaced copy. The result must equal
 * namespacing every hash, for each tenant, turn after turn; a text turn prepared as the chat
 * handler prepares it never joins its pieces when namespaced, and the route's form of its hashes
 * (routedHashes, one BigUint64Array) never joins them, salted or not.
 */
import fc from "fast-check";
import { beforeAll, describe, expect, it } from "vitest";
import { localBlockHashes, namespacedLocalHashes, namespaceTag } from "../../../src/blocks/block-hash.ts";
import { namespacedHashes, routedHashes, routedRunStats, routedRunWords, type RoutingNamespace } from "../../../src/edge/cache-salt.ts";
import { limitsOf, parseChatBody } from "../../../src/edge/chat/parse.ts";
import { prepareRouting, type PrepareDeps } from "../../../src/edge/chat/prepare.ts";
import { promptTextOf } from "../../../src/edge/chat/prompt.ts";
import { parseEdgeConfig } from "../../../src/config/config.ts";
import { PrefixCache, sharedPrefixCache } from "../../../src/prompt/prefix-cache.ts";
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
      const enc = cache.encode(tok, text, 16, "");
      expect(enc.hashPieces.flat()).toEqual(enc.localHashes);
      if (enc.hashPieces.length > 1) multiPiece++;
      const plain = localBlockHashes(tok.encode(text, ""), 16);
      for (const salt of ["tenant-a", "tenant-b", "tenant-a"]) {
        const n = ns(salt);
        expect(namespacedHashes(n, enc)).toEqual(namespacedLocalHashes(plain, n.tag!));
        expect(Array.from(routedHashes(n, enc))).toEqual(namespacedLocalHashes(plain, n.tag!));
      }
      expect(namespacedHashes({ cacheSalt: null, tag: null }, enc)).toEqual(plain);
      expect(Array.from(routedHashes({ cacheSalt: null, tag: null }, enc))).toEqual(plain);
      text += `${"answer ".repeat(30)}${turn}<|im_end|>\n`;
    }
    expect(multiPiece, "later turns came from cached pieces").toBeGreaterThan(5);
  });

  it("a namespaced warm text turn from prepareRouting joins none of its block hashes; an unsalted one reads them whole", async () => {
    const deps: PrepareDeps = {
      config: parseEdgeConfig({ KVEDGE_ACCESS: "public" }),
      index: () => {
        throw new Error("a text turn asks no index");
      },
      fetch: () => Promise.reject(new Error("a text turn fetches nothing")),
    };
    const model = deps.config.models[0]!;
    const tok = getQwenTokenizer(model.family);
    const tenant = ns("tenant-text");
    const messages: { role: string; content: string }[] = [{ role: "system", content: "You are helpful." }];
    let warm = 0;
    for (let turn = 0; turn < 4; turn++) {
      messages.push({ role: "user", content: `${"a text question ".repeat(40)}${turn}` });
      const req = parseChatBody(JSON.stringify({ model: model.id, messages }), limitsOf(deps.config));
      const joined = sharedPrefixCache().stats().joinedHashes;
      const salted = await prepareRouting(req, deps, "");
      if (salted.plan.hashPieces!.length > 1) warm++;
      const routed = namespacedHashes(tenant, salted.plan);
      expect(sharedPrefixCache().stats().joinedHashes - joined, `turn ${turn + 1}: hashes joined`).toBe(0);
      const plain = localBlockHashes(tok.encode(promptTextOf(salted.prompt).toString(), ""), model.blockSize);
      expect(routed).toEqual(namespacedLocalHashes(plain, tenant.tag!));
      const unsalted = await prepareRouting(req, deps, "");
      const routedPlain = routedHashes({ cacheSalt: null, tag: null }, unsalted.plan);
      expect(sharedPrefixCache().stats().joinedHashes - joined, `turn ${turn + 1}: unsalted, routed`).toBe(0);
      expect(Array.from(routedPlain)).toEqual(plain);
      expect(namespacedHashes({ cacheSalt: null, tag: null }, unsalted.plan)).toEqual(plain);
      // The counter sees a join: an unsalted warm turn reads its pieces joined.
      expect(sharedPrefixCache().stats().joinedHashes - joined, `turn ${turn + 1}: unsalted`).toBe(unsalted.plan.hashPieces!.length > 1 ? plain.length : 0);
      messages.push({ role: "assistant", content: `${"an answer ".repeat(30)}${turn}` });
    }
    expect(warm, "later turns came from cached pieces").toBe(3);
  });

  it("a chain routed with no runs writes each word a bounded number of times; requests in another salt (a tenant's base and adapter) write none", () => {
    let next = 1n;
    const pieces = Array.from({ length: 150 }, () => Array.from({ length: 40 }, () => next++));
    const words = 149 * 40;
    for (const [i, salt] of ["base", "adapter", "base", "adapter"].entries()) {
      const before = routedRunStats().wordsWritten;
      const flat = pieces.flat();
      expect(Array.from(routedHashes(ns(salt), { localHashes: flat, hashPieces: pieces }))).toEqual(namespacedLocalHashes(flat, ns(salt).tag!));
      const written = routedRunStats().wordsWritten - before;
      // New words once, plus copies of buffers that at least double: under 3 × the chain (copying it all a piece was ~75 ×).
      if (i === 0) expect(written, `${written} words written for a chain of ${words}`).toBeLessThan(3 * words);
      // The runs are base's: the adapter's words are made fresh and not kept, base's are read.
      else expect(written, `${salt}: words written`).toBe(0);
      // The pieces share their runs' buffers (a copy of its chain a piece would keep ~75 × the chain).
      expect(routedRunWords(pieces)).toBeLessThanOrEqual(4 * words);
    }
  });

  it("equal namespacing every hash over random chains of pieces: growing turns, branches, salts switched, empty pieces", () => {
    // A piece tree as a cache keeps it: each request routes a node's chain of pieces then its own
    // fresh piece, and may keep that (as a cache stores a new turn) as a child of the node.
    // `graft`: a kept piece routed after another chain than its own (no cache does so; the runs must not be trusted for it).
    const op = fc.record({ at: fc.nat(), graft: fc.option(fc.nat(), { freq: 4 }), salt: fc.constantFrom(null, "tenant-a", "tenant-b"), fresh: fc.array(fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }), { maxLength: 4 }), keep: fc.boolean() });
    fc.assert(
      fc.property(fc.array(op, { minLength: 1, maxLength: 40 }), (ops) => {
        const chains: (readonly bigint[])[][] = [[]];
        for (const o of ops) {
          const from = chains[o.at % chains.length]!;
          const grafted = o.graft === null ? null : chains[o.graft % chains.length]!.at(-1);
          const chain = grafted ? [...from, grafted] : from;
          const pieces = [...chain, o.fresh.slice()];
          const n: RoutingNamespace = o.salt === null ? { cacheSalt: null, tag: null } : ns(o.salt);
          const flat = pieces.flat();
          const routed = routedHashes(n, { localHashes: flat, hashPieces: pieces });
          expect(Array.from(routed)).toEqual(n.tag === null ? flat : namespacedLocalHashes(flat, n.tag));
          if (o.keep) chains.push(pieces);
        }
      }),
      { numRuns: 300 },
    );
  });
});
