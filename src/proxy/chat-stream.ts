/**
 * SGLang `/generate` SSE → OpenAI `chat.completion.chunk` SSE, rebuilt the way SGLang's own
 * `/v1/chat/completions` streams (sgl-project/sglang @9d147fd: python/sglang/srt/entrypoints/
 * http_server.py L818-849, python/sglang/srt/entrypoints/openai/serving_chat.py L1042-1279): per choice a role
 * chunk on its first frame, content deltas (from cumulative text unless the worker streams
 * increments), then after the upstream `[DONE]` one finish chunk per choice in the order they
 * finished, the usage chunk when asked for, and `[DONE]`. An upstream error (inline error frame,
 * abort with a status, malformed frame, cut-off stream) becomes one OpenAI error event and
 * `[DONE]`: the client stream always terminates.
 *
 * Two layers: a synchronous core (bytes in → SSE strings out; easy to test at every byte
 * split) and one stream that pulls the upstream through it, with backpressure, cancellation and
 * callbacks for the edge.
 */
import { KvedgeError as KvedgeErrorClass, UpstreamError, errorBody } from "../api/errors.ts";
import type { KvedgeError } from "../api/errors.ts";
import { parseGenerateResult } from "./sglang-wire-read.ts";
import type { SglangFinishReason, SglangMetaInfo } from "./sglang-wire.ts";
import { SSE_DONE, createSseParser, sseFrame } from "./sse.ts";
import type { SseEvent } from "./sse.ts";
import { abortErrorOf, malformedUpstream, upstreamStreamError } from "./upstream-error.ts";
import { summarizeUsage, toOpenAIUsage } from "./usage.ts";
import type { UsageSummary } from "./usage.ts";
import { ChoiceOutput, PLAIN_OUTPUT, type ChatOutputPlan, type StreamDelta } from "./chat-output.ts";
import { LogprobMetaSchema, toChoiceLogprobs, type TokenLogprob } from "./logprobs.ts";
import { newArrayCursor, readWholeFrame, splitCumulativeFrame, trailingIndex, TOKEN_KEY, TOP_KEY, type ArrayCursor, type SplitFrame } from "./logprob-tail.ts";
import { newTextCursor, splitCumulativeText, type TextCursor, type TextSplit } from "./text-tail.ts";

export interface ChatStreamOptions {
  /** The completion id shown on every chunk (the edge's request id). */
  id: string;
  /** The request's `model`, echoed back. */
  model: string;
  /** The request's `n`. */
  n?: number;
  /** `stream_options.include_usage`. */
  includeUsage?: boolean;
  /** Reasoning / tool-call / logprob / continuous-usage handling (chat-output.ts); plain text when absent. */
  plan?: ChatOutputPlan;
  /** The worker runs `--incremental-streaming-output` (frames carry deltas, not cumulative text). */
  incremental?: boolean;
  /** Unix seconds for `created`; evaluated per chunk as SGLang does. */
  now?: () => number;
  /** Cap on one upstream SSE event. */
  maxEventChars?: number;
  /** Called once when the upstream side ends, if any frame carried counts (also after errors). */
  onUsage?: (usage: UsageSummary) => void;
  /** Called once when the translation ends (completed, upstream error, or client cancel). */
  onFinish?: (outcome: StreamOutcome) => unknown;
  /**
   * Hold the last frames (usage chunk, `[DONE]`) until the promise onFinish returned settles, so a
   * client never observes the end before what onFinish does (a sharded pool's load release).
   */
  holdEndUntilFinished?: boolean;
}

export type StreamStatus = "completed" | "upstream_error" | "client_cancelled";

export interface StreamOutcome {
  status: StreamStatus;
  error: KvedgeError | null;
  /** Usage from the last frame of each choice; null when no frame arrived. */
  usage: UsageSummary | null;
  /** OpenAI finish_reason per choice index (null: that choice never finished). */
  finishReasons: (string | null)[];
  /** A cumulative frame did not extend the text already sent (the extra part was still sent). */
  textRevised: boolean;
}

export interface ChatStreamCore {
  /** Upstream bytes in; client SSE frames out. */
  push(chunk: Uint8Array): string[];
  /** Upstream ended (EOF). */
  end(): string[];
  /** Upstream failed (connection error): error event + [DONE]. */
  fail(err: KvedgeError): string[];
  /** The client stream is complete (no more frames will be produced). */
  readonly ended: boolean;
  /** At least one upstream data frame was translated. */
  readonly sawData: boolean;
  readonly error: KvedgeError | null;
  outcome(status?: StreamStatus): StreamOutcome;
}

