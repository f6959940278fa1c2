/**
 * A strict parser for the Prometheus text exposition format 0.0.4, for tests. Stricter than
 * Prometheus itself where the format leaves room: every family needs HELP and TYPE before its
 * samples, families must be contiguous, series unique, counters non-negative and named `_total`,
 * histograms complete (increasing `le`, cumulative counts, `+Inf` = `_count`, `_sum` present).
 */

export interface ParsedSample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface ParsedFamily {
  name: string;
  type: string;
  help: string;
  samples: ParsedSample[];
}

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*/;
const TYPES = new Set(["counter", "gauge", "histogram", "summary", "untyped"]);

export class PromParseError extends Error {}

function fail(lineNo: number, msg: string): never {
  throw new PromParseError(`line ${lineNo}: ${msg}`);
}

function parseValue(s: string, lineNo: number): number {
  if (s === "+Inf" || s === "Inf") return Infinity;
  if (s === "-Inf") return -Infinity;
  if (s === "NaN") return NaN;
  if (!/^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(s)) fail(lineNo, `bad value '${s}'`);
  return Number(s);
}

function unescapeHelp(s: string, lineNo: number): string {
  return s.replace(/\\(.)/g, (_, c: string) => {
    if (c === "\\") return "\\";
    if (c === "n") return "\n";
    return fail(lineNo, `bad escape \\${c} in HELP`);
  });
}

function familyOf(sampleName: string, families: Map<string, ParsedFamily>): ParsedFamily | undefined {
  const direct = families.get(sampleName);
  if (direct && direct.type !== "histogram" && direct.type !== "summary") return direct;
  for (const suffix of ["_bucket", "_sum", "_count"]) {
    if (!sampleName.endsWith(suffix)) continue;
    const f = families.get(sampleName.slice(0, -suffix.length));
    if (f && (f.type === "histogram" || (f.type === "summary" && suffix !== "_bucket"))) return f;
  }
  return direct;
}

function parseSample(line: string, lineNo: number): ParsedSample {
  const nm = METRIC_NAME.exec(line);
  if (!nm) fail(lineNo, "sample must start with a metric name");
  const name = nm[0];
  let i = name.length;
  const labels: Record<string, string> = {};
  if (line[i] === "{") {
    i++;
    while (line[i] !== "}") {
      const ln = LABEL_NAME.exec(line.slice(i));
      if (!ln) fail(lineNo, "bad label name");
      const label = ln[0];
      if (label.startsWith("__")) fail(lineNo, `reserved label name ${label}`);
      if (label in labels) fail(lineNo, `duplicate label ${label}`);
      i += label.length;
      if (line[i] !== "=" || line[i + 1] !== '"') fail(lineNo, `expected =" after ${label}`);
      i += 2;
      let v = "";
      for (;;) {
        const c = line[i];
        if (c === undefined) fail(lineNo, "unterminated label value");
        if (c === '"') break;
        if (c === "\\") {
          const e = line[i + 1];
          if (e === "\\") v += "\\";
          else if (e === '"') v += '"';
          else if (e === "n") v += "\n";
          else fail(lineNo, `bad escape \\${e ?? ""} in label value`);
          i += 2;
        } else {
          v += c;
          i++;
        }
      }
      i++;
      labels[label] = v;
      if (line[i] === ",") i++;
      else if (line[i] !== "}") fail(lineNo, "expected , or } after a label");
    }
    i++;
  }
  if (line[i] !== " ") fail(lineNo, "expected one space before the value");
  const rest = line.slice(i + 1).split(" ");
  if (rest.length < 1 || rest.length > 2 || rest.some((p) => p === "")) fail(lineNo, "expected 'value [timestamp]'");
  const value = parseValue(rest[0]!, lineNo);
  if (rest[1] !== undefined && !/^-?\d+$/.test(rest[1])) fail(lineNo, "bad timestamp");
  return { name, labels, value };
}

function seriesKey(name: string, labels: Record<string, string>, drop?: string): string {
  return name + "{" + Object.keys(labels).filter((k) => k !== drop).sort().map((k) => `${k}=${JSON.stringify(labels[k])}`).join(",") + "}";
}

