/**
 * `npm run deploy*` is this script: it checks the target environment, then runs `wrangler deploy`
 * with the same arguments. A deployment is closed unless the operator says otherwise.
 * It refuses (exit 1) when the target environment would serve `/v1` without API keys: the
 * KVEDGE_API_KEYS secret is not set there (`wrangler secret list`) and the environment's vars do
 * not set KVEDGE_ACCESS = "public". The Worker enforces the same rule at run time (src/edge/auth.ts),
 * so a deploy that bypasses this script still serves nobody without keys. Likewise it refuses when
 * no worker could be called: neither KVEDGE_WORKER_KEY_SECRET nor KVEDGE_WORKER_KEYS is set and the
 * vars do not set KVEDGE_WORKER_AUTH = "none" (the Worker calls no worker it holds no key for).
 *
 *   node scripts/deploy-guard.ts [--check] [wrangler deploy arguments, e.g. --env production]
 *
 * One script and one argument list: a guard that ran before `wrangler deploy` in an npm script got
 * none of the arguments npm appends (`npm run deploy -- --env production` checked the top-level
 * environment and deployed production). `--check` checks without deploying.
 */
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { unstable_readConfig } from "wrangler";

const ROOT = join(import.meta.dirname, "..");

export interface DeployCheck {
  ok: boolean;
  message: string;
}

/** The rule, pure: `secretNames` null = the secret list could not be read. */
export function checkDeployAccess(env: string | null, vars: Record<string, unknown>, secretNames: readonly string[] | null): DeployCheck {
  const where = env ? ` --env ${env}` : "";
  if (vars.KVEDGE_ACCESS === "public")
    return { ok: true, message: `KVEDGE_ACCESS = "public": /v1 will serve clients without API keys (rate limits still apply).` };
  if (secretNames === null)
    return {
      ok: false,
      message: `Refusing to deploy: cannot confirm that KVEDGE_API_KEYS is set (wrangler secret list${where} failed). Without it the API refuses every client. Set it with \`wrangler secret put KVEDGE_API_KEYS${where}\`, or set KVEDGE_ACCESS = "public" in wrangler.toml to serve an open API on purpose.`,
    };
  if (!secretNames.includes("KVEDGE_API_KEYS"))
    return {
      ok: false,
      message: `Refusing to deploy: KVEDGE_API_KEYS is not set${env ? ` for ${env}` : ""}, so the API would refuse every client. Set it with \`wrangler secret put KVEDGE_API_KEYS${where}\`, or set KVEDGE_ACCESS = "public" in wrangler.toml to serve an open API on purpose.`,
    };
  return { ok: true, message: "KVEDGE_API_KEYS is set: /v1 requires an API key." };
}

/** Workers are called only with their SGLang --api-key (src/edge/worker-auth.ts): without a source of keys, none would be. */
export function checkDeployWorkerAuth(env: string | null, vars: Record<string, unknown>, secretNames: readonly string[] | null): DeployCheck {
  const where = env ? ` --env ${env}` : "";
  if (vars.KVEDGE_WORKER_AUTH === "none") return { ok: true, message: `KVEDGE_WORKER_AUTH = "none": workers are called without a key (a network of your own).` };
  const fix = `Set one with \`wrangler secret put KVEDGE_WORKER_KEY_SECRET${where}\` (docs/security.md), or set KVEDGE_WORKER_AUTH = "none" in wrangler.toml for workers on a network of your own.`;
  if (secretNames === null) return { ok: false, message: `Refusing to deploy: cannot confirm that KVEDGE_WORKER_KEY_SECRET or KVEDGE_WORKER_KEYS is set (wrangler secret list${where} failed). ${fix}` };
  if (!secretNames.includes("KVEDGE_WORKER_KEY_SECRET") && !secretNames.includes("KVEDGE_WORKER_KEYS"))
    return { ok: false, message: `Refusing to deploy: neither KVEDGE_WORKER_KEY_SECRET nor KVEDGE_WORKER_KEYS is set${env ? ` for ${env}` : ""}, so no worker would be called (each needs its SGLang --api-key). ${fix}` };
  return { ok: true, message: "worker keys are set: each worker is called with its own --api-key." };
}

function secretNamesOf(env: string | null): string[] | null {
  const args = [join(ROOT, "node_modules/wrangler/bin/wrangler.js"), "secret", "list", "--format", "json"];
  if (env) args.push("--env", env);
  const r = spawnSync(process.execPath, args, { cwd: ROOT, encoding: "utf8", timeout: 60_000, env: { ...process.env, WRANGLER_SEND_METRICS: "false", NO_COLOR: "1" } });
  if (r.status !== 0) return null;
  try {
    const list = JSON.parse(r.stdout) as { name?: unknown }[];
    return list.map((s) => String(s.name));
  } catch {
    return null;
  }
}

/** The environment `wrangler deploy` would target with these arguments (`--env X`, `--env=X`, `-e X`); null = top level. */
export function targetEnvOf(args: readonly string[]): string | null {
  let env: string | null = null;
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    if (a === "--env" || a === "-e") env = args[++i] ?? null;
    else if (a.startsWith("--env=")) env = a.slice(6);
    else if (a.startsWith("-e=")) env = a.slice(3);
  }
  return env === "" ? null : env;
}

if (import.meta.main) {
  const args = process.argv.slice(2);
  const checkOnly = args.includes("--check");
  const wranglerArgs = args.filter((a) => a !== "--check");
  const env = targetEnvOf(wranglerArgs);
  const config = unstable_readConfig({ config: join(ROOT, "wrangler.toml"), ...(env ? { env } : {}) });
  const vars = config.vars as Record<string, unknown>;
  const secrets = vars.KVEDGE_ACCESS === "public" && vars.KVEDGE_WORKER_AUTH === "none" ? [] : secretNamesOf(env);
  const checks = [checkDeployAccess(env, vars, vars.KVEDGE_ACCESS === "public" ? [] : secrets), checkDeployWorkerAuth(env, vars, secrets)];
  for (const check of checks) console[check.ok ? "log" : "error"](`deploy guard: ${check.message}`);
  if (checks.some((c) => !c.ok)) process.exit(1);
  if (checkOnly) process.exit(0);
  const r = spawnSync(process.execPath, [join(ROOT, "node_modules/wrangler/bin/wrangler.js"), "deploy", ...wranglerArgs], { cwd: ROOT, stdio: "inherit" });
  process.exit(r.status ?? 1);
}
