/**
 * The oracle for the `/generate` body (src/proxy/generate-body.ts): the same body as JSON text
 * chunks only, the turn chain's held pieces escaped here from their text (PromptPieces.stable, by
 * JSON.stringify) and the request's own part escaped whole, instead of the chunks and UTF-8 bytes
 * the chain keeps for the body (bodyParts, and restEscaped for the start of the own part).
 * Joined, they are the text whose UTF-8 the edge's Blob must carry.
 */
import type { PromptPieces } from "../../src/prompt/turn-chain.ts";
import { generateBodyParts } from "../../src/proxy/generate-body.ts";
import type { GenerateRequestBody } from "../../src/proxy/sglang-wire.ts";
import type { EscapeWork } from "../../src/util/json-escape.ts";
import type { JsonLiteral } from "../../src/util/json-scan.ts";

export function generateBodyChunks(body: GenerateRequestBody, literals: readonly JsonLiteral[] = [], pieces: PromptPieces | null = null, work: EscapeWork | null = null): string[] {
  return generateBodyParts(body, literals, pieces && { ...pieces, bodyParts: [JSON.stringify(pieces.stable.join("")).slice(1, -1)], restEscaped: null }, work).map((p) => {
    if (typeof p !== "string") throw new Error("a body part that is not text");
    return p;
  });
}
