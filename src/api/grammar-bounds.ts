/**
 * Complexity bounds for the output constraints a worker compiles (`regex`, `ebnf`,
 * `response_format` json_schema and structural_tag, and the tool schemas that become one). The
 * worker's grammar backend (XGrammar by default in SGLang) compiles each into an automaton on the
 * worker, and bounded repetitions are expanded: `(a{1,65535}){1,65535}` is 4.3 billion positions
 * from 21 characters, which no size limit catches. Three measures, each checked without running
 * or compiling anything:
 *  - expansion: positions after expanding bounded repetitions (`x{m,n}` counts x n times, nested
 *    counts multiply; `*`, `+`, `?` count once); in a JSON schema every node counts one, a string's
 *    `maxLength` its length, `maxItems` multiplies its item schema, `pattern` counts as a regex;
 *  - depth: nesting of groups (regex, EBNF) or of schema objects;
 *  - alternatives: `|` in a regex or EBNF grammar, branches of anyOf / oneOf / allOf.
 * Each bound is a KVEDGE_LIMITS field (limits.ts); a request past one gets a 400 naming it.
 */
import { InvalidRequestError } from "./errors.ts";

export interface GrammarLimits {
  maxGrammarExpansion: number;
  maxGrammarDepth: number;
  maxGrammarAlternatives: number;
}

interface Tally {
  expansion: number;
  alternatives: number;
}

/** A bound was passed; `message` says which (caught here and turned into the client's 400). */
class Exceeded extends Error {}

function refusal(param: string, e: Exceeded): InvalidRequestError {
  return new InvalidRequestError(`${param} is too complex for the worker's grammar compiler: ${e.message}.`, param, "grammar_too_complex");
}

interface Frame {
  sum: number;
  /** Value of the last atom of the current sequence (what a quantifier repeats); 0: none. */
  last: number;
}

/** `{m}`, `{m,}`, `{,n}`, `{m,n}`: any number of digits (leading zeros too), as Python's re and XGrammar read them. */
const QUANT = /\{\s*(\d*)\s*(?:(,)\s*(\d*)\s*)?\}/y;

/**
 * Measures a regex (Python / XGrammar syntax) or an EBNF grammar (GBNF-style: `name ::= …`,
 * "literals", [classes], groups, `| * + ? {m,n}`, `#` comments). Throws Exceeded past a limit.
 */
function measurePattern(text: string, dialect: "regex" | "ebnf", limits: GrammarLimits, tally: Tally): void {
  const stack: Frame[] = [{ sum: 0, last: 0 }];
  const top = () => stack[stack.length - 1]!;
  const atom = (v: number) => {
    const f = top();
    f.sum += v;
    f.last = v;
    check();
  };
  const check = () => {
    let total = tally.expansion;
    for (const f of stack) total += f.sum;
    if (total > limits.maxGrammarExpansion) throw new Exceeded(`bounded repetitions expand to over ${limits.maxGrammarExpansion} positions (KVEDGE_LIMITS.maxGrammarExpansion)`);
  };
  const repeat = (factor: number) => {
    const f = top();
    if (factor <= 1 || f.last === 0) return;
    f.sum += f.last * (factor - 1);
    f.last *= factor;
    check();
  };
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (c === "\\") {
      const next = text[i + 1] ?? "";
      i++;
      // \p{…}, \x{…}, \N{…}: one atom with its braces.
      if ("pPxNu".includes(next) && text[i + 1] === "{") {
        const close = text.indexOf("}", i + 1);
        i = close === -1 ? text.length : close;
      }
      atom(1);
    } else if (c === "[") {
      let j = i + 1;
      if (text[j] === "^") j++;
      if (text[j] === "]") j++;
      for (; j < text.length && text[j] !== "]"; j++) if (text[j] === "\\") j++;
      i = j;
      atom(1);
    } else if (c === "(") {
      if (stack.length >= limits.maxGrammarDepth) throw new Exceeded(`groups nest deeper than ${limits.maxGrammarDepth} (KVEDGE_LIMITS.maxGrammarDepth)`);
      stack.push({ sum: 0, last: 0 });
      // (?:…), (?P<name>…), (?=…): the group's own syntax is no atom.
      if (dialect === "regex" && text[i + 1] === "?") {
        i++;
        if (text[i + 1] === "P" && text[i + 2] === "<") i = Math.max(i, text.indexOf(">", i));
        else if (text[i + 1] === "<" && text[i + 2] !== "=" && text[i + 2] !== "!") i = Math.max(i, text.indexOf(">", i));
        else i++;
      }
    } else if (c === ")") {
      if (stack.length === 1) {
        atom(1);
        continue;
      }
      const v = stack.pop()!.sum;
      atom(Math.max(1, v));
    } else if (c === "|") {
      tally.alternatives++;
      if (tally.alternatives > limits.maxGrammarAlternatives) throw new Exceeded(`more than ${limits.maxGrammarAlternatives} alternatives (KVEDGE_LIMITS.maxGrammarAlternatives)`);
      top().last = 0;
    } else if (c === "*" || c === "+" || c === "?") {
      repeat(1);
      if (dialect === "regex" && (text[i + 1] === "?" || text[i + 1] === "+")) i++;
    } else if (c === "{") {
      QUANT.lastIndex = i;
      const m = QUANT.exec(text);
      if (!m || (m[1] === "" && m[2] === undefined)) {
        atom(1);
        continue;
      }
      const min = m[1] === "" ? 0 : Number(m[1]);
      const max = m[2] === undefined ? min : m[3] === "" ? min + 1 : Number(m[3]);
      repeat(Math.max(min, max));
      i += m[0].length - 1;
      if (dialect === "regex" && (text[i + 1] === "?" || text[i + 1] === "+")) i++;
    } else if (dialect === "ebnf" && (c === '"' || c === "'")) {
      let j = i + 1;
      for (; j < text.length && text[j] !== c; j++) if (text[j] === "\\") j++;
      i = j;
      atom(1);
    } else if (dialect === "ebnf" && c === "#") {
      const nl = text.indexOf("\n", i);
      i = nl === -1 ? text.length : nl;
    } else if (dialect === "ebnf" && text.startsWith("::=", i)) {
      // A new rule: the name before it is no atom a quantifier could repeat.
      top().last = 0;
      i += 2;
    } else if (dialect === "ebnf" && /[A-Za-z0-9_.-]/.test(c)) {
      let j = i;
      while (j + 1 < text.length && /[A-Za-z0-9_.-]/.test(text[j + 1]!)) j++;
      i = j;
      atom(1);
    } else if (c === " " || c === "\t" || c === "\n" || c === "\r") {
      continue;
    } else atom(1);
  }
  while (stack.length > 1) {
    const v = stack.pop()!.sum;
    top().sum += v;
  }
  // Every position was checked as it was added (check); the total now moves into the tally.
  tally.expansion += stack[0]!.sum;
}

