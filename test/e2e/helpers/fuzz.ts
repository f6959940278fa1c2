/**
 * A seeded request mutator for fuzzing `POST /v1/chat/completions` (test/e2e/fuzz-edge.test.ts).
 * Starts from valid requests covering every part of the API surface (text, multi-turn, tool calls,
 * tools, images as data: and http URLs, videos, response_format, template kwargs, sampling
 * fields, streaming, n) and mutates them at three levels:
 * - JSON tree: any node replaced by another type or size, keys deleted, unknown and refused keys
 *   added, arrays multiplied, nesting deepened, strings full of Unicode edge cases;
 * - media URLs: schemes, loopback/private/metadata addresses in many spellings, broken data: URLs;
 * - bytes: truncated JSON, invalid UTF-8, BOM, NUL, lone-surrogate escapes, huge number literals,
 *   duplicate keys, `__proto__`, deep bracket runs, wrong content-type, odd methods and headers.
 * Deterministic for a seed, so a failing case can be replayed.
 */

export function rng(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    // xorshift32
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return s / 0x1_0000_0000;
  };
}

/** A 1×1 PNG (valid header and IHDR; enough for the edge's image header probe). */
export const PNG_1x1 =
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";

export interface FuzzCase {
  method: string;
  headers: Record<string, string>;
  body: string | Uint8Array | null;
  /** What was done, for reproducing a failure. */
  label: string;
}

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

export function baseRequests(model: string, mediaUrl: string | null): Json[] {
  const img = (url: string): Json => ({ type: "image_url", image_url: { url } });
  const media = mediaUrl ?? "http://127.0.0.1:9";
  const tool: Json = {
    type: "function",
    function: { name: "get_weather", description: "Weather for a city", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } },
  };
  return [
    { model, messages: [{ role: "user", content: "Say hello in three words." }], max_tokens: 4 },
    { model, messages: [{ role: "user", content: "Count to five." }], max_tokens: 4, stream: true, stream_options: { include_usage: true } },
    {
      model,
      messages: [
        { role: "system", content: "You are terse." },
        { role: "user", content: "Weather in Paris?" },
        { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } }] },
        { role: "tool", tool_call_id: "call_1", content: "18 C, clear" },
        { role: "user", content: "And tomorrow?" },
      ],
      tools: [tool],
      max_tokens: 4,
    },
    { model, messages: [{ role: "user", content: "Use a tool if needed." }], tools: [tool], tool_choice: "auto", max_tokens: 4, temperature: 0.7, top_p: 0.9, seed: 7 },
    { model, messages: [{ role: "user", content: [img(`data:image/png;base64,${PNG_1x1}`), { type: "text", text: "What is this?" }] }], max_tokens: 4 },
    { model, messages: [{ role: "user", content: [{ type: "text", text: "Describe:" }, img(`${media}/img.png`)] }], max_tokens: 4, stream: true },
    { model, messages: [{ role: "user", content: [{ type: "video_url", video_url: { url: `${media}/clip.mp4` } }, { type: "text", text: "What happens?" }] }], max_tokens: 4 },
    {
      model,
      messages: [{ role: "user", content: "Give JSON." }],
      response_format: { type: "json_schema", json_schema: { name: "o", schema: { type: "object", properties: { a: { type: "integer" } } } } },
      max_tokens: 4,
    },
    { model, messages: [{ role: "user", content: "Think briefly." }], chat_template_kwargs: { enable_thinking: false }, max_completion_tokens: 4, stop: ["\n", "END"], n: 2 },
    { model, messages: [{ role: "developer", content: "Be nice." }, { role: "user", content: [{ type: "text", text: "Hi" }] }], max_tokens: 3, frequency_penalty: 0.5, presence_penalty: -0.5, logit_bias: { "100": 1 } },
  ];
}

const UNICODE = [
  "\u0000", "\u200b\u200d", "\u202e evil", "😀👩‍👩‍👧", "é", "\ufeff", "\uffff", "𝕏", "<|im_start|>", "<|vision_start|><|image_pad|>", "{{ 7*7 }}", "{% for x in range(99999999) %}", "\r\n\t", "Ω≈ç√∫",
];

const BAD_URLS = (media: string): string[] => [
  "file:///etc/passwd",
  "ftp://example.com/a.png",
  "gopher://127.0.0.1:70/",
  "javascript:alert(1)",
  "http://127.0.0.1:1/x.png",
  "http://localhost/x.png",
  "http://[::1]/x.png",
  "http://[::ffff:127.0.0.1]/x.png",
  "http://0x7f.0.0.1/x.png",
  "http://2130706433/x.png",
  "http://127.0.0.1../x.png",
  "http://169.254.169.254/latest/meta-data/",
  "http://10.0.0.1/x.png",
  "http://user:pass@127.0.0.1/x.png",
  "https://[fe80::1%25eth0]/x",
  "data:,",
  "data:image/png;base64,!!!!",
  "data:image/png;base64,",
  "data:text/html,<script>",
  `data:image/png;base64,${"A".repeat(5000)}`,
  `data:image/jpeg;base64,${PNG_1x1}`,
  `${media}/missing.png`,
  `${media}/img.png?${"q".repeat(9000)}`,
  "",
  " ",
  "http://",
];

