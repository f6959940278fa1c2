import { describe, expect, it } from "vitest";
import { StageClock } from "../../../src/edge/server-timing.ts";

describe("StageClock (Server-Timing stages for admin callers)", () => {
  it("books each stage the time since the previous mark, in order, as Server-Timing entries", () => {
    const times = [100, 103, 103, 110, 111.5];
    const clock = new StageClock(() => times.shift()!);
    clock.mark("read");
    clock.mark("parse");
    clock.mark("prepare");
    expect(clock.header()).toBe("read;dur=3, parse;dur=0, prepare;dur=7");
    expect(clock.elapsed()).toBe(11.5);
    expect(clock.start).toBe(100);
  });

  it("is empty before any mark", () => {
    expect(new StageClock(() => 5).header()).toBe("");
  });
});
