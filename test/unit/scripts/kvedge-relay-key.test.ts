/** `kvedge relay-key` arguments (the commands themselves run against the real edge in test/e2e/tenant-eagle.test.ts). */
import { describe, expect, it } from "vitest";
// @ts-expect-error -- plain .mjs CLI without type declarations
import * as cli from "../../../scripts/kvedge.mjs";

const { parseCli, UsageError } = cli as Record<string, any>;
const env = { KVEDGE_ADMIN_TOKEN: "t" };

describe("kvedge relay-key: arguments", () => {
  it("issue, list and revoke parse; the key id is checked", () => {
    expect(parseCli(["relay-key", "issue", "--worker", "w1", "--worker-url", "https://w1", "--out", "k"], env)).toMatchObject({
      command: "relay-key",
      sub: "issue",
      worker: "w1",
      workerUrl: "https://w1",
      out: "k",
    });
    expect(parseCli(["relay-key", "issue", "--worker", "w1", "--worker-url", "https://w1", "--dp-size", "4", "--storage-group", "rack-1"], env)).toMatchObject({ dpSize: 4, storageGroup: "rack-1" });
    expect(parseCli(["relay-key", "list", "--model", "m"], env)).toMatchObject({ sub: "list", model: "m" });
    expect(parseCli(["relay-key", "revoke", "AAAAAAAAAAAAAAAAAAAAAA"], env)).toMatchObject({ sub: "revoke", keyId: "AAAAAAAAAAAAAAAAAAAAAA" });
    // base64url ids may start with "-" (1 in 64): in the key id's place, or after "--", they are the key id.
    expect(parseCli(["relay-key", "revoke", "-AAAAAAAAAAAAAAAAAAAAA", "--model", "m"], env)).toMatchObject({ keyId: "-AAAAAAAAAAAAAAAAAAAAA", model: "m" });
    expect(parseCli(["--model", "m", "relay-key", "revoke", "--", "--AAAAAAAAAAAAAAAAAAAA"], env)).toMatchObject({ keyId: "--AAAAAAAAAAAAAAAAAAAA" });
  });

  it("refuses what cannot be right", () => {
    for (const argv of [
      ["relay-key"],
      ["relay-key", "rotate"],
      ["relay-key", "issue", "--worker", "w1"],
      ["relay-key", "issue", "--worker-url", "https://w1"],
      ["relay-key", "issue", "--worker", "w1", "--worker-url", "https://w1", "--dp-size", "0"],
      ["relay-key", "revoke"],
      ["relay-key", "revoke", "short"],
      ["relay-key", "list", "extra"],
      ["relay-key", "revoke", "AAAAAAAAAAAAAAAAAAAAAA", "extra"],
    ])
      expect(() => parseCli(argv, env), argv.join(" ")).toThrow(UsageError);
    expect(() => parseCli(["relay-key", "list"], {}), "no admin token").toThrow(UsageError);
  });
});
