/**
 * A test Worker in real workerd: `entry` bundled as wrangler bundles a Worker (esbuild, ESM, the
 * workerd conditions) and served by Miniflare with `options`. `output()` is what the runtime has
 * printed so far (stdout and stderr), where workerd reports uncaught rejections and cross-request
 * promise warnings.
 */
import { build } from "esbuild";
import { Log, LogLevel, Miniflare, type MiniflareOptions } from "miniflare";
import type { Readable } from "node:stream";

export interface BundledWorker {
  mf: Miniflare;
  output(): string;
}

export async function startBundledWorker(entry: string, options: Omit<MiniflareOptions, "modules" | "script" | "log" | "handleRuntimeStdio">): Promise<BundledWorker> {
  const out = await build({
    entryPoints: [entry],
    bundle: true,
    write: false,
    format: "esm",
    platform: "browser",
    conditions: ["workerd", "worker", "browser"],
    target: "es2022",
    external: ["cloudflare:*"],
    logLevel: "error",
  });
  let printed = "";
  const collect = (s: Readable) => s.on("data", (b: Buffer) => (printed += b.toString()));
  const mf = new Miniflare({
    ...options,
    modules: true,
    script: out.outputFiles[0]!.text,
    log: new Log(LogLevel.WARN),
    handleRuntimeStdio: (stdout: Readable, stderr: Readable) => {
      collect(stdout);
      collect(stderr);
    },
  } as MiniflareOptions);
  await mf.ready;
  return { mf, output: () => printed };
}
