/**
 * Cumulative `/generate` frames read past the previous frame's text (src/proxy/text-tail.ts): the
 * client stream is byte for byte what parsing every frame whole gives. The oracle is the same
 * frames with `meta_info` written first, a layout the tail reader refuses (so those are parsed
 * whole), over random texts (escapes, quotes, backslashes, control characters, non-ASCII, emoji,
 * lone surrogates), revised texts, `\u`-escaped writers, n > 1, logprobs and any byte split.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { UpstreamError } from "../../../src/api/errors.ts";
import { parseChatRequest } from "../../../src/api/validate.ts";
import { createChatStreamCore, type ChatStreamOptions } from "../../../src/proxy/chat-stream.ts";
import { chatOutputPlan } from "../../../src/proxy/chat-output.ts";
import { newTextCursor, splitCumulativeText } from "../../../src/proxy/text-tail.ts";
import { splitAt } from "../../helpers/split-at.ts";

const enc = new TextEncoder();
const OPTS: ChatStreamOptions = { id: "rid1", model: "qwen", now: () => 1784131200, includeUsage: true };
const DONE = "data: [DONE]\n\n";

interface Frame {
  text: string;
  ids: number[];
  completion: number;
  finish: unknown;
  index?: number;
}

const metaOf = (f: Frame) => ({ id: `r${f.index ?? 0}`, finish_reason: f.finish, prompt_tokens: 40, completion_tokens: f.completion, cached_tokens: 32, dp_rank: 0 });
/** Every character past ASCII written as `\u` escapes (Python's json.dumps default). */
const asciiOnly = (json: string) => json.replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);

/** SGLang's layout: text, output_ids, meta_info (and index last when n > 1). */
function sglangFrame(f: Frame, ascii = false): string {
  const json = JSON.stringify({ text: f.text, output_ids: f.ids, meta_info: metaOf(f), ...(f.index === undefined ? {} : { index: f.index }) });
  return `data: ${ascii ? asciiOnly(json) : json}\n\n`;
}
/** The same frame with meta_info first: read whole. */
function wholeFrame(f: Frame): string {
  return `data: ${JSON.stringify({ meta_info: metaOf(f), text: f.text, output_ids: f.ids, ...(f.index === undefined ? {} : { index: f.index }) })}\n\n`;
}

function run(body: string, cuts: number[] = [], opts: ChatStreamOptions = OPTS) {
  const core = createChatStreamCore(opts);
  let out = "";
  for (const c of splitAt(enc.encode(body), cuts)) out += core.push(c).join("");
  out += core.end().join("");
  return { out, outcome: core.outcome() };
}

/** Cumulative frames of one answer built from `pieces`; a piece starting with "<" replaces the text so far (a revision). */
function framesOf(pieces: string[], finish = true): Frame[] {
  let text = "";
  return pieces.map((p, i) => {
    text = p.startsWith("<") ? p.slice(1) : text + p;
    const last = i === pieces.length - 1;
    return { text, ids: Array.from({ length: i + 1 }, (_, k) => 100 + k), completion: i + 1, finish: last && finish ? { type: "length", length: i + 1 } : null };
  });
}

const piece = fc.oneof(
  fc.string({ unit: "binary", maxLength: 6 }),
  fc.string({ unit: fc.constantFrom('"', "\\", "\n", "\u0001", "é", "猫", "😀", "\ud83d", "\ude00", "a", "/", "<"), maxLength: 5 }),
);

