// Types for the TypeScript importers of worker-model.mjs (its tests): the two workers' common face.
import type { PagedRadixCache } from "../../services/sglang-sim/radix-cache.ts";
import type { MediaCostItem, Timing } from "../../services/sglang-sim/timing.ts";

export interface WorkerRequest {
  tokens: number[];
  output: number[];
  media?: readonly MediaCostItem[];
}
export interface WorkerJob {
  req: WorkerRequest;
  /** Result record: the worker sets cached, ttft (ms) and finishAt. */
  r: { ttft: number; [k: string]: unknown };
  onPrefilled(now: number): void;
  onFinished(now: number): void;
}
export interface WorkerOptions {
  cache: PagedRadixCache;
  capacityTokens: number;
  timing: Timing;
  pageSize: number;
  schedule: (t: number, fn: (now: number) => void) => void;
}
export class LinearWorker {
  constructor(o: WorkerOptions);
  submit(job: WorkerJob, now: number): void;
  /** KV tokens in use by requests (SGLang's token_usage × capacity). */
  kvUsedTokens(): number;
  /** Requests not yet in a prefill batch (SGLang's waiting queue). */
  queuedRequests(): number;
}
export class CalibratedWorker {
  constructor(o: WorkerOptions);
  submit(job: WorkerJob, now: number): void;
  /** KV tokens in use by requests (SGLang's token_usage × capacity). */
  kvUsedTokens(): number;
  /** Requests not yet in a prefill batch (SGLang's waiting queue). */
  queuedRequests(): number;
}
