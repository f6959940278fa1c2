// The simulated worker's side of a request in the bench simulators: admission against the paged
// radix cache with a KV capacity (match, pin, evict, reserve), the prompt cached after prefill, and
// prompt + output cached at finish (as SGLang does). Two cost models: linear (one serial prefill lane
// at a fixed token rate; admit/prefilled/finished, LinearWorker) and calibrated (CalibratedWorker:
// SGLang's prefill-first scheduler with chunked prefill and a batched decode step, costs from the
// GPU-measured table of services/sglang-sim/timing.ts). A request's `media` (MediaCostItem list, vision
// traces) adds its vision-encoder time to its prefill by the simulator's rule (timing.ts encoderMs).
import { COST_TABLES, chunkSize, prefillChunkMs, prefillMs, decodeStepMs, encoderMs } from "../../services/sglang-sim/timing.ts";

/**
 * Admits `req` on worker state `st` at time `now`. Returns the match, the reserved tokens, the
 * uncached prompt tokens and when prefill completes; updates the lane, reservation and active count.
 */
export function admit(st, req, now, capacityTokens, timing) {
  const cache = st.cache;
  const ids = req.tokens;
  const match = cache.matchPrefix(ids.slice(0, ids.length - 1));
  cache.incLockRef(match.node);
  const need = ids.length - match.length + req.output.length;
  const free = capacityTokens - cache.totalTokens - st.reserved;
  if (need > free) cache.evict(need - free);
  st.reserved += need;
  const uncached = ids.length - match.length;
  const prefilledAt = Math.max(now, st.laneFree) + prefillMs(timing, uncached) + encoderMs(timing, req.media ?? [], match.length);
  st.laneFree = prefilledAt;
  st.active++;
  return { match, need, uncached, prefilledAt };
}

/** Prefill done: the prompt's pages enter the cache. `r` carries node, cached and reservedNeed. Returns when decoding ends. */
export function prefilled(st, r, req, now, pageSize, timing) {
  const { node } = st.cache.insert(req.tokens);
  st.cache.incLockRef(node);
  st.cache.decLockRef(r.node);
  r.node = node;
  const moved = req.tokens.length - (req.tokens.length % pageSize) - r.cached;
  const m = Math.min(r.reservedNeed, Math.max(0, moved));
  st.reserved -= m;
  r.reservedNeed -= m;
  return now + req.output.length * decodeStepMs(timing, st.active);
}

/** Finish: prompt + output (minus the last token) are cached; reservations and pins released. */
export function finished(st, r, req) {
  const { node } = st.cache.insert(req.tokens.concat(req.output.slice(0, req.output.length - 1)));
  st.cache.incLockRef(node);
  st.cache.decLockRef(r.node);
  st.cache.decLockRef(node);
  st.reserved -= r.reservedNeed;
  st.active--;
}

/**
 * The linear worker as one object (the model the routing bench used before calibration): the match
 * at arrival, one serial prefill lane at the timing's fixed rate, decode time fixed at prefill end.
 * `schedule(t, fn)` queues a simulation event.
 */
export class LinearWorker {
  constructor({ cache, capacityTokens, timing, pageSize, schedule }) {
    Object.assign(this, { cache, capacityTokens, timing, pageSize, schedule });
    this.laneFree = 0;
    this.active = 0;
    this.reserved = 0;
  }

  /** KV in use by requests: the cache they lock (matched prefix, then prompt); outputs are not modelled. */
  kvUsedTokens() {
    return this.cache.protectedTokens;
  }

  /** No queue of its own: every admitted request is in flight (its prefill on the lane or done). */
  queuedRequests() {
    return this.active;
  }

  /** `job`: { req, r (result record: cached, ttft set here), onPrefilled(now), onFinished(now) }. */
  submit(job, now) {
    const { req, r } = job;
    const a = admit(this, req, now, this.capacityTokens, this.timing);
    Object.assign(r, { cached: a.match.length, node: a.match.node, reservedNeed: a.need, ttft: a.prefilledAt - now });
    this.schedule(a.prefilledAt, (t) => {
      const finishAt = prefilled(this, r, req, t, this.pageSize, this.timing);
      job.onPrefilled(t);
      this.schedule(finishAt, (t2) => {
        finished(this, r, req);
        r.finishAt = t2;
        job.onFinished(t2);
      });
    });
  }
}

