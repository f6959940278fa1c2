import { cloudflareTest } from "@cloudflare/vitest-pool-workers";
import { defineConfig } from "vitest/config";

// Three projects: pure logic in Node, integration inside workerd (the pool reads wrangler.toml),
// and end-to-end tests that start the real local fleet (simulated SGLang + relays + wrangler dev).
export default defineConfig({
  test: {
    projects: [
      {
        test: {
          name: "unit",
          include: ["test/unit/**/*.test.ts"],
          environment: "node",
          testTimeout: 60_000,
        },
      },
      {
        plugins: [
          cloudflareTest({
            wrangler: { configPath: "./wrangler.toml" },
            // Test-only secrets (production ones come from `wrangler secret put`). The API is open in
            // these tests (KVEDGE_ACCESS=public); tests of the closed default pass their own env.
            miniflare: { bindings: { RELAY_SECRET: "test-relay-secret-0123456789", ADMIN_TOKEN: "test-admin-token-0123456789", KVEDGE_ACCESS: "public" } },
          }),
        ],
        test: { name: "workers", include: ["test/workers/**/*.test.ts"], testTimeout: 60_000 },
      },
      {
        // The same Worker with its pool split over 3 shard objects (KVEDGE_SHARDS).
        plugins: [
          cloudflareTest({
            wrangler: { configPath: "./wrangler.toml" },
            miniflare: {
              bindings: { RELAY_SECRET: "test-relay-secret-0123456789", ADMIN_TOKEN: "test-admin-token-0123456789", KVEDGE_SHARDS: "3", KVEDGE_ACCESS: "public" },
            },
          }),
        ],
        test: { name: "workers-sharded", include: ["test/workers-sharded/**/*.test.ts"], testTimeout: 60_000 },
      },
      {
        test: {
          name: "e2e",
          include: ["test/e2e/**/*.test.ts"],
          environment: "node",
          testTimeout: 180_000,
          hookTimeout: 180_000,
          fileParallelism: false,
        },
      },
    ],
  },
});
