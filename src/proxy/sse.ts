/**
 * Server-sent events: an incremental parser for the upstream stream (any byte split, UTF-8
 * sequences split across chunks, LF / CRLF / CR line ends, comments, multi-line data) and the
 * frame encoder for the client stream.
 */
import { malformedUpstream } from "./upstream-error.ts";

export interface SseEvent {
  /** The event's data lines joined with "\n". */
  data: string;
  /** The `event:` field, when present. */
  event?: string;
}

export interface SseParser {
  /** Feeds bytes; returns the events completed by them. */
  push(chunk: Uint8Array): SseEvent[];
  /** End of input: returns a trailing event that lacked its blank line, if any. */
  end(): SseEvent[];
}

export const DEFAULT_MAX_EVENT_CHARS = 16 * 1024 * 1024;

/**
 * Creates a parser. An event (or a line) longer than `maxEventChars` throws an UpstreamError:
 * a worker that never ends a line must not make the edge buffer without bound.
 */
export function createSseParser(maxEventChars = DEFAULT_MAX_EVENT_CHARS): SseParser {
  const decoder = new TextDecoder("utf-8");
  let buf = "";
  let data: string[] = [];
  let dataChars = 0;
  let hasData = false;
  let eventName: string | undefined;
  /** Leading chars of `buf` already known to hold no line end (avoids rescanning long lines). */
  let scanned = 0;

  function line(l: string, out: SseEvent[]): void {
    if (l === "") {
      if (hasData) {
        const joined = data.length === 1 ? data[0]! : data.join("\n");
        out.push(eventName === undefined ? { data: joined } : { data: joined, event: eventName });
      }
      data = [];
      dataChars = 0;
      hasData = false;
      eventName = undefined;
      return;
    }
    if (l.charCodeAt(0) === 0x3a) return; // ":" comment
    const colon = l.indexOf(":");
    const field = colon === -1 ? l : l.slice(0, colon);
    let value = colon === -1 ? "" : l.slice(colon + 1);
    if (value.charCodeAt(0) === 0x20) value = value.slice(1);
    if (field === "data") {
      data.push(value);
      hasData = true;
      dataChars += value.length + 1;
      if (dataChars > maxEventChars) throw malformedUpstream("SSE event too large");
    } else if (field === "event") eventName = value;
    // id, retry and unknown fields carry nothing we use
  }

  function drain(final: boolean): SseEvent[] {
    const out: SseEvent[] = [];
    const n = buf.length;
    let start = 0;
    // Native searches; each position is scanned once per drain (the CR index is cached).
    let lf = buf.indexOf("\n", scanned);
    let cr = buf.indexOf("\r", scanned);
    for (;;) {
      if (lf !== -1 && lf < start) lf = buf.indexOf("\n", start);
      if (cr !== -1 && cr < start) cr = buf.indexOf("\r", start);
      const i = lf === -1 ? cr : cr === -1 ? lf : Math.min(lf, cr);
      if (i === -1) {
        scanned = n - start;
        break;
      }
      // A CR at the very end may be the first half of CRLF: wait for the next chunk.
      if (i === cr && i === n - 1 && !final) {
        scanned = i - start;
        break;
      }
      line(buf.slice(start, i), out);
      start = i === cr && buf.charCodeAt(i + 1) === 0x0a ? i + 2 : i + 1;
    }
    if (start > 0) buf = buf.slice(start);
    if (buf.length > maxEventChars) throw malformedUpstream("SSE line too long");
    return out;
  }

  /**
   * Text after `buf` holding no line end, in pieces: joined once, when a line end arrives. Appending
   * each chunk to `buf` made V8 copy the whole unfinished line per chunk (a 4 MB line in 4 kB
   * chunks: 5.6 s; in 512 B chunks: 46 s).
   */
  let pending: string[] = [];
  let pendingChars = 0;

  function take(): void {
    if (pending.length === 0) return;
    // Nothing in the pieces needs scanning again (only when `buf` had no CR waiting at its end).
    if (scanned === buf.length) scanned += pendingChars;
    buf += pending.join("");
    pending = [];
    pendingChars = 0;
  }

  return {
    push(chunk) {
      const text = decoder.decode(chunk, { stream: true });
      if (scanned === buf.length && text.indexOf("\n") === -1 && text.indexOf("\r") === -1) {
        pending.push(text);
        pendingChars += text.length;
        if (buf.length + pendingChars > maxEventChars) throw malformedUpstream("SSE line too long");
        return [];
      }
      take();
      buf += text;
      return drain(false);
    },
    end() {
      take();
      buf += decoder.decode();
      const out = drain(true);
      if (buf !== "") {
        line(buf, out);
        buf = "";
      }
      line("", out); // dispatch an event that was cut before its blank line
      return out;
    },
  };
}

/** One SSE frame carrying a JSON payload. */
export function sseFrame(json: string): string {
  return `data: ${json}\n\n`;
}

export const SSE_DONE = "data: [DONE]\n\n";
