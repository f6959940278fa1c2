/**
 * Secrets for `wrangler dev` without argv: `--var NAME:VALUE` shows in `ps` to every local user, so
 * the local fleet writes its secrets to a dotenv file only this user can read (a fresh 0700
 * directory, the file 0600) and passes its path with `--env-file`. wrangler 4 loads `--env-file`
 * files instead of `.dev.vars` and binds every key in them as a secret (wrangler-dist/cli.js
 * `getVarsForDev` → `loadDotEnv`); the repository's own `.dev.vars` is never touched.
 */
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** Names whose values are secrets (everything else is configuration and may stay a `--var`). */
export function isSecretName(name: string): boolean {
  return /SECRET|TOKEN|_KEYS?$|PASSWORD/.test(name);
}

/**
 * One dotenv line. dotenv-expand runs over the parsed values (`$NAME` would be substituted), and a
 * newline would end the value: refuse both rather than hand wrangler something else than given.
 */
export function dotenvLine(name: string, value: string): string {
  if (!/^[A-Z_][A-Z0-9_]*$/.test(name)) throw new Error(`secret name ${JSON.stringify(name)} is not a dotenv name`);
  if (/[\r\n$'\\]/.test(value)) throw new Error(`secret ${name}: value must not contain newlines, '$', quotes or backslashes`);
  return `${name}='${value}'`;
}

export interface DevSecretsFile {
  /** Path for `--env-file`. */
  path: string;
  remove(): void;
}

/** Writes `secrets` to a new private file (dir 0700, file 0600, created with that mode). */
export function writeDevSecrets(secrets: Record<string, string>): DevSecretsFile {
  const dir = mkdtempSync(join(tmpdir(), "kvedge-secrets-"));
  chmodSync(dir, 0o700);
  const path = join(dir, ".dev.vars");
  const body = Object.entries(secrets).map(([k, v]) => dotenvLine(k, v)).join("\n") + "\n";
  writeFileSync(path, body, { mode: 0o600, flag: "wx" });
  return { path, remove: () => rmSync(dir, { recursive: true, force: true }) };
}
