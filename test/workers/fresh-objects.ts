/**
 * Setup file of the `workers` project, run before each test file. The project's files share
 * workerd runtimes (isolate: false in vitest.config.ts); this deletes every
 * Durable Object's storage and ends its running instance (`reset` of
 * @cloudflare/vitest-pool-workers 0.19.1: workerd:unsafe deleteAllDurableObjects), so each file
 * starts with the fresh objects it had when each file got its own runtime.
 */
import { reset } from "cloudflare:test";
import { beforeAll } from "vitest";

beforeAll(async () => {
  await reset();
});
