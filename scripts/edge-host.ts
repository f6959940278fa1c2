/**
 * The local edge process: the bundled edge Worker served by workerd through Miniflare's API, with
 * nothing in front of it (no `wrangler dev` proxy Worker, whose failed body read on an abandoned
 * upload takes the whole dev server down: cloudflare/workers-sdk#15203) and no inspector unless
 * one is asked for (workerd reports aborted client streams as uncaught errors to an attached
 * inspector). Started by scripts/local-edge.ts, in its own process group with its workerd, so the
 * fleet's reaper ends both together.
 *
 * Reads its options as one JSON document on stdin (secrets among the bindings: never argv or the
 * environment). workerd's own output goes to this process's stdout and stderr as it is.
 */
import type { Readable } from "node:stream";
import { text } from "node:stream/consumers";
import { Log, LogLevel, Miniflare, type WorkerOptions } from "miniflare";
import { z } from "zod";

export const EdgeHostOptionsSchema = z.object({
  host: z.string().min(1),
  port: z.number().int().min(1).max(65_535),
  /** The V8 inspector's port (heap sampling: scripts/soak-heap.ts), 0: any free one; absent: no inspector. */
  inspectorPort: z.number().int().min(0).max(65_535).optional(),
  /** Miniflare's persistence root: wrangler dev's `<--persist-to>/v3`, so state carries over between the two. */
  persistRoot: z.string().min(1),
  /** Miniflare worker options: the bundle, the wrangler.toml config and the launcher's bindings (validated by Miniflare). */
  worker: z.record(z.string(), z.unknown()),
});
export type EdgeHostOptions = z.infer<typeof EdgeHostOptionsSchema>;

const parsed = EdgeHostOptionsSchema.safeParse(JSON.parse(await text(process.stdin)));
if (!parsed.success) {
  console.error(`edge-host: bad options on stdin: ${parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}`);
  process.exit(2);
}
const opts = parsed.data;

const mf = new Miniflare({
  host: opts.host,
  port: opts.port,
  ...(opts.inspectorPort !== undefined ? { inspectorPort: opts.inspectorPort } : {}),
  defaultPersistRoot: opts.persistRoot,
  // cf properties from Miniflare's fixed fallback (colo DFW), never fetched from Cloudflare.
  cf: false,
  logRequests: false,
  log: new Log(LogLevel.WARN),
  handleRuntimeStdio(stdout: Readable, stderr: Readable) {
    stdout.pipe(process.stdout);
    stderr.pipe(process.stderr);
  },
  // Miniflare starts workerd again after a crash (same sockets, same storage); the fleet's tests
  // count the edge's processes, and this line says why one changed.
  unsafeHandleRuntimeRestart: () => console.error("edge-host: workerd exited unexpectedly; Miniflare started it again"),
  workers: [opts.worker as WorkerOptions],
});

const stop = (): void => {
  void mf.dispose().finally(() => process.exit(0));
};
process.once("SIGTERM", stop);
process.once("SIGINT", stop);

await mf.ready;
// The inspector's port as bound (the launcher asks for any free one: scripts/local-fleet.ts).
const inspector = opts.inspectorPort !== undefined ? ` (inspector on port ${(await mf.getInspectorURL()).port})` : "";
console.log(`edge-host: serving on http://${opts.host}:${opts.port}${inspector}`);
