/** Inputs of the held-body tests: seeded text and a request body framed as the runtime hands it over. */

/** Words with two-, three- and four-byte characters, U+FEFF and JSON escapes. */
export const HELD_TEXT_WORDS: readonly string[] = ["edge", "naïve", "—", "日本語", "😀", "\uFEFF", 'q"uote', "back\\slash", "tab\t", "line\n", "plain"];

/** Seeded text of at least `chars` characters drawn from `words`. */
export function seededText(seed: number, chars: number, words: readonly string[] = HELD_TEXT_WORDS): string {
  let x = (seed * 2654435761) >>> 0;
  let out = "";
  while (out.length < chars) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    out += words[x % words.length]! + " ";
  }
  return out;
}

/** A framed request body (Content-Length). */
export function framedBody(bytes: Uint8Array) {
  return {
    body: new ReadableStream<Uint8Array>(),
    headers: new Headers({ "content-length": String(bytes.length) }),
    arrayBuffer: async () => bytes.slice().buffer,
  };
}
