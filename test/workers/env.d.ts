/// <reference types="@cloudflare/vitest-pool-workers/types" />
declare namespace Cloudflare {
  interface Env {
    ROUTING_INDEX: DurableObjectNamespace<import("../../durable-objects/routing-index.ts").RoutingIndex>;
    RATE_LIMITER: DurableObjectNamespace<import("../../durable-objects/rate-limiter.ts").RateLimiter>;
    RESPONSE_STORE: DurableObjectNamespace<import("../../durable-objects/response-store.ts").ResponseStore>;
    RELAY_SECRET: string;
    ADMIN_TOKEN: string;
  }
}
