/**
 * The ffprobe output parser reads at most MAX_PROBE_PACKETS packets: a few KB of container can
 * declare ~100 M samples, and the packet lines alone cost this process tens of seconds (a 195 MB
 * IVF of 15 M one-byte frames: ~26 s of the decode service's CPU before the cap).
 */
import { describe, expect, it } from "vitest";
import { FfprobeOutputParser, MAX_PROBE_PACKETS } from "../../../services/decode/ffprobe-scan.ts";

const STREAM = "stream|codec_name=h264|width=64|height=64|time_base=1/1000|r_frame_rate=30/1|avg_frame_rate=30/1\n";
const packet = (i: number): string => `packet|pts=${i * 33}|dts=${i * 33}|duration=33|flags=K__\n`;

describe("FfprobeOutputParser packet cap", () => {
  it("stops at the cap: overflowed, no result, and nothing more is read", () => {
    const p = new FfprobeOutputParser(10);
    p.push(STREAM);
    for (let i = 0; i < 10; i++) p.push(packet(i));
    expect(p.overflowed).toBe(false);
    p.push(packet(10));
    expect(p.overflowed).toBe(true);
    expect(p.finish()).toBeNull();
  });

  it("under the cap the scan is complete", () => {
    const p = new FfprobeOutputParser(10);
    p.push(STREAM + Array.from({ length: 10 }, (_, i) => packet(i)).join(""));
    expect(p.finish()?.meta.numFrames).toBe(10);
  });

  it("the default cap is 1 M packets (4.6 h at 60 fps)", () => {
    expect(MAX_PROBE_PACKETS).toBe(1_000_000);
  });
});
