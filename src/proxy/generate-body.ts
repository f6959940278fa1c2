/**
 * The `/generate` body as JSON text parts, with its long `text` escaped a slice at a time, made
 * into a Blob that the runtime encodes to UTF-8 natively. Building one JSON string of a 32k-token
 * prompt and then its UTF-8 bytes made two large-object allocations per request (~2 ms together in
 * Node on the bench box; 0.6 ms in slices); encoding the slices in the Blob instead of with a JS
 * TextEncoder call each saves another ~0.25 ms at 130 kB in workerd. Message texts the client
 * already sent in canonical JSON are not escaped again at all (`literals`): at 32k tokens that was
 * 0.7 ms of JSON.stringify and 0.6 ms of page faults per request in workerd (scripts/perf-edge.mjs).
 * The text is exactly JSON.stringify(body)'s with `text` as the first key: JSON escapes one UTF-16
 * unit at a time except for surrogate pairs, no piece splits a pair, and a reused escaping is
 * JSON.stringify's own (json-scan.ts, parseRecordingLiterals). The turn chain's held pieces with
 * non-ASCII text go as the UTF-8 bytes the chain keeps of them (generateBodyParts): a Blob copies
 * bytes where it encodes a two-byte string, which at 100k tokens of history was ~0.2 ms a turn in
 * workerd.
 */
import type { PromptPieces } from "../prompt/turn-chain.ts";
import type { JsonLiteral } from "../util/json-scan.ts";
import { escapeJsonReusing, type EscapeWork } from "../util/json-escape.ts";
import type { GenerateRequestBody } from "./sglang-wire.ts";

/**
 * Text chunks of the turn chain's pieces shorter than this are sent joined with their neighbours:
 * a long conversation of short turns holds a piece or two a turn, and the Blob's cost per part
 * (Node encodes each string apart; workerd converts each) outgrew the copy of their characters.
 */
const JOINED_PART_CHARS = 1024;
/** The longest such run made one string: past it a joined string is a large-object allocation in fresh pages (paired in Node, 390k characters of short pieces: 0.66 -> 0.42 ms). */
const JOINED_RUN_CHARS = 64 * 1024;

/** A part of the body: JSON text, or JSON text's UTF-8 bytes (the turn chain's held pieces). */
export type BodyPart = string | Uint8Array;

/**
 * The body as parts for bodyOfChunks.
 * `pieces` (optional): the text as the turn chain's pieces and the request's own part; the
 * pieces' escaping (made when the chain stored them) is sent as the chain keeps it for the body
 * (PromptPieces.bodyParts: a piece with non-ASCII text as its UTF-8 bytes, which a Blob copies
 * instead of encoding the two-byte string again every turn), and so is the escaping of the
 * entries this request stored (the start of its own part: PromptPieces.restEscaped); only the
 * rest is read, so the whole prompt is neither escaped nor joined into one string, and the
 * request's own text is escaped once.
 * `literals` (optional): strings the text may contain, each with its canonical JSON escaping taken
 * from the client's body (validate.ts, parseRecordingLiterals). Where one occurs in the text, in
 * order, its escaping is reused instead of escaping it again: the same bytes, one JSON pass fewer
 * over most of a long prompt.
 */
export function generateBodyParts(body: GenerateRequestBody, literals: readonly JsonLiteral[] = [], pieces: PromptPieces | null = null, work: EscapeWork | null = null): BodyPart[] {
  const { text: whole, ...rest } = body;
  const chunks: BodyPart[] = ['{"text":"'];
  let text = whole;
  if (pieces !== null && pieces.chars + pieces.rest.length === whole.length) {
    // Chunks one by one: a long conversation's pieces may be more than a call takes arguments.
    // Short text chunks in a row go as one (ASCII, the chain's one-byte pieces: the same bytes).
    let short = "";
    const add = (c: BodyPart): void => {
      if (typeof c === "string" && c.length < JOINED_PART_CHARS) {
        short += c;
        if (short.length >= JOINED_RUN_CHARS) {
          chunks.push(short);
          short = "";
        }
        return;
      }
      if (short !== "") chunks.push(short);
      short = "";
      chunks.push(c);
    };
    for (const c of pieces.bodyParts) add(c);
    const own = pieces.restEscaped;
    if (own !== null) for (const c of own.chunks) add(c);
    if (short !== "") chunks.push(short);
    text = own === null ? pieces.rest : pieces.rest.slice(own.chars);
  }
  escapeJsonReusing(chunks, text, literals, work);
  const restJson = JSON.stringify(rest);
  chunks.push(restJson === "{}" ? '"}' : `",${restJson.slice(1)}`);
  return chunks;
}

/**
 * The parts as one fetch body, made once and sent as often as the request is retried: a Blob
 * holds the UTF-8 bytes (no JS string of the whole body; JSON text is well-formed, so encoding
 * replaces nothing), sends a Content-Length, and needs no `duplex` option (Node's fetch requires
 * one for streams).
 */
export function bodyOfChunks(chunks: readonly BodyPart[]): Blob {
  return new Blob(chunks as BodyPart[], { type: "application/json" });
}