function pick<T>(r: () => number, xs: readonly T[]): T {
  return xs[Math.floor(r() * xs.length)]!;
}

function randomString(r: () => number): string {
  const k = r();
  if (k < 0.3) return pick(r, UNICODE);
  if (k < 0.5) return "x".repeat(Math.floor(r() * 300));
  if (k < 0.6) return "y".repeat(10_000 + Math.floor(r() * 200_000));
  if (k < 0.7) return pick(r, ["user", "assistant", "system", "tool", "function", "developer", "image_url", "text", "video_url", "input_audio", "json_schema", "auto", "none", "required"]);
  if (k < 0.8) return String(Math.floor(r() * 1e6));
  return Array.from({ length: 1 + Math.floor(r() * 40) }, () => String.fromCharCode(Math.floor(r() * 0xffff))).join("");
}

function randomValue(r: () => number, depth = 0): Json {
  const k = r();
  if (k < 0.1) return null;
  if (k < 0.18) return r() < 0.5;
  if (k < 0.3) return pick(r, [0, -1, 1, 2, 1.5, -0.0001, 1e300, -1e300, 2 ** 31, 2 ** 53 + 2, 262_145, 4, 16, 0.5]);
  if (k < 0.55) return randomString(r);
  if (k < 0.7) return depth > 3 ? [] : Array.from({ length: Math.floor(r() * 4) }, () => randomValue(r, depth + 1));
  if (k < 0.8) {
    // deep nesting
    let v: Json = randomString(r);
    const d = 1 + Math.floor(r() * 80);
    for (let i = 0; i < d; i++) v = r() < 0.5 ? [v] : { a: v };
    return v;
  }
  if (k < 0.85) return Array.from({ length: 500 + Math.floor(r() * 2000) }, () => ({ type: "text", text: "t" }));
  if (depth > 3) return {};
  const o: { [k: string]: Json } = {};
  for (let i = Math.floor(r() * 4); i > 0; i--) o[randomString(r).slice(0, 20)] = randomValue(r, depth + 1);
  return o;
}

/** Every container node with its path. */
function nodes(v: Json, path: (string | number)[] = [], out: { path: (string | number)[]; value: Json }[] = []): typeof out {
  out.push({ path, value: v });
  if (Array.isArray(v)) v.forEach((x, i) => nodes(x, [...path, i], out));
  else if (v && typeof v === "object") for (const [k, x] of Object.entries(v)) nodes(x, [...path, k], out);
  return out;
}

function setAt(root: Json, path: (string | number)[], value: Json | undefined): Json {
  if (path.length === 0) return value === undefined ? null : value;
  let cur = root as { [k: string]: Json } | Json[];
  for (const k of path.slice(0, -1)) cur = (cur as Record<string | number, Json>)[k] as typeof cur;
  const last = path.at(-1)!;
  if (value === undefined) {
    if (Array.isArray(cur)) cur.splice(Number(last), 1);
    else delete (cur as Record<string, Json>)[last];
  } else (cur as Record<string | number, Json>)[last] = value;
  return root;
}

const REFUSED_KEYS = ["cache_salt", "rid", "input_ids", "lora_path", "custom_logit_processor", "session_params", "return_hidden_states", "bootstrap_host", "mm_processor_kwargs", "extra_key", "logprobs", "top_logprobs", "unknown_field", "__proto__x"];

