/**
 * Prometheus text exposition format 0.0.4: families with HELP/TYPE lines, then samples. Families
 * are collected by name so several pools can contribute samples (with their own `model` label) to
 * one family; names and label names are checked, label values and HELP text escaped.
 */
import type { HistogramSnapshot } from "./histogram.ts";

export type MetricType = "counter" | "gauge" | "histogram";
export type Labels = Readonly<Record<string, string>>;

export const EXPOSITION_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

interface Sample {
  name: string;
  labels: Labels;
  value: number;
}

interface Family {
  name: string;
  help: string;
  type: MetricType;
  samples: Sample[];
}

export class FamilyWriter {
  readonly #family: Family;
  constructor(family: Family) {
    this.#family = family;
  }

  /** One counter or gauge sample. */
  set(labels: Labels, value: number): this {
    if (this.#family.type === "histogram") throw new TypeError(`${this.#family.name} is a histogram; use histogram()`);
    this.#family.samples.push({ name: this.#family.name, labels: checked(labels), value });
    return this;
  }

  /** A whole histogram series: cumulative `_bucket{le}` samples, `_sum` and `_count`. */
  histogram(labels: Labels, h: HistogramSnapshot): this {
    const f = this.#family;
    if (f.type !== "histogram") throw new TypeError(`${f.name} is not a histogram`);
    const base = checked(labels);
    if ("le" in base) throw new RangeError("'le' is reserved for histogram buckets");
    let cumulative = 0;
    for (let i = 0; i < h.bounds.length; i++) {
      cumulative += h.counts[i] ?? 0;
      f.samples.push({ name: `${f.name}_bucket`, labels: { ...base, le: formatValue(h.bounds[i]!) }, value: cumulative });
    }
    f.samples.push({ name: `${f.name}_bucket`, labels: { ...base, le: "+Inf" }, value: h.count });
    f.samples.push({ name: `${f.name}_sum`, labels: base, value: h.sum });
    f.samples.push({ name: `${f.name}_count`, labels: base, value: h.count });
    return this;
  }
}

export class ExpositionBuilder {
  readonly #families = new Map<string, Family>();

  counter(name: string, help: string): FamilyWriter {
    if (!name.endsWith("_total")) throw new RangeError(`counter ${name} must end in _total`);
    return this.#family(name, help, "counter");
  }

  gauge(name: string, help: string): FamilyWriter {
    return this.#family(name, help, "gauge");
  }

  histogram(name: string, help: string): FamilyWriter {
    return this.#family(name, help, "histogram");
  }

  #family(name: string, help: string, type: MetricType): FamilyWriter {
    if (!METRIC_NAME.test(name)) throw new RangeError(`bad metric name ${name}`);
    let f = this.#families.get(name);
    if (!f) {
      f = { name, help, type, samples: [] };
      this.#families.set(name, f);
    } else if (f.type !== type) throw new TypeError(`${name} registered as ${f.type}, not ${type}`);
    return new FamilyWriter(f);
  }

  render(): string {
    const out: string[] = [];
    for (const f of this.#families.values()) {
      out.push(`# HELP ${f.name} ${escapeHelp(f.help)}`, `# TYPE ${f.name} ${f.type}`);
      for (const s of f.samples) out.push(`${s.name}${renderLabels(s.labels)} ${formatValue(s.value)}`);
    }
    return out.length ? out.join("\n") + "\n" : "";
  }
}

function checked(labels: Labels): Labels {
  for (const k of Object.keys(labels)) {
    if (!LABEL_NAME.test(k) || k.startsWith("__")) throw new RangeError(`bad label name ${k}`);
  }
  return labels;
}

function renderLabels(labels: Labels): string {
  const keys = Object.keys(labels);
  if (keys.length === 0) return "";
  return `{${keys.map((k) => `${k}="${escapeLabelValue(labels[k]!)}"`).join(",")}}`;
}

export function escapeLabelValue(v: string): string {
  return v.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");
}

function escapeHelp(v: string): string {
  return v.replace(/\\/g, "\\\\").replace(/\n/g, "\\n");
}

/** Go-style float formatting as Prometheus expects: +Inf, -Inf, NaN, otherwise shortest decimal. */
export function formatValue(v: number): string {
  if (Number.isNaN(v)) return "NaN";
  if (v === Infinity) return "+Inf";
  if (v === -Infinity) return "-Inf";
  return String(v);
}