interface ChoiceState {
  started: boolean;
  /** UTF-16 units of text sent so far. */
  sentLen: number;
  /** The previous cumulative frame's text. */
  prevText: string;
  /** What the previous cumulative frame carried as written (text-tail.ts): its text or none ("" when that frame was parsed whole). */
  textCursor: TextCursor;
  finish: SglangFinishReason | null;
  meta: SglangMetaInfo | undefined;
  output: ChoiceOutput;
  /** Where the consumed part of each cumulative logprob array ends (logprob-tail.ts). */
  lpTokens: ArrayCursor;
  lpTops: ArrayCursor;
  /** Logprob positions not yet attached to a chunk. */
  lpPending: TokenLogprob[];
}

/** The synchronous translation state machine. */
export function createChatStreamCore(opts: ChatStreamOptions): ChatStreamCore {
  const n = opts.n ?? 1;
  const plan = opts.plan ?? PLAIN_OUTPUT;
  const now = opts.now ?? (() => Math.floor(Date.now() / 1000));
  const parser = createSseParser(opts.maxEventChars);
  const choices: ChoiceState[] = Array.from({ length: n }, () => ({
    started: false,
    sentLen: 0,
    prevText: "",
    textCursor: newTextCursor(),
    finish: null,
    meta: undefined,
    output: new ChoiceOutput(plan),
    lpTokens: newArrayCursor(),
    lpTops: newArrayCursor(),
    lpPending: [],
  }));
  const finishOrder: number[] = [];
  let ended = false;
  let sawData = false;
  let error: KvedgeError | null = null;
  let textRevised = false;

  const chunk = (choiceList: unknown[], usage?: unknown): string => {
    const o: Record<string, unknown> = {
      id: opts.id,
      object: "chat.completion.chunk",
      created: now(),
      model: opts.model,
      choices: choiceList,
    };
    if (usage !== undefined) o["usage"] = usage;
    return sseFrame(JSON.stringify(o));
  };
  const choice = (
    index: number,
    delta: Record<string, unknown>,
    finishReason: string | null = null,
    matched: number | string | null = null,
    logprobs: TokenLogprob[] | null = null,
  ) => ({ index, delta, logprobs: logprobs === null ? null : { content: logprobs }, finish_reason: finishReason, matched_stop: matched });

  /** Logprobs not yet sent go on the next chunk of their choice (SGLang would drop them when that frame sends no content). */
  const takeLogprobs = (st: ChoiceState): TokenLogprob[] | null => {
    if (!plan.logprobs || st.lpPending.length === 0) return null;
    const lp = st.lpPending;
    st.lpPending = [];
    return lp;
  };

  function emitDeltas(out: string[], index: number, st: ChoiceState, deltas: StreamDelta[]): void {
    for (const d of deltas) {
      const delta: Record<string, unknown> =
        d.kind === "reasoning"
          ? { reasoning_content: d.text }
          : d.kind === "content"
            ? { reasoning_content: null, content: d.text }
            : { reasoning_content: null, tool_calls: [d.call] };
      // serving_chat.py: continuous_usage_stats adds this choice's running counts to each delta chunk.
      const usage = plan.continuousUsage && st.meta ? toOpenAIUsage(summarizeUsage([st.meta])) : undefined;
      out.push(chunk([choice(index, delta, null, null, takeLogprobs(st))], usage));
    }
  }

  function failInto(out: string[], err: KvedgeError): void {
    if (ended) return;
    out.push(sseFrame(JSON.stringify(errorBody(err))), SSE_DONE);
    ended = true;
    error = err;
  }

  function completeInto(out: string[]): void {
    for (const idx of finishOrder) {
      const st = choices[idx]!;
      const fr = st.finish!;
      // serving_chat.py: "stop" reads "tool_calls" once this choice streamed a tool call (matched_stop kept).
      const type = fr.type === "stop" && st.output.sentToolCalls ? "tool_calls" : fr.type;
      out.push(chunk([choice(idx, { reasoning_content: null }, type, fr.matched ?? null, takeLogprobs(st))]));
    }
    if (opts.includeUsage) out.push(chunk([], toOpenAIUsage(usage()!)));
    out.push(SSE_DONE);
    ended = true;
  }

  function usage(): UsageSummary | null {
    return sawData ? summarizeUsage(choices.map((c) => c.meta)) : null;
  }

  function onEvent(ev: SseEvent, out: string[]): void {
    if (ended) return;
    const data = ev.data;
    if (data.length < 16 && data.trim() === "[DONE]") {
      if (!sawData) failInto(out, malformedUpstream("stream ended without output"));
      else completeInto(out);
      return;
    }
    // Cumulative frames repeat the text, ids and every logprob position so far: only the new ones
    // are parsed (text-tail.ts, logprob-tail.ts), so a frame costs what its new tokens do, not the
    // whole answer again.
    const cumulativeLogprobs = plan.logprobs && !opts.incremental;
    const expectedIndex = opts.incremental ? 0 : trailingIndex(data);
    let newLogprobs: Record<string, unknown> | null = null;
    let frameText = data;
    let lpSplit: SplitFrame | null = null;
    if (cumulativeLogprobs) {
      const cursors = choices[expectedIndex];
      if (cursors === undefined) {
        failInto(out, malformedUpstream(`choice index ${expectedIndex} out of range`));
        return;
      }
      const split = splitCumulativeFrame(data, cursors.lpTokens, cursors.lpTops);
      if (typeof split === "string") {
        failInto(out, malformedUpstream(`stream frame: ${split}`));
        return;
      }
      if (split !== null) {
        lpSplit = split;
        frameText = split.rest;
      }
    }
    const textState = opts.incremental ? undefined : choices[expectedIndex];
    let textSplit: TextSplit | null = textState === undefined ? null : splitCumulativeText(frameText, textState.textCursor);
    let raw: unknown;
    try {
      raw = JSON.parse(textSplit?.rest ?? frameText);
      // Split by the cursor of another choice than the frame's own (an index not at the end): parsed whole.
      if (textSplit !== null && choiceIndexOf(raw) !== expectedIndex) {
        textSplit = null;
        raw = JSON.parse(frameText);
      }
      // Arrays split out of another object than meta_info are not what JSON.parse reads: parsed whole.
      if (lpSplit !== null && !holdsSplitArrays(raw, lpSplit)) {
        lpSplit = null;
        textSplit = null;
        raw = JSON.parse(data);
      }
    } catch {
      failInto(out, malformedUpstream("stream frame is not JSON"));
      return;
    }
    if (typeof raw === "object" && raw !== null && "error" in raw) {
      failInto(out, upstreamStreamError(raw));
      return;
    }
    const parsed = parseGenerateResult(raw);
    if (!parsed.success) {
      failInto(out, malformedUpstream(`stream frame: ${parsed.error.issues[0]?.message ?? "invalid"}`));
      return;
    }
    const frame = parsed.data;
    const index = frame.index ?? 0;
    const st = choices[index];
    if (st === undefined) {
      failInto(out, malformedUpstream(`choice index ${index} out of range`));
      return;
    }
    if (cumulativeLogprobs && index !== expectedIndex) {
      failInto(out, malformedUpstream("stream frame: choice index is not its last member"));
      return;
    }
    if (cumulativeLogprobs) {
      const lp = lpSplit ?? readWholeFrame(frame.meta_info, st.lpTokens, st.lpTops);
      if (typeof lp === "string") {
        failInto(out, malformedUpstream(`stream frame: ${lp}`));
        return;
      }
      if (lp.tops !== null && lp.tops.length !== (lp.tokens?.length ?? 0)) {
        failInto(out, malformedUpstream("stream frame: logprob arrays differ in length"));
        return;
      }
      if (lpSplit !== null) [st.lpTokens, st.lpTops] = lpSplit.next;
      newLogprobs = { ...(lp.tokens ? { [TOKEN_KEY]: lp.tokens } : {}), ...(lp.tops ? { [TOP_KEY]: lp.tops } : {}) };
    }
    st.meta = frame.meta_info;
    sawData = true;
    const fr = frame.meta_info.finish_reason ?? null;
    const abortErr = abortErrorOf(fr);
    if (abortErr !== null) {
      failInto(out, abortErr);
      return;
    }
    if (!st.started) {
      st.started = true;
      out.push(chunk([choice(index, { reasoning_content: null, role: "assistant", content: "" })]));
    }
    let delta: string;
    if (opts.incremental) delta = frame.text;
    else {
      const text = textSplit?.text ?? frame.text;
      // A split whose cursor held the previous text extends it by construction (a reset cursor holds "").
      const extended = textSplit !== null && text.length - textSplit.tail.length === st.prevText.length;
      // Cumulative text only grows in SGLang; if it ever does not, never resend what was sent.
      if (!extended && !text.startsWith(st.prevText)) textRevised = true;
      delta = extended && st.sentLen === st.prevText.length ? textSplit!.tail : text.slice(st.sentLen);
      st.prevText = text;
      st.textCursor = textSplit?.next ?? newTextCursor();
    }
    if (plan.logprobs) {
      // Incremental frames carry only the new positions; of cumulative ones only those were parsed.
      const lp = LogprobMetaSchema.safeParse(newLogprobs ?? frame.meta_info);
      if (!lp.success) {
        failInto(out, malformedUpstream("stream frame: malformed logprobs"));
        return;
      }
      st.lpPending.push(...toChoiceLogprobs(lp.data).content);
    }
    st.sentLen += delta.length;
    emitDeltas(out, index, st, delta === "" ? [] : st.output.push(delta));
    if (fr !== null && st.finish === null) emitDeltas(out, index, st, st.output.finish());
    if (fr !== null && st.finish === null) {
      st.finish = fr;
      finishOrder.push(index);
    }
  }

  /** Whether a parsed rest's meta_info holds the logprob arrays where the split found them (placeholders). */
  function holdsSplitArrays(raw: unknown, split: SplitFrame): boolean {
    const meta = typeof raw === "object" && raw !== null ? (raw as { meta_info?: unknown }).meta_info : undefined;
    const has = (key: string) => typeof meta === "object" && meta !== null && Object.hasOwn(meta, key);
    return has(TOKEN_KEY) === split.hasTokens && has(TOP_KEY) === split.hasTops;
  }

  /** A parsed frame's `index` as the schema reads it (0 when absent or not a count). */
  function choiceIndexOf(raw: unknown): number {
    const i = typeof raw === "object" && raw !== null ? (raw as { index?: unknown }).index : undefined;
    return typeof i === "number" ? i : 0;
  }

  function run(events: () => SseEvent[], out: string[]): void {
    let evs: SseEvent[];
    try {
      evs = events();
    } catch (e) {
      failInto(out, e instanceof UpstreamError ? e : malformedUpstream("unreadable stream"));
      return;
    }
    for (const ev of evs) onEvent(ev, out);
  }

  return {
    push(bytes) {
      const out: string[] = [];
      if (!ended) run(() => parser.push(bytes), out);
      return out;
    },
    end() {
      const out: string[] = [];
      if (ended) return out;
      run(() => parser.end(), out);
      if (!ended) {
        // Tolerate a missing [DONE] only when every choice has finished.
        if (sawData && choices.every((c) => c.finish !== null)) completeInto(out);
        else failInto(out, malformedUpstream("stream ended before completion"));
      }
      return out;
    },
    fail(err) {
      const out: string[] = [];
      failInto(out, err);
      return out;
    },
    get ended() {
      return ended;
    },
    get sawData() {
      return sawData;
    },
    get error() {
      return error;
    },
    outcome(status) {
      return {
        status: status ?? (error !== null ? "upstream_error" : "completed"),
        error,
        usage: usage(),
        finishReasons: choices.map((c) => c.finish?.type ?? null),
        textRevised,
      };
    },
  };
}

