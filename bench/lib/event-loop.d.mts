// Types for the TypeScript importers of event-loop.mjs (the worker-model tests replay through it).
export class EventLoop {
  now: number;
  schedule: (t: number, fn: (now: number) => void) => void;
  run<R extends { at: number }>(trace: readonly R[], arrive: (req: R, now: number) => void): void;
}
