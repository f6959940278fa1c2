/**
 * `data:` URLs with a size cap, checked before decoding. Base64 bodies are decoded strictly by
 * default, the way SGLang does (`pybase64.b64decode(validate=True)` on everything after the first
 * comma: standard alphabet, correct padding, no whitespace, no percent-escapes), so the bytes we
 * hash are the bytes the worker decodes; "forgiving" follows the fetch spec (percent-decode, then
 * drop ASCII whitespace, optional padding). Non-base64 bodies are percent-decoded; SGLang cannot
 * load those (`sglangCompatible: false`).
 */
import { MediaError, MediaTooLargeError } from "./errors.ts";

export interface DataUrl {
  mimeType: string;
  base64: boolean;
  bytes: Uint8Array;
  sglangCompatible: boolean;
}

const B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const B64_INDEX = (() => {
  const t = new Int16Array(128).fill(-1);
  for (let i = 0; i < 64; i++) t[B64.charCodeAt(i)] = i;
  return t;
})();

function decodeBase64Chars(s: string, param: string | null): Uint8Array {
  const n = s.length;
  const out = new Uint8Array(Math.floor((n * 3) / 4));
  let o = 0;
  let acc = 0;
  let bits = 0;
  for (let i = 0; i < n; i++) {
    const c = s.charCodeAt(i);
    const v = c < 128 ? B64_INDEX[c]! : -1;
    if (v < 0) throw new MediaError("bad_data_url", "data: URL base64 body has an invalid character.", param);
    acc = (acc << 6) | v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[o++] = (acc >> bits) & 0xff;
    }
  }
  // Leftover bits must be zero padding bits (RFC 4648 canonical); 6 leftover bits is never valid.
  if (bits === 6) throw new MediaError("bad_data_url", "data: URL base64 body has a bad length.", param);
  return out.subarray(0, o);
}

export function decodeBase64Strict(body: string, param: string | null = null): Uint8Array {
  if (body.length % 4 !== 0) throw new MediaError("bad_data_url", "data: URL base64 body is not padded to a multiple of 4.", param);
  let end = body.length;
  if (body.endsWith("==")) end -= 2;
  else if (body.endsWith("=")) end -= 1;
  return decodeBase64Chars(body.slice(0, end), param);
}

export function decodeBase64Forgiving(body: string, param: string | null = null): Uint8Array {
  let s = body.replace(/[\t\n\f\r ]/g, "");
  if (s.length % 4 === 0) {
    if (s.endsWith("==")) s = s.slice(0, -2);
    else if (s.endsWith("=")) s = s.slice(0, -1);
  }
  if (s.length % 4 === 1) throw new MediaError("bad_data_url", "data: URL base64 body has a bad length.", param);
  return decodeBase64Chars(s, param);
}

function percentDecode(s: string): Uint8Array {
  const utf8 = new TextEncoder().encode(s);
  const out = new Uint8Array(utf8.length);
  let o = 0;
  const hex = (c: number): number => (c >= 48 && c <= 57 ? c - 48 : c >= 65 && c <= 70 ? c - 55 : c >= 97 && c <= 102 ? c - 87 : -1);
  for (let i = 0; i < utf8.length; i++) {
    const c = utf8[i]!;
    if (c === 0x25 && i + 2 < utf8.length) {
      const h = hex(utf8[i + 1]!);
      const l = hex(utf8[i + 2]!);
      if (h >= 0 && l >= 0) {
        out[o++] = h * 16 + l;
        i += 2;
        continue;
      }
    }
    out[o++] = c;
  }
  return out.subarray(0, o);
}

export function isDataUrl(url: string): boolean {
  return /^data:/i.test(url.trimStart());
}

export function parseDataUrl(
  url: string,
  opts: { maxBytes: number; base64Mode?: "strict" | "forgiving"; param?: string | null },
): DataUrl {
  const param = opts.param ?? null;
  const s = url.trimStart();
  if (!/^data:/i.test(s)) throw new MediaError("bad_data_url", "Not a data: URL.", param);
  const comma = s.indexOf(",");
  if (comma === -1) throw new MediaError("bad_data_url", "data: URL has no comma.", param);
  const meta = s.slice(5, comma);
  const body = s.slice(comma + 1);
  const base64 = /;[\t\n\f\r ]*base64[\t\n\f\r ]*$/i.test(meta);
  const mimeType = (base64 ? meta.replace(/;[\t\n\f\r ]*base64[\t\n\f\r ]*$/i, "") : meta).trim().toLowerCase() || "text/plain;charset=us-ascii";
  // Cheap upper bounds on the decoded size, checked before any allocation.
  const bound = base64 ? Math.floor((body.length * 3) / 4) : body.length;
  const lowest = base64 ? bound - 2 : Math.ceil(body.length / 3);
  if (lowest > opts.maxBytes) throw new MediaTooLargeError(opts.maxBytes, param);
  let bytes: Uint8Array;
  let sglangCompatible = false;
  if (base64) {
    if ((opts.base64Mode ?? "strict") === "strict") {
      bytes = decodeBase64Strict(body, param);
      sglangCompatible = true;
    } else {
      const decoded = percentDecode(body);
      let text = "";
      for (let i = 0; i < decoded.length; i += 8192) text += String.fromCharCode(...decoded.subarray(i, i + 8192));
      bytes = decodeBase64Forgiving(text, param);
      sglangCompatible = /^[A-Za-z0-9+/]*={0,2}$/.test(body) && body.length % 4 === 0;
    }
  } else {
    bytes = percentDecode(body);
  }
  if (bytes.length > opts.maxBytes) throw new MediaTooLargeError(opts.maxBytes, param);
  return { mimeType, base64, bytes, sglangCompatible };
}

/** Standard base64 with padding (what SGLang's strict decoder accepts), in chunks to bound the call stack. */
export function encodeBase64(bytes: Uint8Array): string {
  let out = "";
  // 3-byte aligned chunks keep padding only at the very end.
  for (let i = 0; i < bytes.length; i += 3 * 8190) out += btoa(String.fromCharCode(...bytes.subarray(i, i + 3 * 8190)));
  return out;
}
