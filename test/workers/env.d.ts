/// <reference types="@cloudflare/vitest-pool-workers/types" />
declare namespace Cloudflare {
  interface Env {
    ROUTING_INDEX: DurableObjectNamespace<import("../../durable-objects/routing-index.ts").RoutingIndex>;
    RELAY_SECRET: string;
    ADMIN_TOKEN: string;
  }
}