/**
 * The calibrated worker: SGLang's scheduler loop on the GPU-measured cost table. Each step is either
 * a prefill batch (waiting requests FIFO, up to `chunkedPrefillSize` new tokens, the last one possibly
 * a chunk of a longer prompt; the radix match happens when a request enters its first batch) or, with
 * nothing waiting, one decode step for the whole running batch. A prefill batch costs
 * T(new tokens, token-weighted cached prefix) from the table, plus the vision-encoder time of the
 * requests whose first chunk it holds (SGLang encodes a request's items in its first prefill forward
 * and serves later chunks from its embedding cache: timing.ts encoderMs, on the radix match); a decode
 * step a + b·batch + c·KV tokens.
 * TTFT ends with the batch that prefills a request's last token (that batch samples its first token).
 */
export class CalibratedWorker {
  /**
   * The KV pool is never over capacity: a request starts only when its KV fits (SGLang's
   * PrefillAdder charges each running request's remaining max_new_tokens × new_token_ratio against
   * the free + evictable pool (_get_running_request_total_token_offset), add_one_req →
   * _select_prefill_admission answers NO_TOKEN when uncached prompt + max_new_tokens exceed what is
   * left, and the scheduler's FCFS loop stops at the first NO_TOKEN:
   * python/sglang/srt/managers/schedule_policy.py, sgl-project/sglang@00550cd1); the rest wait in
   * the worker's FIFO queue. Here the ratio is 1 (a request reserves its whole output), so decode
   * never runs out of KV and SGLang's retraction of decoding requests has nothing to model.
   */
  constructor({ cache, capacityTokens, timing, pageSize, schedule }) {
    Object.assign(this, { cache, capacityTokens, timing, pageSize, schedule });
    this.table = COST_TABLES[timing.calibration];
    this.chunk = chunkSize(timing);
    this.scale = timing.prefillScale ?? 1;
    this.waiting = []; // jobs not fully prefilled, FIFO; `done` = prompt tokens prefilled or cached
    this.running = []; // decoding jobs
    this.stepping = false;
    this.reserved = 0;
    this.active = 0;
  }

  /**
   * KV tokens in use as SGLang's `sglang:token_usage` gauge counts them: max_total_num_tokens −
   * (available + evictable) (_get_token_info, python/sglang/srt/managers/
   * scheduler_runtime_checker_mixin.py, sgl-project/sglang@1f8c7ea5): the cache running requests
   * lock (matched prefixes, prompts), the output decoded so far and the finished chunks of a prompt
   * still prefilling; not the KV reserved for outputs to come, nor the evictable cache. As of the
   * last finished step.
   */
  kvUsedTokens() {
    let used = this.cache.protectedTokens;
    for (const job of this.running) used += job.context - job.req.tokens.length - 1;
    for (const job of this.waiting) if (job.started) used += job.done - job.r.cached;
    return used;
  }

  /**
   * Requests waiting for their first prefill batch: SGLang's waiting queue (`sglang:num_queue_reqs`
   * = len(waiting_queue); get_new_batch_prefill takes a batch's requests out of it, a chunked prompt
   * included, scheduler.py). A started prompt has left it.
   */
  queuedRequests() {
    let n = 0;
    for (const job of this.waiting) if (!job.started) n++;
    return n;
  }

  submit(job, now) {
    job.started = false;
    job.arrivedAt = now;
    this.waiting.push(job);
    this.active++;
    if (!this.stepping) this.step(now);
  }

