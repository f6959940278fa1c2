/**
 * Deterministic pseudo-random "model output": plain English word tokens of the real vocabulary
 * (so text decodes cleanly and stop strings can match), a natural answer length after which the
 * model emits its EOS, all drawn from a seeded PRNG (same seed → same answer).
 */
import { xxh3_64 } from "../../src/util/hash.ts";
import type { QwenTokenizer } from "../../src/prompt/tokenizer/index.ts";

const WORDS = (
  "the a an of to and in is it that for on with as was at by be this are from or have not but " +
  "cat dog house window light river tree stone cloud water city road green blue red small large " +
  "quiet bright old new warm cold soft sits runs sees looks moves rests walks near over under " +
  "behind beside across through morning evening summer winter garden table chair book paper door"
).split(" ");

export interface OutputVocabulary {
  /** Single-token words (" word") of the model vocabulary. */
  wordIds: number[];
  /** Punctuation ids used to end sentences now and then. */
  periodId: number | null;
  /** The token the model ends an answer with, reported as `matched` in finish_reason. */
  eosId: number;
  /** All ids the detokenizer hides with skip_special_tokens (EOS ids). */
  specialIds: Set<number>;
}

export function buildOutputVocabulary(tok: QwenTokenizer): OutputVocabulary {
  const wordIds: number[] = [];
  for (const w of WORDS) {
    const ids = tok.encode(` ${w}`, "");
    if (ids.length === 1) wordIds.push(ids[0]!);
  }
  if (wordIds.length === 0) throw new Error("tokenizer yields no single-token words");
  const period = tok.encode(".", "");
  return {
    wordIds,
    periodId: period.length === 1 ? period[0]! : null,
    eosId: tok.specialIds.imEnd,
    specialIds: new Set([tok.specialIds.imEnd, tok.specialIds.endOfText]),
  };
}

/** mulberry32 over a 32-bit state: small, fast, and good enough for fake text. */
export class Prng {
  private state: number;

  constructor(seed: number) {
    this.state = seed >>> 0;
  }

  next(): number {
    this.state = (this.state + 0x6d2b79f5) >>> 0;
    let t = this.state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }

  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo + 1));
  }
}

/** A 32-bit seed from prompt ids (or a rid) and an optional sampling_seed. Requires initHashing(). */
export function outputSeed(material: readonly number[] | string, samplingSeed: number | null): number {
  let bytes: Uint8Array;
  if (typeof material === "string") {
    bytes = new TextEncoder().encode(material);
  } else {
    bytes = new Uint8Array(material.length * 4);
    const view = new DataView(bytes.buffer);
    for (let i = 0; i < material.length; i++) view.setUint32(i * 4, material[i]! >>> 0, true);
  }
  const h = xxh3_64(bytes, 0n) ^ BigInt.asUintN(64, BigInt(samplingSeed ?? 0));
  return Number(h & 0xffffffffn) ^ Number(h >> 32n);
}

export class OutputStream {
  private readonly vocab: OutputVocabulary;
  private readonly prng: Prng;
  /** Number of word tokens before the model would emit EOS. */
  readonly naturalLength: number;
  private produced = 0;

  /** A scripted answer (scripted-output.ts): exactly these tokens, then EOS. */
  private readonly script: readonly number[] | null;

  constructor(vocab: OutputVocabulary, seed: number, natural: { min: number; max: number }, script: readonly number[] | null = null) {
    this.vocab = vocab;
    this.prng = new Prng(seed);
    this.script = script;
    this.naturalLength = script === null ? this.prng.int(natural.min, natural.max) : script.length;
  }

  /** The output is scripted (its text may hold multi-byte characters split across tokens). */
  get scripted(): boolean {
    return this.script !== null;
  }

  /** The next token; `allowEos` false (ignore_eos, min_new_tokens) keeps producing words. */
  next(allowEos: boolean): number {
    const i = this.produced++;
    if (this.script !== null && i < this.script.length) return this.script[i]!;
    if (allowEos && i >= this.naturalLength) return this.vocab.eosId;
    const r = this.prng.next();
    if (this.vocab.periodId !== null && i > 0 && r < 0.08) return this.vocab.periodId;
    return this.vocab.wordIds[Math.floor(this.prng.next() * this.vocab.wordIds.length)]!;
  }
}
