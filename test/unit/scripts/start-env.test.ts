/** `npm start`'s environment (scripts/start-env.ts): a bad number stops the start naming its variable. */
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { parseStartEnv } from "../../../scripts/start-env.ts";

const ROOT = join(import.meta.dirname, "../../..");

describe("npm start environment", () => {
  it("defaults, and whole numbers in range", () => {
    expect(parseStartEnv({})).toEqual({ ok: true, env: { PORT: 8787, KVEDGE_WORKERS: 2, KVEDGE_DP_SIZE: 1, KVEDGE_FLEET: "unified" } });
    expect(parseStartEnv({ PORT: "9000", KVEDGE_WORKERS: "4", KVEDGE_DP_SIZE: "16", KVEDGE_FLEET: "epd", KVEDGE_VERBOSE: "1" })).toEqual({
      ok: true,
      env: { PORT: 9000, KVEDGE_WORKERS: 4, KVEDGE_DP_SIZE: 16, KVEDGE_FLEET: "epd", KVEDGE_VERBOSE: "1" },
    });
  });

  it("names each bad variable (Number() made abc NaN, 1e3 a thousand, 2.5 half a worker)", () => {
    const r = parseStartEnv({ PORT: "abc", KVEDGE_WORKERS: "2.5", KVEDGE_DP_SIZE: "1e3", KVEDGE_FLEET: "disagg" });
    expect(r.ok).toBe(false);
    const errors = r.ok ? [] : r.errors;
    expect(errors).toEqual([
      'PORT must be a whole number 1…65535, not "abc"',
      'KVEDGE_WORKERS must be a whole number 1…64, not "2.5"',
      'KVEDGE_DP_SIZE must be a whole number 1…16, not "1e3"',
      "KVEDGE_FLEET must be one of unified, pd, epd",
    ]);
    expect(parseStartEnv({ PORT: "70000" })).toMatchObject({ ok: false, errors: [/PORT/] });
    expect(parseStartEnv({ KVEDGE_WORKERS: "0" })).toMatchObject({ ok: false, errors: [/KVEDGE_WORKERS/] });
    expect(parseStartEnv({ KVEDGE_VERBOSE: "yes" })).toMatchObject({ ok: false, errors: [/KVEDGE_VERBOSE/] });
    for (const v of ["0", "1", "false", "true"]) expect(parseStartEnv({ KVEDGE_VERBOSE: v })).toMatchObject({ ok: true });
  });

  it("scripts/start.ts stops before starting anything, exit 2, naming the variable", () => {
    const r = spawnSync(process.execPath, [join(ROOT, "scripts/start.ts")], { cwd: ROOT, encoding: "utf8", timeout: 60_000, env: { ...process.env, PORT: "abc" } });
    expect(r.status).toBe(2);
    expect(r.stderr).toContain('kvedge: PORT must be a whole number 1…65535, not "abc"');
    expect(r.stdout).not.toContain("starting");
  });
});
