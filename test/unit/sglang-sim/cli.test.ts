import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const MAIN = fileURLToPath(new URL("../../../services/sglang-sim/main.ts", import.meta.url));

describe("sglang-sim CLI", () => {
  it("starts on ephemeral ports, reports them, serves, and exits on SIGTERM", async () => {
    const child = spawn(
      process.execPath,
      [MAIN, "--port", "0", "--kv-port", "0", "--replay-port", "0", "--page-size", "32", "--model-name", "Qwen/Qwen3-VL-8B-Instruct", "--family", "qwen3_vl", "--template", "qwen3vl-instruct", "--timing", "instant"],
      { stdio: ["ignore", "pipe", "pipe"] },
    );
    let stderr = "";
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
    try {
      const first = await new Promise<string>((resolve, reject) => {
        const rl = createInterface({ input: child.stdout });
        rl.once("line", resolve);
        child.once("exit", () => reject(new Error(`sim exited early: ${stderr}`)));
      });
      const ready = JSON.parse(first) as { ready: boolean; url: string; kvEndpoint: string; replayEndpoint: string };
      expect(ready.ready).toBe(true);
      expect(ready.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
      expect(ready.kvEndpoint).toMatch(/^tcp:\/\/127\.0\.0\.1:\d+$/);
      expect(ready.replayEndpoint).toMatch(/^tcp:\/\/127\.0\.0\.1:\d+$/);
      const info = (await (await fetch(`${ready.url}/server_info`)).json()) as { page_size: number; kv_events: { endpoint_port_base: number } };
      expect(info.page_size).toBe(32);
      expect(`tcp://127.0.0.1:${info.kv_events.endpoint_port_base}`).toBe(ready.kvEndpoint);
      const g = await fetch(`${ready.url}/generate`, { method: "POST", body: JSON.stringify({ text: "hello", sampling_params: { max_new_tokens: 2 } }) });
      expect(g.status).toBe(200);
    } finally {
      child.kill("SIGTERM");
    }
    expect(await exited).toBe(0);
  });

  it("refuses bad options with exit code 1", async () => {
    const child = spawn(process.execPath, [MAIN, "--page-size", "0"], { stdio: ["ignore", "pipe", "pipe"] });
    let stderr = "";
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    const code = await new Promise<number | null>((resolve) => child.on("exit", resolve));
    expect(code).toBe(1);
    expect(stderr).toMatch(/bad options: pageSize/);
  });
});
