/**
 * The kvedge-host package as a GPU host gets it: `npm pack` (its prepack bundles the relay and the
 * media store, scripts/build-host-package.mjs), the tarball installed into an empty folder outside
 * the repository, and the installed bins run with type stripping off (only the bundled JavaScript
 * can load). The relay syncs a simulated worker with the local edge's index; the store probes a
 * video with its wasm decoder, which runs in a worker thread loaded from beside the bundle.
 * The install comes from npm's cache (--prefer-offline), so it takes seconds; each step is bounded.
 */
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../scripts/local-fleet.ts";
import { ProbeResultSchema } from "../../src/media/probe-result.ts";
import { ffmpegToFileSync } from "../helpers/wasm-media.ts";
import { chat } from "./helpers/media.ts";
import { LogTap, waitUntil, words, workerRows } from "./reliability-helpers.ts";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const FAMILY_DIR = join(ROOT, "test/fixtures/models/qwen3_vl");
const INSTALL_TIMEOUT_MS = 120_000;

// npm's own variables from a surrounding `npm test` (prefix, package, lifecycle) would point the
// install at the repository; only the cache location carries over.
const npmEnv = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("npm_") || k === "npm_config_cache"));

const tap = new LogTap();
const children: ChildProcess[] = [];
let work: string;
let installDir: string;
let fleet: Fleet | undefined;

const lastLines = (): string => tap.lines.slice(-8).map((l) => l.line).join(" | ");

/** Runs an installed bin with the Node running the tests, type stripping off. */
function runBin(name: string, args: string[], env: Record<string, string>): ChildProcess {
  const p = spawn(process.execPath, ["--no-experimental-strip-types", join(installDir, "node_modules/.bin", name), ...args], {
    cwd: installDir,
    env: { ...npmEnv, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  children.push(p);
  for (const s of [p.stdout!, p.stderr!]) {
    s.setEncoding("utf8");
    s.on("data", (chunk: string) => {
      for (const line of chunk.split("\n")) if (line.trim()) tap.sink(`[${name}] ${line}`);
    });
  }
  return p;
}

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), "kvedge-host-pkg-"));
  installDir = join(work, "gpu-host");
  mkdirSync(installDir);
  const packed = execFileSync("npm", ["pack", "--json", "--pack-destination", work], { cwd: join(ROOT, "packages/kvedge-host"), env: npmEnv, timeout: INSTALL_TIMEOUT_MS, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  const [{ filename }] = JSON.parse(packed.slice(packed.indexOf("["))) as [{ filename: string }];
  execFileSync("npm", ["install", "--prefer-offline", "--no-audit", "--no-fund", join(work, filename)], { cwd: installDir, env: npmEnv, timeout: INSTALL_TIMEOUT_MS, stdio: "ignore" });
  fleet = await startFleet({ workers: 1, relays: false, log: tap.sink });
});

afterAll(async () => {
  for (const p of children) if (p.exitCode === null) p.kill("SIGKILL");
  await fleet?.stop();
  rmSync(work, { recursive: true, force: true });
});

describe("kvedge-host installed from its tarball", () => {
  it("holds only the bundles: no TypeScript source, nothing from the repository", () => {
    const pkgDir = join(installDir, "node_modules/kvedge-host");
    const pkg = JSON.parse(readFileSync(join(pkgDir, "package.json"), "utf8")) as { bin: Record<string, string> };
    expect(Object.keys(pkg.bin).sort()).toEqual(["kvedge-relay", "kvedge-store"]);
    const files = execFileSync("find", [pkgDir, "-type", "f"], { encoding: "utf8" }).trim().split("\n").map((f) => f.slice(pkgDir.length + 1)).sort();
    expect(files).toEqual(["dist/kvedge-relay.js", "dist/kvedge-store.js", "dist/wasm-worker.js", "package.json"]);
  });

  it("kvedge-relay syncs a simulated worker with the edge's index, and its KV events reach it", async () => {
    const f = fleet!;
    const w = f.workers[0]!;
    const issued = await fetch(`${f.edgeUrl}/admin/relay-keys`, {
      method: "POST",
      headers: { authorization: `Bearer ${f.adminToken}`, "content-type": "application/json" },
      body: JSON.stringify({ model: f.model, workerId: w.id, url: w.url }),
    });
    expect(issued.status).toBe(201);
    const { credential } = (await issued.json()) as { credential: string };
    const relay = runBin(
      "kvedge-relay",
      ["--worker-url", w.url, "--index-url", new URL(f.edgeUrl).href.replace(/^http/, "ws"), "--worker-id", w.id, "--model", f.model, "--model-dir", FAMILY_DIR],
      { KVEDGE_RELAY_KEY: credential, KVEDGE_WORKER_API_KEY: w.apiKey },
    );
    const row = async () => (await workerRows(f)).find((r) => r.workerId === w.id);
    await waitUntil(async () => (await row())?.synced === true && relay.exitCode === null, 30_000, async () => `row ${JSON.stringify(await row())}; relay exit ${relay.exitCode}; ${lastLines()}`, 100);
    expect((await row())?.status).toBe("up");

    // A prompt the worker caches arrives as ZMQ KV events through the installed zeromq addon.
    const before = (await row())!.blocks;
    const r = await chat(f.edgeUrl, { model: f.model, messages: [{ role: "user", content: words(7, 300) }] });
    expect(r.status).toBe(200);
    await waitUntil(async () => (await row())!.blocks > before, 15_000, async () => `blocks still ${(await row())?.blocks}`, 50);
  });

  it("kvedge-store answers its health check and probes a video with the wasm decoder", async () => {
    const token = "host-package-test-token-0123456789";
    const store = runBin("kvedge-store", ["--host", "127.0.0.1", "--port", "0", "--decoder", "wasm", "--store-dir", join(work, "store")], { KVEDGE_DECODE_TOKEN: token });
    const ready = await new Promise<{ ready: boolean; url: string; decoder: string }>((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`kvedge-store not ready in 30 s: ${lastLines()}`)), 30_000);
      let buf = "";
      store.stdout!.on("data", (c: string) => {
        buf += c;
        const line = buf.split("\n").find((l) => l.startsWith("{"));
        if (line) {
          clearTimeout(t);
          resolve(JSON.parse(line) as { ready: boolean; url: string; decoder: string });
        }
      });
      store.once("exit", (code) => reject(new Error(`kvedge-store exited with ${code}: ${lastLines()}`)));
    });
    expect(ready).toMatchObject({ ready: true, decoder: "wasm" });
    const health = await fetch(`${ready.url}/healthz`);
    expect(health.status).toBe(200);
    expect(await health.json()).toMatchObject({ ok: true, decoder: "wasm" });

    const clip = join(work, "clip.mp4");
    ffmpegToFileSync(["-loglevel", "error", "-f", "lavfi", "-i", "testsrc=size=160x120:rate=10", "-frames:v", "12", "-pix_fmt", "yuv420p", "-c:v", "libx264", "-preset", "ultrafast"], clip);
    const probed = await fetch(`${ready.url}/v1/probe`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/octet-stream" },
      body: readFileSync(clip),
    });
    expect(probed.status).toBe(200);
    const result = ProbeResultSchema.parse(await probed.json());
    expect(result).toMatchObject({ decoder: "wasm", totalFrames: 12, width: 160, height: 120, codec: "h264" });
  });
});