function mutateTree(r: () => number, req: Json, media: string): { value: Json; label: string } {
  const labels: string[] = [];
  const steps = 1 + Math.floor(r() * 3);
  for (let s = 0; s < steps; s++) {
    const all = nodes(req);
    const target = pick(r, all);
    const k = r();
    if (k < 0.35) {
      req = setAt(req, target.path, randomValue(r));
      labels.push(`set ${target.path.join(".")}`);
    } else if (k < 0.5 && target.path.length > 0) {
      req = setAt(req, target.path, undefined);
      labels.push(`del ${target.path.join(".")}`);
    } else if (k < 0.6 && req && typeof req === "object" && !Array.isArray(req)) {
      const key = pick(r, REFUSED_KEYS);
      (req as Record<string, Json>)[key] = randomValue(r);
      labels.push(`add ${key}`);
    } else if (k < 0.7 && Array.isArray(target.value) && target.value.length > 0) {
      const times = pick(r, [2, 10, 300, 1500]);
      const copy = target.value.slice();
      for (let i = 1; i < times; i++) copy.push(...(JSON.parse(JSON.stringify(target.value)) as Json[]));
      req = setAt(req, target.path, copy);
      labels.push(`mul ${target.path.join(".")}×${times}`);
    } else if (k < 0.85) {
      const urls = all.filter((n) => n.path.at(-1) === "url");
      if (urls.length > 0) {
        const u = pick(r, urls);
        req = setAt(req, u.path, pick(r, BAD_URLS(media)));
        labels.push(`url ${u.path.join(".")}`);
      } else {
        const strings = all.filter((n) => typeof n.value === "string");
        if (strings.length > 0) {
          const t = pick(r, strings);
          req = setAt(req, t.path, `${t.value as string}${pick(r, UNICODE)}`);
          labels.push(`uni ${t.path.join(".")}`);
        }
      }
    } else {
      // a content string ↔ parts array, parts of the wrong type
      const msgs = all.filter((n) => n.path.length === 3 && n.path[0] === "messages" && n.path[2] === "content");
      if (msgs.length > 0) {
        const m = pick(r, msgs);
        const kind = pick(r, ["image_url", "video_url", "input_audio", "audio_url", "text", "thinking", "file", "refusal"]);
        const part: Json = kind === "text" ? { type: "text", text: randomString(r) } : kind === "input_audio" ? { type: kind, input_audio: { data: "AAAA", format: "wav" } } : { type: kind, [kind]: { url: pick(r, BAD_URLS(media)) } };
        req = setAt(req, m.path, Array.isArray(m.value) ? [...m.value, part] : [part]);
        labels.push(`part ${kind}`);
      }
    }
  }
  return { value: req, label: labels.join("; ") };
}

const enc = new TextEncoder();

function rawMutation(r: () => number, text: string): { body: string | Uint8Array; label: string } {
  const k = Math.floor(r() * 12);
  switch (k) {
    case 0:
      return { body: text.slice(0, Math.floor(r() * text.length)), label: "truncate" };
    case 1: {
      const b = enc.encode(text);
      const out = new Uint8Array(b.length + 3);
      const at = Math.floor(r() * b.length);
      out.set(b.subarray(0, at));
      out.set([0xff, 0xc3, 0x28], at);
      out.set(b.subarray(at), at + 3);
      return { body: out, label: "invalid utf-8" };
    }
    case 2:
      return { body: `\ufeff${text}`, label: "bom" };
    case 3:
      return { body: text.replace('"content":"', '"content":"\\ud800'), label: "lone surrogate" };
    case 4:
      return { body: text.replace(/"max_tokens":\d+/, '"max_tokens":1e999'), label: "huge number" };
    case 5:
      return { body: text.replace("{", '{"model":1,'), label: "duplicate key" };
    case 6:
      return { body: text.replace("{", '{"__proto__":{"polluted":1},'), label: "__proto__" };
    case 7:
      return { body: `${"[".repeat(5000 + Math.floor(r() * 100_000))}`, label: "deep brackets" };
    case 8:
      return { body: text.replace(/"/g, "'"), label: "single quotes" };
    case 9:
      return { body: "", label: "empty" };
    case 10:
      return { body: `${text}${text}`, label: "two objects" };
    default:
      return { body: text.replace(":", ":\u0000"), label: "nul" };
  }
}

/** The n-th fuzz case for a seed. */
export function fuzzCase(seed: number, n: number, model: string, mediaUrl: string | null): FuzzCase {
  const r = rng(seed * 1_000_003 + n * 7919 + 1);
  const bases = baseRequests(model, mediaUrl);
  const base = JSON.parse(JSON.stringify(bases[n % bases.length])) as Json;
  const headers: Record<string, string> = { "content-type": "application/json" };
  const k = r();
  let method = "POST";
  if (k < 0.02) method = pick(r, ["GET", "PUT", "DELETE", "PATCH"]);
  if (r() < 0.03) headers["content-type"] = pick(r, ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", ""]);
  if (r() < 0.02) headers["content-encoding"] = "gzip";
  if (r() < 0.02) headers.authorization = pick(r, ["Bearer ", "Bearer x", "Basic Zm9vOmJhcg==", "Bearer " + "k".repeat(5000)]);
  if (k < 0.08) return { method, headers, body: method === "GET" ? null : JSON.stringify(base), label: `valid base ${n % bases.length} (${method})` };
  const m = mutateTree(r, base, mediaUrl ?? "http://127.0.0.1:9");
  const text = JSON.stringify(m.value);
  if (r() < 0.15) {
    const raw = rawMutation(r, text);
    return { method, headers, body: raw.body, label: `${m.label}; raw ${raw.label}` };
  }
  return { method, headers, body: text, label: m.label };
}
