/**
 * Per-request stage clock for the `Server-Timing` header. Durations are wall-clock milliseconds as
 * the runtime reports them (deployed workerd advances its clock only across I/O, so CPU-only stages
 * read 0 there; local workerd and Node tick in real time). The stage breakdown is sent to admin
 * callers only: stage times reveal cache state (a warm prefix prepares faster) to whoever sees them.
 */
export class StageClock {
  private readonly now: () => number;
  private last: number;
  readonly start: number;
  private readonly stages: [string, number][] = [];

  constructor(now: () => number = Date.now) {
    this.now = now;
    this.start = this.last = now();
  }

  /** Ends the stage `name` (the time since the previous mark). */
  mark(name: string): void {
    const t = this.now();
    this.stages.push([name, t - this.last]);
    this.last = t;
  }

  /** Time since the clock started. */
  elapsed(): number {
    return this.now() - this.start;
  }

  /** `name;dur=ms` entries for a Server-Timing header, in stage order. */
  header(): string {
    return this.stages.map(([n, d]) => `${n};dur=${d}`).join(", ");
  }
}
