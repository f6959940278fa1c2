/**
 * Deployability: every wrangler environment validates and bundles (`wrangler deploy --dry-run`),
 * and the bundle stays inside the Workers size limits. The measured size is printed (recorded in
 * docs/operations.md). Needs `npm run build:assets` (the `pretest` hook) for the wasm modules.
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import { afterAll, describe, expect, it } from "vitest";
import { unstable_readConfig } from "wrangler";
import { EdgeEnvSchema } from "../../../src/config/config.ts";
import { checkDeployAccess, checkDeployWorkerAuth, targetEnvOf } from "../../../scripts/deploy-guard.ts";

const ROOT = join(import.meta.dirname, "../../..");
/** Workers limits (compressed upload): 3 MiB on the Free plan, 10 MiB on Paid. Stay under Free. */
const FREE_PLAN_GZIP_LIMIT = 3 * 1024 * 1024;
const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function dryRun(env: string | null): { outdir: string; stdout: string } {
  const outdir = mkdtempSync(join(tmpdir(), "kvedge-dry-"));
  dirs.push(outdir);
  const args = [join(ROOT, "node_modules/wrangler/bin/wrangler.js"), "deploy", "--dry-run", "--outdir", outdir];
  if (env) args.push("--env", env);
  const r = spawnSync(process.execPath, args, {
    cwd: ROOT,
    encoding: "utf8",
    env: { ...process.env, WRANGLER_SEND_METRICS: "false", NO_COLOR: "1", CLOUDFLARE_API_TOKEN: "" },
    timeout: 120_000,
  });
  expect(r.status, `${r.stdout}\n${r.stderr}`).toBe(0);
  return { outdir, stdout: r.stdout };
}

describe("deploy", () => {
  it("wrangler deploy --dry-run bundles within the Workers size limit", () => {
    const { outdir, stdout } = dryRun(null);
    const files = readdirSync(outdir).filter((f) => f.endsWith(".js") || f.endsWith(".wasm"));
    expect(files).toContain("index.js");
    let raw = 0;
    let gz = 0;
    for (const f of files) {
      const bytes = readFileSync(join(outdir, f));
      raw += bytes.length;
      gz += gzipSync(bytes, { level: 9 }).length;
    }
    console.log(`bundle: ${files.length} modules, ${(raw / 1024).toFixed(0)} KiB raw, ${(gz / 1024).toFixed(0)} KiB gzip (limit ${FREE_PLAN_GZIP_LIMIT / 1024} KiB)`);
    expect(stdout).toMatch(/Total Upload: [\d.]+ KiB \/ gzip: [\d.]+ KiB/);
    expect(stdout).toContain("env.ROUTING_INDEX (RoutingIndex)");
    expect(gz).toBeLessThan(FREE_PLAN_GZIP_LIMIT);
  });

  for (const env of ["dev", "staging", "production"]) {
    it(`environment ${env}: own Durable Object binding, valid vars${env === "production" ? ", dry-run succeeds" : ""}`, () => {
      const c = unstable_readConfig({ config: join(ROOT, "wrangler.toml"), env });
      expect(c.name).toBe(`kvedge-${env}`);
      expect(c.durable_objects.bindings).toEqual([
        { name: "ROUTING_INDEX", class_name: "RoutingIndex" },
        { name: "RATE_LIMITER", class_name: "RateLimiter" },
        { name: "RESPONSE_STORE", class_name: "ResponseStore" },
      ]);
      for (const cls of ["RoutingIndex", "RateLimiter", "ResponseStore"]) expect(c.migrations.some((m: { new_sqlite_classes?: string[] }) => m.new_sqlite_classes?.includes(cls)), cls).toBe(true);
      // Secrets must never be committed as vars.
      for (const secret of ["ADMIN_TOKEN", "RELAY_SECRET", "KVEDGE_API_KEYS", "DECODE_TOKEN", "KVEDGE_MEDIA_URL_KEY"]) expect(c.vars).not.toHaveProperty(secret);
      const parsed = EdgeEnvSchema.safeParse(c.vars);
      expect(parsed.success, JSON.stringify(parsed.error?.issues)).toBe(true);
      expect(parsed.data!.KVEDGE_MODELS!.length).toBeGreaterThan(0);
      // Bundling is identical across environments; one env-specific dry run checks the env wiring.
      if (env === "production") dryRun(env);
    });
  }

  it("production is closed: the deploy guard refuses without KVEDGE_API_KEYS unless KVEDGE_ACCESS=public", () => {
    const prod = unstable_readConfig({ config: join(ROOT, "wrangler.toml"), env: "production" });
    const vars = prod.vars as Record<string, unknown>;
    expect(vars.KVEDGE_ACCESS).toBeUndefined();
    // The committed production config: no secrets → refused; the key set → allowed.
    expect(checkDeployAccess("production", vars, []).ok).toBe(false);
    expect(checkDeployAccess("production", vars, null).ok).toBe(false);
    expect(checkDeployAccess("production", vars, ["ADMIN_TOKEN", "RELAY_SECRET"]).message).toMatch(/KVEDGE_API_KEYS is not set/);
    expect(checkDeployAccess("production", vars, ["ADMIN_TOKEN", "KVEDGE_API_KEYS"]).ok).toBe(true);
    expect(checkDeployAccess("production", { ...vars, KVEDGE_ACCESS: "public" }, []).ok).toBe(true);
    // Workers are called only with their key: a deploy without a source of worker keys would route nowhere.
    expect(checkDeployWorkerAuth("production", vars, ["KVEDGE_API_KEYS"]).message).toMatch(/neither KVEDGE_WORKER_KEY_SECRET nor KVEDGE_WORKER_KEYS is set/);
    expect(checkDeployWorkerAuth("production", vars, null).ok).toBe(false);
    expect(checkDeployWorkerAuth("production", vars, ["KVEDGE_WORKER_KEY_SECRET"]).ok).toBe(true);
    expect(checkDeployWorkerAuth("production", vars, ["KVEDGE_WORKER_KEYS"]).ok).toBe(true);
    expect(checkDeployWorkerAuth("production", { ...vars, KVEDGE_WORKER_AUTH: "none" }, []).ok).toBe(true);
    // `npm run deploy*` is the guard itself, which deploys only after its check, with the same
    // arguments: `npm run deploy -- --env production` checks production (npm appends the arguments).
    const pkg = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { scripts: Record<string, string> };
    expect(pkg.scripts["deploy"]).toBe("node scripts/deploy-guard.ts");
    expect(pkg.scripts["deploy:staging"]).toBe("node scripts/deploy-guard.ts --env staging");
    expect(pkg.scripts["deploy:production"]).toBe("node scripts/deploy-guard.ts --env production");
    expect(targetEnvOf(["--env", "production"])).toBe("production");
    expect(targetEnvOf(["--env=staging", "--dry-run"])).toBe("staging");
    expect(targetEnvOf(["-e", "production"])).toBe("production");
    expect(targetEnvOf(["--dry-run"])).toBeNull();
    // The real script, without Cloudflare credentials (the secret list cannot be read): refuses, exit 1.
    const r = spawnSync(process.execPath, [join(ROOT, "scripts/deploy-guard.ts"), "--env", "production"], {
      cwd: ROOT,
      encoding: "utf8",
      env: { ...process.env, WRANGLER_SEND_METRICS: "false", NO_COLOR: "1", CLOUDFLARE_API_TOKEN: "" },
      timeout: 120_000,
    });
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/Refusing to deploy.*KVEDGE_API_KEYS/);
  });
});
