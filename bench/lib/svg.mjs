// Hand-written SVG charts (no plotting library): horizontal bars with an optional goal line.
const esc = (s) => String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
const PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f"];

function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

const num = (v) => (Math.abs(v) >= 100 ? v.toFixed(0) : Math.abs(v) >= 10 ? v.toFixed(1) : v.toFixed(2));

/**
 * bars: [{ label, value, group?, note? }]; goal: { value, label } draws a dashed line;
 * log: log10 axis (values must be > 0). Groups get colours; the legend lists them.
 */
export function barChart({ title, unit, bars, goal = null, log = false, width = 760 }) {
  const rowH = 24;
  const left = 250;
  const right = 90;
  const top = 44;
  const legendGroups = [...new Set(bars.map((b) => b.group).filter(Boolean))];
  const legendH = legendGroups.length > 1 ? 22 : 0;
  const height = top + bars.length * rowH + 34 + legendH;
  const plotW = width - left - right;
  const vals = bars.map((b) => b.value).filter((v) => Number.isFinite(v));
  if (goal) vals.push(goal.value);
  let x;
  let ticks;
  if (log) {
    const lo = Math.pow(10, Math.floor(Math.log10(Math.min(...vals.filter((v) => v > 0)))));
    const hi = Math.pow(10, Math.ceil(Math.log10(Math.max(...vals))));
    x = (v) => left + (plotW * (Math.log10(Math.max(v, lo)) - Math.log10(lo))) / (Math.log10(hi) - Math.log10(lo) || 1);
    ticks = [];
    for (let t = lo; t <= hi * 1.0001; t *= 10) ticks.push(t);
  } else {
    const hi = niceMax(Math.max(...vals, 0));
    x = (v) => left + (plotW * Math.max(0, v)) / hi;
    ticks = [0, 0.25, 0.5, 0.75, 1].map((f) => f * hi);
  }
  const colorOf = (b, i) => PALETTE[(b.group ? legendGroups.indexOf(b.group) : i) % PALETTE.length];
  const out = [];
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12">`);
  out.push(`<rect width="100%" height="100%" fill="white"/>`);
  out.push(`<text x="${width / 2}" y="20" text-anchor="middle" font-size="14" font-weight="bold">${esc(title)}</text>`);
  const axisY = top + bars.length * rowH + 4;
  for (const t of ticks) {
    const tx = x(t);
    out.push(`<line x1="${tx}" y1="${top - 6}" x2="${tx}" y2="${axisY}" stroke="#ddd"/>`);
    out.push(`<text x="${tx}" y="${axisY + 14}" text-anchor="middle" fill="#555">${esc(num(t))}</text>`);
  }
  out.push(`<text x="${left + plotW / 2}" y="${axisY + 28}" text-anchor="middle" fill="#333">${esc(unit)}${log ? " (log scale)" : ""}</text>`);
  bars.forEach((b, i) => {
    const y = top + i * rowH;
    out.push(`<text x="${left - 8}" y="${y + 15}" text-anchor="end">${esc(b.label)}</text>`);
    if (Number.isFinite(b.value)) {
      const w = Math.max(1, x(b.value) - left);
      out.push(`<rect x="${left}" y="${y + 3}" width="${w.toFixed(1)}" height="${rowH - 8}" fill="${colorOf(b, i)}"/>`);
      out.push(`<text x="${left + w + 4}" y="${y + 15}" fill="#222">${esc(num(b.value))}${b.note ? " " + esc(b.note) : ""}</text>`);
    } else {
      out.push(`<text x="${left + 4}" y="${y + 15}" fill="#999">n/a</text>`);
    }
  });
  if (goal) {
    const gx = x(goal.value);
    out.push(`<line x1="${gx}" y1="${top - 8}" x2="${gx}" y2="${axisY}" stroke="#c00" stroke-dasharray="5,4" stroke-width="1.5"/>`);
    out.push(`<text x="${gx}" y="${top - 12}" text-anchor="middle" fill="#c00">${esc(goal.label ?? "goal")}</text>`);
  }
  if (legendGroups.length > 1) {
    let lx = left;
    const ly = height - 10;
    legendGroups.forEach((g, k) => {
      out.push(`<rect x="${lx}" y="${ly - 10}" width="12" height="12" fill="${PALETTE[k % PALETTE.length]}"/>`);
      out.push(`<text x="${lx + 16}" y="${ly}">${esc(g)}</text>`);
      lx += 24 + g.length * 7;
    });
  }
  out.push(`</svg>`);
  return out.join("\n") + "\n";
}
