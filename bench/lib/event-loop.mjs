// The bench simulators' discrete-event loop: a simulated clock, steps the workers schedule, and the
// trace's arrivals, taken in (time, scheduling order).
import { Heap } from "./heap.mjs";

export class EventLoop {
  /** Simulated time, ms: the time of the event being handled. */
  now = 0;
  #seq = 0;
  #events = new Heap();

  /** Runs `fn(now)` at time `t` (a worker's next step). */
  schedule = (t, fn) => this.#events.push({ t, seq: this.#seq++, type: "step", fn });

  /** Hands each request of `trace` to `arrive(req, now)` at its `at`, between the scheduled steps, until none is left. */
  run(trace, arrive) {
    for (const req of trace) this.#events.push({ t: req.at, seq: this.#seq++, type: "arrive", req });
    while (this.#events.size) {
      const ev = this.#events.pop();
      this.now = ev.t;
      if (ev.type === "step") ev.fn(this.now);
      else arrive(ev.req, this.now);
    }
  }
}