/**
 * Where a translator's upstream bytes come from, one chunk per read: a worker's guarded body
 * (upstream-guard.ts GuardedBody).
 */
export interface UpstreamBytes {
  /** The next chunk (valid until the next read: the guard reads into one buffer); null at the end; rejects when the upstream failed (a KvedgeError says why). */
  read(): Promise<Uint8Array | null>;
  /** The client went away: stop the upstream. */
  cancel(reason?: unknown): void;
  /** Set by the translator: told when the upstream is cut (deadline, idle, abort), a read pending or not, so a client that is not reading still ends. */
  onCut: ((err: KvedgeError) => void) | null;
}

export interface ChatStreamTranslator {
  /** The client SSE body. Cancelling it cancels the upstream. */
  readonly readable: ReadableStream<Uint8Array>;
  /**
   * Settles at the first upstream event: `null` when output started (or the stream completed),
   * the KvedgeError when the upstream failed before any output — the edge may then answer with
   * a proper HTTP error instead (cancel `readable`), as SGLang's `/v1` does.
   */
  readonly ready: Promise<KvedgeError | null>;
  /** Settles with the outcome once translation ends (same value as onFinish). */
  readonly done: Promise<StreamOutcome>;
}

function safeCall<T>(fn: ((v: T) => unknown) | undefined, v: T): Promise<unknown> | null {
  if (fn === undefined) return null;
  try {
    const r = fn(v);
    return r instanceof Promise ? r.catch(() => undefined) : null;
  } catch {
    // a callback bug must not break the client stream
    return null;
  }
}

