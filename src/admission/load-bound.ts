/**
 * When a worker is full for admission: the KV tokens its in-flight requests hold (their prompt
 * blocks, shared prefixes once: src/load/load-tracker.ts) reach `loadFactor` × its KV capacity, the
 * hello's kvCapacityTokens (SGLang's max_total_num_tokens from /server_info). A worker with no
 * reported capacity and no configured `workerTokens` is never full.
 */
export interface LoadBoundConfig {
  loadFactor: number;
  workerTokens?: number | undefined;
}

/** The worker's bound in KV tokens; null = unbounded. */
export function loadBoundTokens(kvCapacityTokens: number | null | undefined, cfg: LoadBoundConfig): number | null {
  const capacity = kvCapacityTokens ?? cfg.workerTokens ?? null;
  return capacity === null ? null : Math.max(1, Math.floor(capacity * cfg.loadFactor));
}

export function isFull(heldTokens: number, boundTokens: number | null): boolean {
  return boundTokens !== null && heldTokens >= boundTokens;
}