function checkHistogram(f: ParsedFamily): void {
  const series = new Map<string, { buckets: [number, number][]; sum?: number; count?: number }>();
  for (const s of f.samples) {
    const key = seriesKey(f.name, s.labels, "le");
    let e = series.get(key);
    if (!e) series.set(key, (e = { buckets: [] }));
    if (s.name.endsWith("_bucket")) {
      if (!("le" in s.labels)) throw new PromParseError(`${f.name}: bucket without le`);
      e.buckets.push([parseValue(s.labels["le"]!, 0), s.value]);
    } else if (s.name.endsWith("_sum")) e.sum = s.value;
    else if (s.name.endsWith("_count")) e.count = s.value;
    else throw new PromParseError(`${f.name}: unexpected sample ${s.name}`);
  }
  for (const [key, e] of series) {
    if (e.sum === undefined || e.count === undefined) throw new PromParseError(`${key}: missing _sum or _count`);
    const last = e.buckets[e.buckets.length - 1];
    if (!last || last[0] !== Infinity) throw new PromParseError(`${key}: missing +Inf bucket`);
    for (let i = 1; i < e.buckets.length; i++) {
      if (!(e.buckets[i]![0] > e.buckets[i - 1]![0])) throw new PromParseError(`${key}: le not increasing`);
      if (e.buckets[i]![1] < e.buckets[i - 1]![1]) throw new PromParseError(`${key}: bucket counts not cumulative`);
    }
    if (last[1] !== e.count) throw new PromParseError(`${key}: +Inf bucket ${last[1]} ≠ _count ${e.count}`);
  }
}

export function parsePrometheusText(text: string): Map<string, ParsedFamily> {
  if (text.length > 0 && !text.endsWith("\n")) throw new PromParseError("exposition must end with a newline");
  const families = new Map<string, ParsedFamily>();
  const closed = new Set<string>();
  const seen = new Set<string>();
  let current: ParsedFamily | null = null;
  const lines = text.split("\n");
  lines.pop();
  lines.forEach((line, idx) => {
    const lineNo = idx + 1;
    if (line === "") return;
    if (line.startsWith("#")) {
      const m = /^# (HELP|TYPE) (\S+) ?(.*)$/.exec(line);
      if (!m) return; // a plain comment
      const [, kind, name, rest] = m as unknown as [string, string, string, string];
      if (!METRIC_NAME.test(name) || METRIC_NAME.exec(name)![0] !== name) fail(lineNo, `bad metric name ${name}`);
      if (closed.has(name)) fail(lineNo, `family ${name} is not contiguous`);
      let f = families.get(name);
      if (current && current.name !== name) closed.add(current.name);
      if (!f) {
        f = { name, type: "", help: "", samples: [] };
        families.set(name, f);
      } else if (f.samples.length) fail(lineNo, `${kind} for ${name} after its samples`);
      current = f;
      if (kind === "HELP") {
        if (f.help) fail(lineNo, `second HELP for ${name}`);
        f.help = unescapeHelp(rest, lineNo) || " ";
      } else {
        if (f.type) fail(lineNo, `second TYPE for ${name}`);
        if (!TYPES.has(rest)) fail(lineNo, `unknown type ${rest}`);
        f.type = rest;
      }
      return;
    }
    const s = parseSample(line, lineNo);
    const f = familyOf(s.name, families);
    if (!f || !f.type) fail(lineNo, `sample ${s.name} has no TYPE line before it`);
    if (!f.help) fail(lineNo, `sample ${s.name} has no HELP line`);
    if (current !== f) fail(lineNo, `sample ${s.name} outside its family's block`);
    const key = seriesKey(s.name, s.labels);
    if (seen.has(key)) fail(lineNo, `duplicate series ${key}`);
    seen.add(key);
    if (f.type === "counter") {
      if (!f.name.endsWith("_total")) fail(lineNo, `counter ${f.name} must end in _total`);
      if (!(s.value >= 0)) fail(lineNo, `counter ${s.name} is negative or NaN`);
    }
    f.samples.push(s);
  });
  for (const f of families.values()) {
    if (!f.type) throw new PromParseError(`family ${f.name} has no TYPE`);
    if (f.type === "histogram") checkHistogram(f);
  }
  return families;
}

/** The one sample of `family` whose labels include `labels` (throws when none or several). */
export function sampleValue(families: Map<string, ParsedFamily>, sampleName: string, labels: Record<string, string> = {}): number {
  const base = families.get(sampleName) ?? families.get(sampleName.replace(/_(bucket|sum|count)$/, ""));
  if (!base) throw new Error(`no family for ${sampleName}`);
  const hits = base.samples.filter((s) => s.name === sampleName && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  if (hits.length !== 1) throw new Error(`${sampleName} ${JSON.stringify(labels)}: ${hits.length} samples`);
  return hits[0]!.value;
}