/**
 * The client's SSE body for one upstream answer: one ReadableStream whose pull reads the upstream
 * and feeds the core. It holds at most one translated chunk ahead of the client (high-water mark
 * 1: the first is read at once, so `ready` settles before anyone reads), so a slow client slows the
 * upstream read instead of growing a buffer.
 */
export function createChatStreamTranslator(source: UpstreamBytes, opts: ChatStreamOptions): ChatStreamTranslator {
  const core = createChatStreamCore(opts);
  const encoder = new TextEncoder();
  /** Frames translated and not yet handed to the stream. */
  let pending: string[] = [];
  let cancelled = false;
  let finished = false;
  /** onFinish's promise the end frames wait for (holdEndUntilFinished). */
  let endHeld: Promise<unknown> | null = null;

  let resolveReady!: (v: KvedgeError | null) => void;
  const ready = new Promise<KvedgeError | null>((r) => (resolveReady = r));
  let resolveDone!: (v: StreamOutcome) => void;
  const done = new Promise<StreamOutcome>((r) => (resolveDone = r));

  function finish(status?: StreamStatus): void {
    if (finished) return;
    finished = true;
    const outcome = core.outcome(status);
    if (outcome.usage !== null) safeCall(opts.onUsage, outcome.usage);
    const finishing = safeCall(opts.onFinish, outcome);
    if (finishing && opts.holdEndUntilFinished && status !== "client_cancelled") endHeld = finishing;
    resolveReady(core.sawData ? null : outcome.error);
    resolveDone(outcome);
    if (status !== "client_cancelled") void discardRest();
  }

  function accept(frames: string[]): void {
    for (const f of frames) pending.push(f);
    if (core.sawData) resolveReady(null);
    if (core.ended) finish();
  }

  /** A cut or a failed read: the client gets an error event (a guard's own error told as it is). */
  function fail(err: unknown): void {
    if (core.ended) return;
    accept(core.fail(err instanceof KvedgeErrorClass ? err : new UpstreamError("The connection to the worker failed mid-stream.")));
  }
  // A cut while the client is not reading (deadline, the request aborted) ends and settles at once.
  source.onCut = fail;

  /** What the upstream sends after the answer ended (normally just its end): read and dropped, so the exchange ends as the worker ends it. */
  async function discardRest(): Promise<void> {
    try {
      while ((await source.read()) !== null);
    } catch {
      // cut meanwhile: nothing more to tell
    }
  }

  const readable = new ReadableStream<Uint8Array>(
    {
      async pull(ctl) {
        while (pending.length === 0 && !core.ended) {
          let chunk: Uint8Array | null;
          try {
            chunk = await source.read();
          } catch (err) {
            fail(err);
            break;
          }
          if (cancelled) return;
          if (core.ended) break; // cut while the read was pending
          accept(chunk === null ? core.end() : core.push(chunk));
        }
        if (core.ended && endHeld !== null) {
          await endHeld;
          endHeld = null;
          if (cancelled) return;
        }
        if (pending.length > 0) {
          ctl.enqueue(encoder.encode(pending.length === 1 ? pending[0]! : pending.join("")));
          pending = [];
        }
        if (core.ended) ctl.close();
      },
      cancel(reason) {
        cancelled = true;
        pending = [];
        if (!core.ended) finish("client_cancelled");
        source.cancel(reason ?? new Error("client cancelled"));
      },
    },
    { highWaterMark: 1 },
  );

  return { readable, ready, done };
}
