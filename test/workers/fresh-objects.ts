/**
 * Setup file of the `workers` project, run before each test file. The project's files share
 * workerd runtimes (isolate: false in vitest.config.ts). What is reset before each file: every
 * Durable Object (resetAllObjects: storage, alarms, hibernatable WebSockets, running instances).
 * What is NOT reset: module state of the Worker's isolate (the edge's caches, rate leases,
 * counters, tokenizer caches). So a file asserts counter deltas only (read before, compare
 * after), and uses client IPs, worker ids and pools no other file uses.
 */
import { beforeAll } from "vitest";
import { resetAllObjects } from "./reset-objects.ts";

beforeAll(resetAllObjects);
