import { cloudflareTest } from "@cloudflare/vitest-pool-workers";
import { defineConfig } from "vitest/config";

const TEST_RATE_LIMIT = JSON.stringify({ authFailures: { requestsPerMinute: 6000, burst: 1000 } });

// Three projects: pure logic in Node, integration inside workerd (the pool reads wrangler.toml),
// and end-to-end tests that start the real local fleet (simulated SGLang + relays + the edge under Miniflare).
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
            // these tests (KVEDGE_ACCESS=public) and failed logins have a roomy bucket (tests refuse many bad
            // tokens on purpose); tests of the closed default and of the limits pass their own env.
            miniflare: { bindings: { RELAY_SECRET: "test-relay-secret-0123456789", ADMIN_TOKEN: "test-admin-token-0123456789", KVEDGE_ACCESS: "public", KVEDGE_RATE_LIMIT: TEST_RATE_LIMIT } },
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
              bindings: { RELAY_SECRET: "test-relay-secret-0123456789", ADMIN_TOKEN: "test-admin-token-0123456789", KVEDGE_SHARDS: "3", KVEDGE_ACCESS: "public", KVEDGE_RATE_LIMIT: TEST_RATE_LIMIT },
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
