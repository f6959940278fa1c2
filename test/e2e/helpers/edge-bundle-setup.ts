/**
 * Global setup of the e2e projects: the edge Worker bundled (as `npm run deploy` ships it) and
 * configured once for the run, served by every fleet the run starts (scripts/local-edge.ts
 * EDGE_BUILD_ENV), each of which would otherwise run and load wrangler for the same bytes. Both e2e
 * projects name this setup: the first to run makes the build, which goes when the run ends.
 */
import { rmSync } from "node:fs";
import { join } from "node:path";
import { EDGE_BUILD_ENV, shareEdgeBuild } from "../../../scripts/local-edge.ts";

export default async function setup(): Promise<() => void> {
  if (process.env[EDGE_BUILD_ENV]) return () => {};
  const dir = await shareEdgeBuild(join(import.meta.dirname, "../../.."));
  process.env[EDGE_BUILD_ENV] = dir;
  return () => {
    delete process.env[EDGE_BUILD_ENV];
    rmSync(dir, { recursive: true, force: true });
  };
}
