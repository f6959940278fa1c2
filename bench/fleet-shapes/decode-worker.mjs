// A PD pool's decode worker on the GPU-calibrated cost model (services/sglang-sim/timing.ts): it
// runs nothing but batched decode steps (a + b·batch + c·KV tokens, measured on the GPU). A request
// whose KV has arrived joins the running batch at the next step boundary, when the decode server
// streams the first token the prefill sampled; it then takes one step per further output token.
// SGLang's decode server keeps no radix cache by default (ChunkCache), so a request's KV is its
// whole prompt plus its output, freed when it finishes; a request whose KV does not fit waits, FIFO.
import { decodeStepMs } from "../../services/sglang-sim/timing.ts";

export class DecodeWorker {
  constructor({ capacityTokens, timing, schedule }) {
    Object.assign(this, { capacityTokens, timing, schedule });
    this.pending = [];
    this.running = [];
    this.usedTokens = 0;
    this.stepping = false;
  }

  /** `job`: { req, r (ttft and finishAt set here, from r.arrivedAt), onFinished(now) }; its KV is here at `now`. */
  submit(job, now) {
    this.pending.push(job);
    if (!this.stepping) this.step(now);
  }

  step(now) {
    this.stepping = true;
    while (this.pending.length > 0) {
      const job = this.pending[0];
      const need = job.req.tokens.length + job.req.output.length;
      if (this.running.length > 0 && this.usedTokens + need > this.capacityTokens) break;
      this.pending.shift();
      this.usedTokens += need;
      job.need = need;
      job.r.ttft = now - job.r.arrivedAt;
      job.left = job.req.output.length - 1;
      job.context = job.req.tokens.length + 1;
      if (job.left <= 0) this.finish(job, now);
      else this.running.push(job);
    }
    if (this.running.length === 0) {
      this.stepping = false;
      return;
    }
    let kv = 0;
    for (const job of this.running) kv += job.context;
    const batch = this.running.slice();
    this.schedule(now + decodeStepMs(this.timing, batch.length, kv), (t) => {
      for (const job of batch) {
        job.context++;
        if (--job.left <= 0) this.finish(job, t);
      }
      this.step(t);
    });
  }

  finish(job, now) {
    const i = this.running.indexOf(job);
    if (i >= 0) this.running.splice(i, 1);
    this.usedTokens -= job.need;
    job.r.finishAt = now;
    job.onFinished(now);
  }
}
