/**
 * Resetting the worker's cache on the operator's behalf (`--on-history-lost flush`): SGLang's
 * `POST /flush_cache` (python/sglang/srt/entrypoints/http_server.py, `flush_cache`) answers 200 once
 * the radix cache is reset, which publishes `AllBlocksCleared` (mem_cache/radix_cache.py `reset` →
 * `_record_all_cleared_event`), and 400 while requests are running or waiting (nothing flushed).
 */
import { workerHeaders } from "./worker-info.ts";

export async function flushWorkerCache(workerUrl: string, timeoutMs: number, apiKey?: string | null): Promise<{ ok: boolean; status: number | null; detail: string }> {
  try {
    const r = await fetch(new URL("/flush_cache", workerUrl), { method: "POST", headers: workerHeaders(apiKey), signal: AbortSignal.timeout(timeoutMs) });
    const text = (await r.text()).slice(0, 200).trim();
    return { ok: r.status === 200, status: r.status, detail: text };
  } catch (e) {
    return { ok: false, status: null, detail: e instanceof Error ? e.message : String(e) };
  }
}
