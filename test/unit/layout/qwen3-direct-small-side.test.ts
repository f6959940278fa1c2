/**
 * `qwen3_direct_resize` (SGLang's newer processors/qwen3_vl.py) for every small-side and
 * extreme-aspect frame size, against the upstream source:
 *
 * - sgl-project/sglang python/sglang/srt/multimodal/processors/qwen3_vl.py (commits 0583392b and
 *   baf9b759, `preprocess_video` L23-38 at baf9b759): frames are sampled (`smart_nframes`,
 *   `np.linspace(..., dtype=np.int64)`, `np.unique`) and handed on at their ORIGINAL size; the
 *   comment at L24-25 says spatial resize stays with the model's processor. So any frame side below
 *   32 reaches transformers' Qwen3-VL `smart_resize` as it is (on main SGLang's factor-28 pre-resize
 *   makes every side >= 28 first).
 * - huggingface/transformers src/transformers/models/qwen3_vl/video_processing_qwen3_vl.py
 *   `smart_resize` (L67-100 at 04e7e5e6): a side below `factor` is scaled up first (L78-81), then
 *   `max/min > 200` raises ValueError (L83-86). transformers 4.57 raised ValueError for the small
 *   side instead (`if height < factor or width < factor: raise`, then `elif` the aspect check);
 *   which branch SGLang's pin (5.12.1) has is unverified (docs/layout.md, "Known gaps and unverified points").
 *
 * The oracle below is that Python run by python3 (stdlib only), independent of src/layout. For
 * each branch the worker either raises ValueError, and kvedge must fail closed to text-prefix
 * routing with reason "worker_would_reject", or returns a size, and kvedge must build exactly it.
 * With the branch unknown (the default for transformers >= 5 without the contract flag) kvedge
 * must never guess: every side below 32 fails closed with "unpredictable_geometry".
 */
import { spawnSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import { layoutVideoItem, type WorkerContract } from "../../../src/layout/index.ts";
import { fixtureContract } from "../../fixtures/models/load.ts";
import { requireInCi } from "../../helpers/required.ts";

const hasPython = requireInCi(spawnSync("python3", ["-c", "import math"]).status === 0, "python3", "the upstream-transcribed resize oracle");

// (height, width, frames, fps). Sides 1..33 against short and long partners, both orientations,
// the aspect boundary (200 exactly vs just above, before and after the small-side scale-up), and
// the float edge where int(h * (32 / h)) could fall below 32.
const CASES: [number, number, number, number][] = [];
const partners = [1, 2, 16, 31, 32, 33, 48, 64, 640, 1000, 3000, 6199, 6200, 6201, 6400, 6401, 6500, 7000, 9000];
for (let s = 1; s <= 33; s++) {
  for (const p of partners) {
    CASES.push([s, p, 60, 30]);
    if (p !== s) CASES.push([p, s, 60, 30]);
  }
}
for (const [h, w] of [[10, 2000], [10, 2001], [10, 2500], [16, 3200], [16, 3201], [31, 6200], [29, 5800], [29, 5801], [7, 1400], [7, 1401], [3, 600], [3, 601]] as const) {
  CASES.push([h, w, 60, 30], [w, h, 60, 30]);
}
// Frame counts change the clip budget: 2 frames (the least that samples), a long clip.
for (const [h, w] of [[20, 640], [16, 16], [31, 33], [28, 5000]] as const) CASES.push([h, w, 2, 30], [h, w, 9000, 30]);

const ORACLE = `
import json, math, sys
FACTOR, TEMPORAL, MIN_PX, MAX_PX = 32, 2, int(sys.argv[1]), int(sys.argv[2])
def resize(branch, t, h, w):
    if t < TEMPORAL:
        raise ValueError("t")
    if h < FACTOR or w < FACTOR:
        if branch == "raise":
            raise ValueError("small side")
        s = max(FACTOR / h, FACTOR / w)
        h = int(h * s)
        w = int(w * s)
    if max(h, w) / min(h, w) > 200:
        raise ValueError("aspect")
    hb = round(h / FACTOR) * FACTOR
    wb = round(w / FACTOR) * FACTOR
    tb = round(t / TEMPORAL) * TEMPORAL
    if tb * hb * wb > MAX_PX:
        beta = math.sqrt((t * h * w) / MAX_PX)
        hb = max(FACTOR, math.floor(h / beta / FACTOR) * FACTOR)
        wb = max(FACTOR, math.floor(w / beta / FACTOR) * FACTOR)
    elif tb * hb * wb < MIN_PX:
        beta = math.sqrt(MIN_PX / (t * h * w))
        hb = math.ceil(h * beta / FACTOR) * FACTOR
        wb = math.ceil(w * beta / FACTOR) * FACTOR
    return [hb, wb]
out = []
for line in sys.stdin:
    branch, t, h, w = json.loads(line)
    try:
        out.append(resize(branch, t, h, w))
    except ValueError:
        out.append("ValueError")
print(json.dumps(out))
`;

function oracle(c: WorkerContract, jobs: [string, number, number, number][]): ([number, number] | "ValueError")[] {
  const r = spawnSync("python3", ["-c", ORACLE, String(c.hf.videoMinPixels), String(c.hf.videoMaxPixels)], {
    input: jobs.map((j) => JSON.stringify(j)).join("\n"),
    encoding: "utf8",
    maxBuffer: 64 << 20,
  });
  if (r.status !== 0) throw new Error(r.stderr);
  return JSON.parse(r.stdout);
}

const contractFor = (smallSide?: "raise" | "scale"): WorkerContract =>
  fixtureContract("qwen3_vl", { version: "0.5.19", flags: { qwen3DirectResize: true, ...(smallSide ? { qwen3VideoSmallSide: smallSide } : {}) } });

describe.skipIf(!hasPython)("qwen3_direct_resize: small sides and extreme aspects = the worker's Python", () => {
  for (const branch of ["raise", "scale"] as const) {
    it(`${branch} branch: ${CASES.length} frame sizes, each a layout of exactly the worker's size or a named fallback`, () => {
      const c = contractFor(branch);
      expect(c.sglangVariant).toBe("qwen3_direct_resize");
      // The frames the worker resizes: the direct variant's sampling (checked by the golden set).
      const framesOf = (h: number, w: number, t: number, fps: number): number => {
        const r = layoutVideoItem(contractFor("scale"), { totalFrames: t, avgFps: fps, height: Math.max(h, 64), width: Math.max(w, 64) });
        if (!r.ok) throw new Error(r.detail);
        return r.geometry.nframes;
      };
      const jobs = CASES.map(([h, w, t, fps]) => [branch, framesOf(h, w, t, fps), h, w] as [string, number, number, number]);
      const want = oracle(c, jobs);
      const wrong: string[] = [];
      CASES.forEach(([h, w, t, fps], i) => {
        const r = layoutVideoItem(c, { totalFrames: t, avgFps: fps, height: h, width: w });
        const expected = want[i]!;
        const got = r.ok ? r.geometry.hfResizedHw : r.reason;
        const ok = expected === "ValueError" ? !r.ok && r.reason === "worker_would_reject" : r.ok && r.geometry.hfResizedHw[0] === expected[0] && r.geometry.hfResizedHw[1] === expected[1];
        if (!ok) wrong.push(`${h}x${w} (${t} frames): worker ${JSON.stringify(expected)}, kvedge ${JSON.stringify(got)}`);
      });
      expect(wrong).toEqual([]);
      // Both outcomes occur, so the comparison is not vacuous.
      expect(want.filter((x) => x === "ValueError").length).toBeGreaterThan(10);
      expect(want.filter((x) => x !== "ValueError").length).toBeGreaterThan(10);
    });
  }

  it("branch unknown (transformers >= 5, no flag): every side below 32 fails closed by name, never a guessed layout", () => {
    const c = contractFor();
    expect(c.smallSidePolicy).toBe("unknown");
    const raise = contractFor("raise");
    for (const [h, w, t, fps] of CASES) {
      const r = layoutVideoItem(c, { totalFrames: t, avgFps: fps, height: h, width: w });
      if (h < 32 || w < 32) {
        expect(r, `${h}x${w}`).toMatchObject({ ok: false, reason: "unpredictable_geometry" });
      } else {
        // Sides >= 32: the two transformers branches agree, and so must kvedge.
        expect(r, `${h}x${w}`).toEqual(layoutVideoItem(raise, { totalFrames: t, avgFps: fps, height: h, width: w }));
      }
    }
  });
});
