// Small statistics helpers shared by the suites (no timing assertions anywhere).
export function quantile(sorted, q) {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[i];
}

export function summarize(samples) {
  const s = Float64Array.from(samples).sort();
  const mean = s.reduce((a, b) => a + b, 0) / Math.max(1, s.length);
  return { n: s.length, min: s[0], p50: quantile(s, 0.5), p90: quantile(s, 0.9), p99: quantile(s, 0.99), max: s[s.length - 1], mean };
}

/** Seeded PRNG (mulberry32): every synthetic input is reproducible from its seed. */
export function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Zipf(s) sampler over ranks 0..n-1 (inverse CDF over precomputed weights). */
export function zipf(n, s, random) {
  const cdf = new Float64Array(n);
  let acc = 0;
  for (let k = 0; k < n; k++) cdf[k] = acc += 1 / Math.pow(k + 1, s);
  for (let k = 0; k < n; k++) cdf[k] /= acc;
  return () => {
    const u = random();
    let lo = 0;
    let hi = n - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (cdf[mid] < u) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  };
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Runs fn repeatedly for about `ms` (at least `minIters` times); returns per-call ms samples. */
export function sampleFor(fn, ms, minIters = 20, maxIters = 1e6) {
  const out = [];
  const end = performance.now() + ms;
  while ((out.length < minIters || performance.now() < end) && out.length < maxIters) {
    const t = performance.now();
    fn();
    out.push(performance.now() - t);
  }
  return out;
}

export const fmt = (v, digits = 2) => {
  if (v === null || v === undefined || Number.isNaN(v)) return "–";
  if (typeof v !== "number") return String(v);
  const a = Math.abs(v);
  if (a >= 1e9) return (v / 1e9).toFixed(2) + " G";
  if (a >= 1e6) return (v / 1e6).toFixed(2) + " M";
  if (a >= 1e4) return (v / 1e3).toFixed(1) + " k";
  if (a >= 100) return v.toFixed(0);
  return v.toFixed(digits);
};

/** Arithmetic mean of `xs`. */
export const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;

/** A figure over several seeds: its mean, sample standard deviation (n − 1; 0 for one run) and the runs. */
export function acrossSeeds(xs) {
  const m = mean(xs);
  const sd = xs.length < 2 ? 0 : Math.sqrt(xs.reduce((a, x) => a + (x - m) ** 2, 0) / (xs.length - 1));
  return { mean: m, sd, runs: xs };
}