const ITEM_KEYS = new Set(["items", "prefixItems", "additionalItems", "contains", "unevaluatedItems"]);
const BRANCH_KEYS = new Set(["anyOf", "oneOf", "allOf"]);

function count(v: unknown): number | null {
  return typeof v === "number" && Number.isFinite(v) && v >= 0 ? Math.floor(v) : null;
}

/** Measures a JSON schema or structural tag (any JSON value); `depth` counts enclosing objects. */
function measureSchema(v: unknown, depth: number, limits: GrammarLimits, tally: Tally): number {
  if (v === null || typeof v !== "object") return 1;
  if (depth > limits.maxGrammarDepth) throw new Exceeded(`schema objects nest deeper than ${limits.maxGrammarDepth} (KVEDGE_LIMITS.maxGrammarDepth)`);
  const add = (n: number, into: number) => {
    const total = into + n;
    if (tally.expansion + total > limits.maxGrammarExpansion) throw new Exceeded(`the schema expands to over ${limits.maxGrammarExpansion} positions (KVEDGE_LIMITS.maxGrammarExpansion)`);
    return total;
  };
  if (Array.isArray(v)) {
    let sum = 0;
    for (const x of v) sum = add(measureSchema(x, depth + 1, limits, tally), sum);
    return sum;
  }
  const o = v as Record<string, unknown>;
  const itemFactor = Math.max(1, count(o["maxItems"]) ?? (count(o["minItems"]) ?? 0) + 1);
  let sum = add(count(o["maxLength"]) ?? count(o["minLength"]) ?? 0, 1);
  for (const [k, child] of Object.entries(o)) {
    if (BRANCH_KEYS.has(k) && Array.isArray(child)) {
      tally.alternatives += child.length;
      if (tally.alternatives > limits.maxGrammarAlternatives) throw new Exceeded(`more than ${limits.maxGrammarAlternatives} alternatives (KVEDGE_LIMITS.maxGrammarAlternatives)`);
    }
    if (k === "patternProperties" && child !== null && typeof child === "object" && !Array.isArray(child)) {
      // Each key is a regex the compiler turns into the property name's grammar.
      for (const key of Object.keys(child)) {
        const before = tally.expansion;
        measurePattern(key, "regex", { ...limits, maxGrammarExpansion: limits.maxGrammarExpansion - sum }, tally);
        sum = add(tally.expansion - before, sum);
        tally.expansion = before;
      }
    }
    if (typeof child === "string" && (k === "pattern" || k === "regex")) {
      const before = tally.expansion;
      measurePattern(child, "regex", { ...limits, maxGrammarExpansion: limits.maxGrammarExpansion - sum }, tally);
      sum = add(tally.expansion - before, sum);
      tally.expansion = before;
    } else if (typeof child === "string" && (k === "grammar" || k === "ebnf")) {
      const before = tally.expansion;
      measurePattern(child, "ebnf", { ...limits, maxGrammarExpansion: limits.maxGrammarExpansion - sum }, tally);
      sum = add(tally.expansion - before, sum);
      tally.expansion = before;
    } else {
      const n = measureSchema(child, depth + 1, limits, tally);
      sum = add(ITEM_KEYS.has(k) ? n * itemFactor : n, sum);
    }
  }
  return sum;
}

/** Refuses a `regex` or `ebnf` grammar past the limits (400 naming the bound and the field). */
export function checkPatternGrammar(text: string, dialect: "regex" | "ebnf", param: string, limits: GrammarLimits): void {
  try {
    measurePattern(text, dialect, limits, { expansion: 0, alternatives: 0 });
  } catch (e) {
    if (e instanceof Exceeded) throw refusal(param, e);
    throw e;
  }
}

/** Refuses a JSON schema or structural tag past the limits (400 naming the bound and the field). */
export function checkSchemaGrammar(schema: unknown, param: string, limits: GrammarLimits): void {
  const tally = { expansion: 0, alternatives: 0 };
  try {
    tally.expansion = measureSchema(schema, 1, limits, tally);
  } catch (e) {
    if (e instanceof Exceeded) throw refusal(param, e);
    throw e;
  }
}