  /**
   * First scheduling of a job: radix match (ids[:-1]), lock, evict for room, reserve its KV. False
   * (nothing taken) when its KV does not fit beside the locked cache and the started requests'
   * reservations; throws for a request that does not fit an empty worker (it would wait forever).
   */
  start(job) {
    const { req, r } = job;
    const ids = req.tokens;
    const match = this.cache.matchPrefix(ids.slice(0, ids.length - 1));
    this.cache.incLockRef(match.node);
    const need = ids.length - match.length + req.output.length;
    if (need > this.capacityTokens - this.cache.protectedTokens - this.reserved) {
      this.cache.decLockRef(match.node);
      if (this.reserved === 0) throw new RangeError(`request of ${ids.length}+${req.output.length} tokens exceeds the worker's KV capacity ${this.capacityTokens}`);
      return false;
    }
    const free = this.capacityTokens - this.cache.totalTokens - this.reserved;
    if (need > free) this.cache.evict(need - free);
    this.reserved += need;
    Object.assign(r, { cached: match.length, node: match.node, reservedNeed: need });
    job.done = match.length;
    job.started = true;
    return true;
  }

  prefillBatchMs(parts) {
    let n = 0;
    let weighted = 0;
    for (const p of parts) {
      n += p.n;
      weighted += p.n * p.cached;
    }
    return prefillChunkMs(this.table, n, weighted / n) * this.scale;
  }

  step(now) {
    this.stepping = true;
    const parts = [];
    let encoder = 0;
    if (this.waiting.length > 0) {
      let budget = this.chunk;
      for (const job of this.waiting) {
        if (budget <= 0) break;
        if (!job.started) {
          if (!this.start(job)) break; // FCFS: the head waits for room
          encoder += encoderMs(this.timing, job.req.media ?? [], job.done);
        }
        const n = Math.min(budget, job.req.tokens.length - job.done);
        parts.push({ job, n, cached: job.done });
        budget -= n;
      }
    }
    // Nothing fits: the running batch decodes and frees KV as it finishes.
    if (parts.length > 0) {
      const end = now + this.prefillBatchMs(parts) + encoder;
      this.schedule(end, (t) => {
        for (const p of parts) {
          p.job.done += p.n;
          if (p.job.done < p.job.req.tokens.length) continue;
          this.waiting.splice(this.waiting.indexOf(p.job), 1);
          this.prefilled(p.job, t);
        }
        this.step(t);
      });
      return;
    }
    if (this.running.length > 0) {
      let kv = 0;
      for (const job of this.running) kv += job.context;
      const end = now + decodeStepMs(this.timing, this.running.length, kv);
      const batch = this.running.slice();
      this.schedule(end, (t) => {
        for (const job of batch) {
          job.context++;
          if (--job.left <= 0) this.finish(job, t);
        }
        this.step(t);
      });
      return;
    }
    this.stepping = false;
  }

  /** Prefill done: first token sampled; the prompt's pages enter the cache (cache_unfinished_req). */
  prefilled(job, now) {
    const { req, r } = job;
    r.ttft = now - job.arrivedAt;
    const { node } = this.cache.insert(req.tokens);
    this.cache.incLockRef(node);
    this.cache.decLockRef(r.node);
    r.node = node;
    const moved = req.tokens.length - (req.tokens.length % this.pageSize) - r.cached;
    const m = Math.min(r.reservedNeed, Math.max(0, moved));
    this.reserved -= m;
    r.reservedNeed -= m;
    job.onPrefilled(now);
    job.left = req.output.length - 1;
    job.context = req.tokens.length + 1;
    if (job.left <= 0) this.finish(job, now);
    else this.running.push(job);
  }

  finish(job, now) {
    const i = this.running.indexOf(job);
    if (i >= 0) this.running.splice(i, 1);
    finished(this, job.r, job.req);
    job.r.finishAt = now;
    job.onFinished(now);
  }
}

/** Longest cached prefix (whole pages) without touching LRU state or splitting nodes. */
export function peekPrefix(cache, tokens, page) {
  const n = tokens.length - 1 - ((tokens.length - 1) % page); // the engine matches ids[:-1]
  let node = cache.rootNode;
  let pos = 0;
  outer: while (pos < n) {
    for (const child of node.children.values()) {
      const k = child.key;
      if (k[0] !== tokens[pos]) continue;
      let i = 0;
      const max = Math.min(k.length, n - pos);
      while (i < max && k[i] === tokens[pos + i]) i++;
      i -= i % page;
      if (i === 0) continue;
      pos += i;
      if (i < k.length) break outer;
      node = child;
      continue outer;
    }
    break;
  }
  return pos;
}