describe("cumulative frames read past the previous text", () => {
  it("gives what parsing every frame whole gives, for any text, revision, writer and byte split", () => {
    fc.assert(
      fc.property(fc.array(piece, { minLength: 1, maxLength: 12 }), fc.boolean(), fc.array(fc.nat(4000), { maxLength: 6 }), (pieces, ascii, cuts) => {
        const frames = framesOf(pieces);
        const expected = run(frames.map(wholeFrame).join("") + DONE);
        const got = run(frames.map((f) => sglangFrame(f, ascii)).join("") + DONE, cuts);
        expect(got.out).toBe(expected.out);
        expect(got.outcome).toEqual(expected.outcome);
      }),
      { numRuns: 400 },
    );
  });

  it("n = 2 with interleaved frames, the index last or first", () => {
    const a = framesOf(["He", "llo", " wor", "ld"]).map((f) => ({ ...f, index: 0 }));
    const b = framesOf(["Ça", " va", "<Ça ira", " bien"]).map((f) => ({ ...f, index: 1 }));
    const order = [b[0]!, a[0]!, a[1]!, b[1]!, b[2]!, a[2]!, a[3]!, b[3]!];
    const opts = { ...OPTS, n: 2 };
    const expected = run(order.map(wholeFrame).join("") + DONE, [], opts);
    expect(run(order.map((f) => sglangFrame(f)).join("") + DONE, [], opts).out).toBe(expected.out);
    // `index` first: the frame is split with the cursor of choice 0, then found to be another choice's and read whole.
    const indexFirst = (f: Frame) => `data: ${JSON.stringify({ index: f.index, text: f.text, output_ids: f.ids, meta_info: metaOf(f) })}\n\n`;
    const mixed = order.map((f, i) => (i % 3 === 0 ? indexFirst(f) : sglangFrame(f))).join("") + DONE;
    expect(run(mixed, [], opts).out).toBe(expected.out);
    expect(expected.outcome.textRevised).toBe(true);
  });

  it("an escape or a surrogate pair split across frames", () => {
    const pieces = ["a\\", "n", "\ud83d", "\ude00", '\\"', '"', "\u001f", "é"];
    const frames = framesOf(pieces);
    const expected = run(frames.map(wholeFrame).join("") + DONE);
    for (const ascii of [false, true]) expect(run(frames.map((f) => sglangFrame(f, ascii)).join("") + DONE).out).toBe(expected.out);
    const content = expected.out.split("\n\n").flatMap((s) => (s.startsWith("data: {") ? [(JSON.parse(s.slice(6)) as { choices: { delta: { content?: string } }[] }).choices[0]?.delta.content ?? ""] : []));
    expect(content.join("")).toBe(pieces.join(""));
  });

  it("a malformed frame mid-stream ends the stream with an error event, whatever its tail holds", () => {
    const good = framesOf(["One", " two"], false).map((f) => sglangFrame(f)).join("");
    const bad = [
      'data: {"text":"One two\\x","output_ids":[100,101,102],"meta_info":{"id":"r0","finish_reason":null}}\n\n', // bad escape in the tail
      'data: {"text":"One two\u0001","output_ids":[100,101,102],"meta_info":{"id":"r0","finish_reason":null}}\n\n', // raw control character
      'data: {"text":"One two three","output_ids":[100,101,102,x],"meta_info":{"id":"r0","finish_reason":null}}\n\n', // ids not JSON
      'data: {"text":"One two three","output_ids":[100,101,102],"meta_info":{"id":"r0","finish_reason":null}\n\n', // cut short
      'data: {"text":"One two three","output_ids":[100,101,102],"meta_info":{"completion_tokens":-1}}\n\n', // counts not the schema
      'data: {"text":"One two three","output_ids":[100,101,102],"meta_info":{"finish_reason":"length"}}\n\n', // finish reason not the schema
      'data: {"text":"One two three","output_ids":[100,101,102],"meta_info":[]}\n\n', // no meta_info object
    ];
    for (const b of bad) {
      const { out, outcome } = run(good + b + DONE);
      const parts = out.split("\n\n").filter((s) => s !== "");
      expect(parts.at(-1)).toBe("data: [DONE]");
      expect((JSON.parse(parts.at(-2)!.slice(6)) as { error: { code: string } }).error.code).toBe("upstream_error");
      expect(outcome.error).toBeInstanceOf(UpstreamError);
      expect(out).not.toContain("three");
    }
  });

  it("a repeated text key is read as JSON.parse reads it (the last one wins)", () => {
    const f1 = 'data: {"text":"Hi","output_ids":[1],"meta_info":{"id":"r0","finish_reason":null}}\n\n';
    const f2 = 'data: {"text":"Hi there","output_ids":[1,2],"meta_info":{"id":"r0","finish_reason":{"type":"length","length":2}},"text":"Hi all"}\n\n';
    const content = run(f1 + f2 + DONE)
      .out.split("\n\n")
      .flatMap((s) => (s.startsWith("data: {") ? [(JSON.parse(s.slice(6)) as { choices: { delta: { content?: string } }[] }).choices[0]?.delta.content ?? ""] : []));
    expect(content.join("")).toBe("Hi all");
  });

  it("ids that are not JSON integers (leading zeros) and a repeated key written escaped: read as JSON.parse reads the whole frame", () => {
    const meta = (fin: string) => `{"id":"r0","finish_reason":${fin}}`;
    const LEN2 = '{"type":"length","length":2}';
    // Each case: the frames in SGLang's layout, and the same frames with meta_info first (read whole).
    const cases: { name: string; frames: string[]; oracle: string[]; check: (r: ReturnType<typeof run>) => void }[] = [
      {
        name: "leading zeros in output_ids",
        frames: [`{"text":"Hi","output_ids":[01],"meta_info":${meta("null")}}`, `{"text":"Hi there","output_ids":[01,02],"meta_info":${meta(LEN2)}}`],
        oracle: [`{"meta_info":${meta("null")},"text":"Hi","output_ids":[01]}`, `{"meta_info":${meta(LEN2)},"text":"Hi there","output_ids":[01,02]}`],
        check: (r) => expect((r.outcome.error as Error | undefined)?.cause).toBe("stream frame is not JSON"),
      },
      {
        name: "leading zeros only in the new ids",
        frames: [`{"text":"Hi","output_ids":[1],"meta_info":${meta("null")}}`, `{"text":"Hi there","output_ids":[1,02],"meta_info":${meta(LEN2)}}`],
        oracle: [`{"meta_info":${meta("null")},"text":"Hi","output_ids":[1]}`, `{"meta_info":${meta(LEN2)},"text":"Hi there","output_ids":[1,02]}`],
        check: (r) => expect((r.outcome.error as Error | undefined)?.cause).toBe("stream frame is not JSON"),
      },
      {
        name: "text repeated as te\\u0078t",
        frames: [`{"text":"Hi","output_ids":[1],"meta_info":${meta("null")},"te\\u0078t":"Bye"}`, `{"text":"Hi there","output_ids":[1,2],"meta_info":${meta(LEN2)}}`],
        oracle: [`{"meta_info":${meta("null")},"text":"Hi","output_ids":[1],"te\\u0078t":"Bye"}`, `{"meta_info":${meta(LEN2)},"text":"Hi there","output_ids":[1,2]}`],
        check: (r) => expect(r.out).toContain('"content":"Bye"'),
      },
      {
        // The repeat writes the value the rest is parsed with: only the key tells it apart.
        name: 'text repeated as te\\u0078t with ""',
        frames: [`{"text":"Hi","output_ids":[1],"meta_info":${meta("null")},"te\\u0078t":""}`, `{"text":"Hi there","output_ids":[1,2],"meta_info":${meta(LEN2)}}`],
        oracle: [`{"meta_info":${meta("null")},"text":"Hi","output_ids":[1],"te\\u0078t":""}`, `{"meta_info":${meta(LEN2)},"text":"Hi there","output_ids":[1,2]}`],
        check: (r) => expect(r.out).toContain('"content":"Hi there"'),
      },
    ];
    for (const c of cases) {
      const body = (frames: string[]) => frames.map((f) => `data: ${f}\n\n`).join("") + DONE;
      const expected = run(body(c.oracle));
      c.check(expected);
      const got = run(body(c.frames));
      expect.soft(got.out, c.name).toBe(expected.out);
      expect.soft(got.outcome, c.name).toEqual(expected.outcome);
    }
  });

  it("with logprobs: the same logprobs and text as reading whole", () => {
    const req = parseChatRequest(JSON.stringify({ model: "q", messages: [{ role: "user", content: "hi" }], stream: true, logprobs: true, top_logprobs: 2 }));
    const plan = chatOutputPlan(req, { toolCallParser: null, reasoningParser: null });
    const words = ["A", " b\\", "\"c", " 猫", "😀"];
    const lp = (k: number) => Array.from({ length: k }, (_, i) => [-0.5 - i / 8, 100 + i, words[i]]);
    const frame = (k: number, textFirst: boolean) => {
      const meta = { id: "r0", finish_reason: k === words.length ? { type: "length", length: k } : null, completion_tokens: k, output_token_logprobs: lp(k), output_top_logprobs: lp(k).map((e) => [e, [-3, 7, "x"]]) };
      const text = words.slice(0, k).join("");
      const ids = lp(k).map((e) => e[1]);
      return `data: ${JSON.stringify(textFirst ? { text, output_ids: ids, meta_info: meta } : { meta_info: meta, text, output_ids: ids })}\n\n`;
    };
    const body = (textFirst: boolean) => Array.from({ length: words.length }, (_, i) => frame(i + 1, textFirst)).join("") + DONE;
    const expected = run(body(false), [], { ...OPTS, plan });
    expect(expected.out).toContain('"top_logprobs"');
    expect(run(body(true), [7, 90, 400], { ...OPTS, plan }).out).toBe(expected.out);
  });
});

