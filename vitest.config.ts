import { cloudflareTest } from "@cloudflare/vitest-pool-workers";
import { availableParallelism } from "node:os";
import { defineConfig } from "vitest/config";
import { BaseSequencer, type TestSpecification } from "vitest/node";

const TEST_RATE_LIMIT = JSON.stringify({ authFailures: { requestsPerMinute: 6000, burst: 1000 } });

// End-to-end files that run alone, after the others: each asserts what load beside it would move.
// reliability-index-restart: an index's blocks restored < 1 s after a relay's welcome (the other
// faults, reliability-faults, run two at a time with the rest: their bounds are 15-30 s); admission: how many
// of a burst are served at once, queued or refused against a 1.5 s wait bound; soak: requests done
// in a fixed time and each process group's peak memory against its baseline.
const E2E_ALONE = ["test/e2e/reliability-index-restart.test.ts", "test/e2e/admission.test.ts", "test/e2e/soak.test.ts"];
const e2e = { environment: "node" as const, testTimeout: 180_000, hookTimeout: 180_000, globalSetup: ["test/e2e/helpers/edge-bundle-setup.ts"] };

// The files that take longest (20 s to 75 s alone), started first in their project: vitest orders
// files by their last durations when its cache has them, else (a fresh clone, CI) by size, which
// started the shortest file of these last and left it running alone at the end.
// reliability-input (800 requests through SELF) also starts first so that it has a runtime of its
// own: in @cloudflare/vitest-pool-workers 0.19.1 each SELF.fetch costs more the more SELF requests
// its runtime has served (healthz 4 ms -> 78 ms after 400; cloudflare/workers-sdk#15446), so
// files run after it in the same runtime took ~10x longer.
const LONGEST = ["test/workers/reliability-input.test.ts", "test/unit/bench/harness.test.ts", "test/e2e/edge-heap.test.ts", "test/e2e/launcher.test.ts", "test/e2e/reliability-faults.test.ts", "test/e2e/responses-api.test.ts", "test/e2e/media-routing-qwen3.test.ts", "test/e2e/hicache.test.ts"];

class LongestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const rank = (f: TestSpecification): number => {
      const i = LONGEST.findIndex((path) => f.moduleId.endsWith(path));
      return i < 0 ? LONGEST.length : i;
    };
    // vitest's order runs project by project: keep it, and within a project put these first.
    const sorted = await super.sort(files);
    const projectAt = new Map<unknown, number>();
    sorted.forEach((f, i) => projectAt.has(f.project) || projectAt.set(f.project, i));
    const at = new Map(sorted.map((f, i) => [f, i]));
    return [...sorted].sort((a, b) => projectAt.get(a.project)! - projectAt.get(b.project)! || rank(a) - rank(b) || at.get(a)! - at.get(b)!);
  }
}

// Pure logic in Node, integration inside workerd (the pool reads wrangler.toml), and end-to-end
// tests that start the real local fleet (simulated SGLang + relays + the edge under Miniflare): those
// two at a time (each fleet on fresh ports), then the few that must run alone (e2e-serial).
// Each project has its own sequence.groupOrder: vitest runs projects of different maxWorkers in
// separate groups, in that order.
export default defineConfig({
  test: {
    sequence: { sequencer: LongestFirst },
    projects: [
      {
        test: {
          name: "unit",
          include: ["test/unit/**/*.test.ts"],
          environment: "node",
          testTimeout: 60_000,
          // One more file than cores (vitest's default is one fewer): many wait on processes,
          // sockets or wasm they start, and on 2 cores the default ran them one at a time.
          maxWorkers: availableParallelism() + 1,
          sequence: { groupOrder: 0 },
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
        // Files share a runtime (isolate: false): a fresh Miniflare per file cost ~5 s each
        // (~100 s of the project's 150 s). fresh-objects.ts empties every Durable Object before each
        // file (storage, alarms, WebSockets, instances); module state of the Worker's isolate (caches,
        // rate leases, counters) is NOT reset: files assert counter deltas only and use client IPs,
        // worker ids and pools of their own. Two runtimes at once: reliability-input in one, the
        // other files in the other.
        test: {
          name: "workers",
          include: ["test/workers/**/*.test.ts"],
          isolate: false,
          setupFiles: ["test/workers/fresh-objects.ts"],
          testTimeout: 60_000,
          maxWorkers: 2,
          sequence: { groupOrder: 1 },
        },
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
        // maxWorkers as in "workers": projects of one groupOrder must agree on it.
        test: { name: "workers-sharded", include: ["test/workers-sharded/**/*.test.ts"], testTimeout: 60_000, maxWorkers: 2, sequence: { groupOrder: 1 } },
      },
      {
        test: { name: "e2e", include: ["test/e2e/**/*.test.ts"], exclude: E2E_ALONE, ...e2e, maxWorkers: 2, sequence: { groupOrder: 2 } },
      },
      {
        test: { name: "e2e-serial", include: E2E_ALONE, ...e2e, fileParallelism: false, sequence: { groupOrder: 3 } },
      },
    ],
  },
});
