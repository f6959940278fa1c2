import { readFileSync, statSync } from "node:fs";
import { dirname } from "node:path";
import { describe, expect, it } from "vitest";
import { dotenvLine, isSecretName, writeDevSecrets } from "../../scripts/dev-secrets.ts";

describe("local fleet secrets file (scripts/dev-secrets.ts)", () => {
  it("writes a file only its owner can read, in a directory only its owner can enter", () => {
    const f = writeDevSecrets({ RELAY_SECRET: "abc123", ADMIN_TOKEN: "t0k" });
    try {
      expect(statSync(f.path).mode & 0o777).toBe(0o600);
      expect(statSync(dirname(f.path)).mode & 0o777).toBe(0o700);
      expect(readFileSync(f.path, "utf8")).toBe("RELAY_SECRET='abc123'\nADMIN_TOKEN='t0k'\n");
    } finally {
      f.remove();
    }
  });

  it("refuses values dotenv would change (expansion, line ends, quotes)", () => {
    expect(() => dotenvLine("A_TOKEN", "x$HOME")).toThrow(/must not contain/);
    expect(() => dotenvLine("A_TOKEN", "x\ny")).toThrow(/must not contain/);
    expect(() => dotenvLine("A_TOKEN", "it's")).toThrow(/must not contain/);
    expect(() => dotenvLine("bad name", "x")).toThrow(/dotenv name/);
  });

  it("classifies the fleet's secrets as secrets and its configuration as plain vars", () => {
    for (const n of ["RELAY_SECRET", "ADMIN_TOKEN", "DECODE_TOKEN", "KVEDGE_API_KEYS", "KVEDGE_MEDIA_URL_KEY"]) expect(isSecretName(n), n).toBe(true);
    for (const n of ["KVEDGE_MODELS", "KVEDGE_ROUTING", "KVEDGE_MEDIA", "KVEDGE_DECODE_URL", "KVEDGE_SHARDS", "KVEDGE_ACCESS", "KVEDGE_RELAY_ALLOW_HTTP"]) expect(isSecretName(n), n).toBe(false);
  });
});
