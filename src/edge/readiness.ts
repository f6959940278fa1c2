/**
 * Readiness (`GET /readyz`): 200 once every configured pool's index holds a worker a first request
 * can be routed to (up, synced with its relay, not quarantined), 503 before. `/healthz` is liveness
 * only (the Worker answers; no Durable Object is asked): launchers wait on it before any worker can
 * register, so it says nothing about whether a chat request would find a worker.
 *
 * The body names no model or worker (the route is public even where the API is closed): the
 * operator's view of the pool is `/admin/workers`.
 */
import type { WorkerView } from "../metrics/pool-snapshot.ts";

export type ReadinessRow = Pick<WorkerView, "status" | "synced" | "quarantined">;

/** A first request to this pool would find a worker. */
export function poolReady(workers: readonly ReadinessRow[]): boolean {
  return workers.some((w) => w.status === "up" && w.synced && !w.quarantined);
}

/** `workersOf(model)`: the pool object's worker rows. Pools are asked in parallel (one call each). */
export async function readinessResponse(models: readonly string[], workersOf: (model: string) => Promise<readonly ReadinessRow[]>): Promise<Response> {
  const ready = await Promise.all(models.map(async (m) => poolReady(await workersOf(m))));
  const waiting = ready.filter((r) => !r).length;
  const body = waiting === 0 ? { status: "ready" } : { status: "not_ready", poolsWithoutWorkers: waiting, pools: models.length };
  return new Response(JSON.stringify(body), { status: waiting === 0 ? 200 : 503, headers: { "content-type": "application/json", "cache-control": "no-store" } });
}
