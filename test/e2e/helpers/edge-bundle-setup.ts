/**
 * Global setup of the e2e projects: the edge Worker bundled (as `npm run deploy` ships it) and
 * configured once for the run, served by every fleet the run starts (scripts/local-edge.ts
 * EDGE_BUILD_ENV), each of which would otherwise run and load wrangler for the same bytes.
 *
 * vitest runs a project's global setup once per process and both e2e projects name this one, so the
 * build is kept per process (on globalThis: each project may load this module anew) and counted by
 * its users; a watch-mode rerun of an e2e file rebuilds it in place first, else fleets would serve the
 * Worker as it was when the watcher started. A KVEDGE_EDGE_BUILD_DIR from the shell is not trusted:
 * this process's build replaces it.
 */
import { renameSync, rmSync } from "node:fs";
import { join } from "node:path";
import type { TestProject } from "vitest/node";
import { EDGE_BUILD_ENV, shareEdgeBuild } from "../../../scripts/local-edge.ts";

const ROOT = join(import.meta.dirname, "../../..");

interface SharedBuild {
  made: Promise<string>;
  users: number;
  /** The rebuild in progress: both projects' rerun handlers fire for one rerun. */
  rebuilding: Promise<void> | undefined;
}

const SHARED = Symbol.for("kvedge.e2e.edgeBuild");
const processWide = globalThis as { [SHARED]?: SharedBuild };

/** A fresh build moved into `dir`, where fleets of earlier runs found theirs. */
async function rebuildInto(dir: string): Promise<void> {
  const fresh = await shareEdgeBuild(ROOT);
  for (const part of ["worker", "config.json"]) {
    rmSync(join(dir, part), { recursive: true, force: true });
    renameSync(join(fresh, part), join(dir, part));
  }
  rmSync(fresh, { recursive: true, force: true });
}

export default async function setup(project: TestProject): Promise<() => void> {
  let build = processWide[SHARED];
  if (!build) {
    const made = shareEdgeBuild(ROOT);
    build = processWide[SHARED] = { made, users: 0, rebuilding: undefined };
    made.then((dir) => process.once("exit", () => rmSync(dir, { recursive: true, force: true })), () => delete processWide[SHARED]);
  }
  const shared = build;
  shared.users += 1;
  const dir = await shared.made;
  process.env[EDGE_BUILD_ENV] = dir;
  project.onTestsRerun(async (specs) => {
    if (!specs.some((s) => s.project === project)) return;
    shared.rebuilding ??= rebuildInto(dir).finally(() => (shared.rebuilding = undefined));
    await shared.rebuilding;
  });
  return () => {
    if (--shared.users > 0) return;
    delete processWide[SHARED];
    delete process.env[EDGE_BUILD_ENV];
    rmSync(dir, { recursive: true, force: true });
  };
}
