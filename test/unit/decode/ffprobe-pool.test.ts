/**
 * Pre-started native ffprobe processes (services/decode/ffprobe-pool.ts): the same answers as one
 * cold ffprobe per probe (the oracle), each slot scanning the file it was given, an ffprobe that
 * does not wait at its gate caught and not trusted, the time limit, and no process outliving
 * close() or its owner.
 */
import { spawn } from "node:child_process";
import { chmodSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FfprobePool } from "../../../services/decode/ffprobe-pool.ts";
import type { ScanResult } from "../../../services/decode/ffprobe-scan.ts";
import { NativeProber, nativeAvailable, ProbeTimeoutError } from "../../../services/decode/probers.ts";
import { DEFAULT_PROBE_MEMORY_BYTES } from "../../../services/decode/ffprobe-run.ts";
import { ffmpegToFile } from "../../helpers/wasm-media.ts";
import { requireInCi } from "../../helpers/required.ts";

const hasNative = requireInCi(await nativeAvailable(), "native ffprobe", "the pool runs the native ffprobe");
const ROOT = path.resolve(import.meta.dirname, "../../..");
let dir = "";
let clipA = ""; // 45 frames @ 30000/1001
let clipB = ""; // 20 frames @ 25
let junk = "";

/** A process's children that are ffprobe, or setpriv about to exec it. */
function ffprobeChildren(pid: number | "self" = "self"): number[] {
  const out: number[] = [];
  for (const task of readdirSync(`/proc/${pid}/task`)) {
    for (const c of readFileSync(`/proc/${pid}/task/${task}/children`, "utf8").split(" ").filter(Boolean)) {
      if (["ffprobe", "setpriv", "prlimit"].includes(readFileSync(`/proc/${c}/comm`, "utf8").trim())) out.push(Number(c));
    }
  }
  return out;
}

async function gone(pids: number[], withinMs: number): Promise<boolean> {
  const until = Date.now() + withinMs;
  while (Date.now() < until) {
    if (pids.every((p) => !existsSync(`/proc/${p}`))) return true;
    await new Promise((r) => setTimeout(r, 20));
  }
  return false;
}

beforeAll(async () => {
  dir = mkdtempSync(path.join(tmpdir(), "kvedge-pool-"));
  const gen = async (name: string, rate: string, frames: number): Promise<string> => {
    const p = path.join(dir, name);
    await ffmpegToFile(["-f", "lavfi", "-i", `testsrc=size=96x64:rate=${rate}`, "-frames:v", String(frames), "-c:v", "libx264", "-preset", "veryfast"], p);
    return p;
  };
  clipA = await gen("a.mp4", "30000/1001", 45);
  clipB = await gen("b.mp4", "25", 20);
  junk = path.join(dir, "junk");
  writeFileSync(junk, new Uint8Array(4096).fill(7));
});

afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe.skipIf(!hasNative)("pre-started ffprobe", () => {
  it("answers as a cold ffprobe does, each slot with its own file, also beyond the pool's size", async () => {
    const cold = new NativeProber();
    const warm = new NativeProber({ warm: 2 });
    try {
      const want: Record<string, ScanResult> = { [clipA]: await cold.probe(clipA), [clipB]: await cold.probe(clipB) };
      expect(want[clipA]!.meta.numFrames).toBe(45);
      expect(want[clipB]!.meta.numFrames).toBe(20);
      for (const f of [clipA, clipB, clipB, clipA]) expect(await warm.probe(f)).toEqual(want[f]);
      // Five at once over two slots: three start their own ffprobe.
      const files = [clipA, clipB, clipA, clipB, clipA];
      const got = await Promise.all(files.map((f) => warm.probe(f)));
      got.forEach((g, i) => expect(g).toEqual(want[files[i]!]));
      await expect(warm.probe(junk)).rejects.toMatchObject({ reason: "unprobeable_media" });
      expect(await warm.probe(clipB)).toEqual(want[clipB]);
    } finally {
      await warm.close();
    }
  });

  it("does not trust an ffprobe that ignores its gate, and switches itself off", async () => {
    // Ignores FFREPORT and starts once the input link (its last argument) exists, however late the
    // probe comes: a right answer, obtained without the gate (the wait is bounded at ~30 s).
    const wrapper = path.join(dir, "ungated-ffprobe");
    writeFileSync(wrapper, '#!/bin/sh\nunset FFREPORT\nfor input; do :; done\nn=0\nwhile [ ! -e "$input" ] && [ $n -lt 3000 ]; do sleep 0.01; n=$((n + 1)); done\nexec ffprobe "$@"\n');
    chmodSync(wrapper, 0o755);
    const pool = (await FfprobePool.create(wrapper, DEFAULT_PROBE_MEMORY_BYTES, 1, dir))!;
    try {
      expect(pool.enabled).toBe(true);
      expect(await pool.scan(clipA, 30_000)).toBeNull();
      expect(pool.enabled).toBe(false);
      expect(await pool.scan(clipA, 30_000)).toBeNull();
    } finally {
      await pool.close();
    }
    const prober = new NativeProber({ ffprobePath: wrapper, warm: 1 });
    try {
      expect((await prober.probe(clipA)).meta.numFrames).toBe(45);
    } finally {
      await prober.close();
    }
  });

  it("kills a probe past its time limit, and the slot works again (pool under a relative tmpDir)", async () => {
    const pool = (await FfprobePool.create("ffprobe", DEFAULT_PROBE_MEMORY_BYTES, 1, path.relative(process.cwd(), dir)))!;
    try {
      expect(await pool.scan(clipA, 1)).toMatchObject({ timedOut: true });
      expect((await pool.scan(clipA, 30_000))!.scan!.meta.numFrames).toBe(45);
    } finally {
      await pool.close();
    }
    const prober = new NativeProber({ warm: 1, timeoutMs: 1 });
    try {
      await expect(prober.probe(clipA)).rejects.toBeInstanceOf(ProbeTimeoutError);
    } finally {
      await prober.close();
    }
  });

  it("leaves no process behind: close() kills the waiting ones, and they die with their owner", async () => {
    const pool = (await FfprobePool.create("ffprobe", DEFAULT_PROBE_MEMORY_BYTES, 2, dir))!;
    const pids = ffprobeChildren();
    expect(pids).toHaveLength(2);
    await pool.close();
    expect(await gone(pids, 5_000)).toBe(true);

    // An owner killed with SIGKILL runs no cleanup; setpriv's parent-death signal does it.
    const script = `import { FfprobePool } from ${JSON.stringify(path.join(ROOT, "services/decode/ffprobe-pool.ts"))};
await FfprobePool.create("ffprobe", 536870912, 2, ${JSON.stringify(dir)});
process.stdout.write("ready\\n");
setInterval(() => {}, 1000);`;
    const owner = spawn(process.execPath, ["--input-type=module", "-e", script], { stdio: ["ignore", "pipe", "inherit"] });
    await new Promise<void>((resolve) => owner.stdout.once("data", () => resolve()));
    const orphans = ffprobeChildren(owner.pid!);
    expect(orphans).toHaveLength(2);
    owner.kill("SIGKILL");
    expect(await gone(orphans, 5_000)).toBe(true);
  });
});
