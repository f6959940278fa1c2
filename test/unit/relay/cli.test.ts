/** The relay CLI refuses to start with a clear message (exit code 2) on misconfiguration. */
import { spawn } from "node:child_process";
import { afterEach, describe, expect, it } from "vitest";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { FakeWorker, testCredential } from "./fakes.ts";

const MAIN = new URL("../../../services/relay/main.ts", import.meta.url).pathname;

function run(args: string[], env: Record<string, string>): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [MAIN, ...args], { env: { PATH: process.env["PATH"] ?? "", ...env } });
    let stderr = "";
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    child.on("close", (code) => resolve({ code, stderr }));
  });
}

const open: FakeWorker[] = [];
afterEach(async () => {
  for (const w of open.splice(0)) await w.close();
});

describe("relay CLI", () => {
  it("refuses without its relay key", async () => {
    const r = await run(["--worker-url", "http://127.0.0.1:1", "--index-url", "ws://127.0.0.1:1", "--worker-id", "w1"], {});
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/KVEDGE_RELAY_KEY is empty or unset/);
  });

  it("refuses a value that is not a relay credential (the pool secret, say) without echoing it", async () => {
    const secret = "the-pool-secret-0123456789";
    const r = await run(["--worker-url", "http://127.0.0.1:1", "--index-url", "ws://127.0.0.1:1", "--worker-id", "w1"], { KVEDGE_RELAY_KEY: secret });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/not a relay credential/);
    expect(r.stderr).not.toContain(secret);
  });

  it("reads the key from --key-file (and still refuses a worker without KV events)", async () => {
    const w = await FakeWorker.create();
    open.push(w);
    w.kvEvents = false;
    const file = join(mkdtempSync(join(tmpdir(), "relay-key-")), "key");
    writeFileSync(file, testCredential("s") + "\n", { mode: 0o600 });
    const r = await run(["--worker-url", w.url, "--index-url", "ws://127.0.0.1:1", "--worker-id", "w1", "--key-file", file], {});
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/KV events are not configured/);
    const missing = await run(["--worker-url", w.url, "--index-url", "ws://127.0.0.1:1", "--worker-id", "w1", "--key-file", file + ".nope"], {});
    expect(missing.stderr).toMatch(/relay key: cannot read/);
  });

  it("refuses to follow a DP rank the worker does not have, naming it", async () => {
    const w = await FakeWorker.create();
    open.push(w);
    const r = await run(["--worker-url", w.url, "--index-url", "ws://127.0.0.1:1", "--worker-id", "w1", "--dp-rank", "3"], { KVEDGE_RELAY_KEY: testCredential("s") });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/refusing to start: worker .*: --dp-rank 3 is outside its dp size 1/);
  });

  it("refuses a worker without KV events", async () => {
    const w = await FakeWorker.create();
    open.push(w);
    w.kvEvents = false;
    const r = await run(["--worker-url", w.url, "--index-url", "ws://127.0.0.1:1", "--worker-id", "w1"], { KVEDGE_RELAY_KEY: testCredential("s") });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/refusing to start: .*KV events are not configured/);
  });

  it("refuses --no-kv-events together with --allow-no-kv-events", async () => {
    const w = await FakeWorker.create();
    open.push(w);
    const r = await run(["--worker-url", w.url, "--index-url", "ws://127.0.0.1:1", "--worker-id", "w1", "--no-kv-events", "--allow-no-kv-events"], {
      KVEDGE_RELAY_KEY: testCredential("s"),
    });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/mutually exclusive/);
  });

  it("refuses a non-positive --prefill-tokens-per-sec", async () => {
    const w = await FakeWorker.create();
    open.push(w);
    const r = await run(["--worker-url", w.url, "--index-url", "ws://127.0.0.1:1", "--worker-id", "w1", "--prefill-tokens-per-sec", "0"], {
      KVEDGE_RELAY_KEY: testCredential("s"),
    });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--prefill-tokens-per-sec must be a positive number/);
  });

  it("refuses a block size mismatch", async () => {
    const w = await FakeWorker.create();
    open.push(w);
    const r = await run(["--worker-url", w.url, "--index-url", "ws://127.0.0.1:1", "--worker-id", "w1", "--block-size", "64"], {
      KVEDGE_RELAY_KEY: testCredential("s"),
    });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/block size 4 but --block-size 64/);
  });

  it("logs its start (with how the worker streams) and periodic stats under its own worker field", async () => {
    const w = await FakeWorker.create();
    open.push(w);
    w.incrementalStreaming = true;
    const child = spawn(process.execPath, [MAIN, "--worker-url", w.url, "--index-url", "ws://127.0.0.1:1", "--worker-id", "w7", "--stats-interval-ms", "100"], {
      env: { PATH: process.env["PATH"] ?? "", KVEDGE_RELAY_KEY: testCredential("s") },
    });
    const lines: Record<string, unknown>[] = [];
    let buf = "";
    const stats = new Promise<Record<string, unknown>>((resolve) => {
      child.stderr.on("data", (d: Buffer) => {
        buf += d.toString();
        for (let i = buf.indexOf("\n"); i !== -1; i = buf.indexOf("\n")) {
          const line = JSON.parse(buf.slice(0, i)) as Record<string, unknown>;
          buf = buf.slice(i + 1);
          lines.push(line);
          if (line["msg"] === "stats") resolve(line);
        }
      });
    });
    try {
      // The stats line's worker state is `workerState`: `worker` stays the relay's worker id on every line.
      expect(await stats).toMatchObject({ worker: "w7", workerState: "up", msg: "stats" });
      expect(lines.find((l) => l["msg"] === "relay_start")).toMatchObject({ worker: "w7", streaming: "incremental" });
    } finally {
      child.kill("SIGTERM");
    }
  });
});