describe("splitCumulativeText", () => {
  it("parses only the tail and the rest of the frame", () => {
    const c0 = newTextCursor();
    const s1 = splitCumulativeText('{"text":"Hi \\"you\\"","output_ids":[1,2],"meta_info":{"id":"r"}}', c0)!;
    expect(s1).toMatchObject({ rest: '{"text":"","output_ids":[],"meta_info":{"id":"r"}}', text: 'Hi "you"', tail: 'Hi "you"' });
    const s2 = splitCumulativeText('{"text":"Hi \\"you\\"\\n!","output_ids":[1,2,3],"meta_info":{"id":"r"}}', s1.next)!;
    expect(s2).toMatchObject({ text: 'Hi "you"\n!', tail: "\n!" });
    expect(s2.next.ids).toBe("1,2,3");
  });

  it("refuses what is not an extension in SGLang's layout", () => {
    const s1 = splitCumulativeText('{"text":"Hello","output_ids":[1,2],"meta_info":{}}', newTextCursor())!;
    for (const data of [
      '{"text":"Help","output_ids":[1,2,3],"meta_info":{}}', // text revised
      '{"text":"Hello!","output_ids":[1,3],"meta_info":{}}', // ids revised
      '{"text":"Hello!","output_ids":[1,2,"x"],"meta_info":{}}', // ids not integers
      '{"text":"Hello!","output_ids":[1,2,03],"meta_info":{}}', // an id with a leading zero
      '{"text":"Hello!","output_ids":[1,2,3],"meta_info":{"m":"text"}}', // "text" further on
      '{"text":"Hello!","output_ids":[1,2,3],"meta_info":{},"te\\u0078t":""}', // text repeated, escaped
      '{"text":"Hello!","output_ids":[1,2,3],"meta_info":{},"output_ids":[]}', // output_ids repeated
      '{"text":"Hello!","meta_info":{}}', // ids gone
      '{"meta_info":{},"text":"Hello!"}', // another layout
      '{"text":"Hello!\\q","output_ids":[1,2,3],"meta_info":{}}', // a bad escape
    ])
      expect(splitCumulativeText(data, s1.next), data).toBeNull();
    expect(splitCumulativeText('{"text":"Hello","output_ids":[1,02],"meta_info":{}}', newTextCursor())).toBeNull();
  });
});
