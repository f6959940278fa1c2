/**
 * `kvedge explain --tokens` against the real local fleet (the edge under Miniflare + a simulated Qwen3-VL worker
 * and its relay, contract derived from the fixture model directory) prints, for whole-request golden
 * cases, exactly the ids upstream code builds (test/fixtures/whole-request: transformers'
 * apply_chat_template, tokenizer and Qwen3-VL processor, SGLang's padding), and the block hashes of
 * those ids.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../scripts/local-fleet.ts";
// @ts-expect-error -- plain .mjs CLI without type declarations
import { run as runCli } from "../../scripts/kvedge.mjs";
import { clientBody, golden, independentBlockHashes, VIDEO_URL_PREFIX } from "../fixtures/whole-request/harness.ts";

let fleet: Fleet;
let dir: string;

beforeAll(async () => {
  // The golden mm_hashes carry the cohort digest of the fixture contracts with SGLang 0.5.19; the
  // simulator reports that version (its default is "0.5.19-sim"). Videos are served from the golden
  // media directory and probed by the real decode service.
  fleet = await startFleet({
    workers: 1,
    workerArgs: [["--sglang-version", "0.5.19"]],
    mediaDir: fileURLToPath(new URL("../fixtures/whole-request/media/", import.meta.url)),
    log: process.env.KVEDGE_E2E_LOGS ? (l) => console.log(l) : undefined,
  });
  dir = mkdtempSync(join(tmpdir(), "kvedge-explain-tokens-"));
});
afterAll(async () => {
  await fleet?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

async function cli(args: string[]): Promise<{ code: number; out: string; err: string }> {
  const out: string[] = [];
  const err: string[] = [];
  const env = { KVEDGE_URL: fleet.edgeUrl, KVEDGE_ADMIN_TOKEN: fleet.adminToken };
  const code = (await runCli(args, env, { out: (s: string) => out.push(s), err: (s: string) => err.push(s) })) as number;
  return { code, out: out.join("\n"), err: err.join("\n") };
}

/** The ids line `kvedge explain --tokens` prints after `routed ids   N`. */
function idsFromText(text: string): number[] {
  const lines = text.split("\n");
  const at = lines.findIndex((l) => /^routed ids\s+\d+$/.test(l));
  expect(at, text).toBeGreaterThanOrEqual(0);
  return JSON.parse(lines[at + 1]!) as number[];
}

const CASES = [
  "qwen3_vl/text/tool-calls",
  "qwen3_vl/extra/tools-float-params",
  "qwen3_vl/text/unicode",
  "qwen3_vl/image/jpeg_exif6_1200x900",
  "qwen3_vl/images/three",
  "qwen3_vl/video/v_320x240_10f_10fps",
  "qwen3_vl/video/v_352x288_25f_12.5fps",
  "qwen3_vl/mixed/two-videos-two-turns",
];

/** The client request with its videos on the fleet's media server (the URL is not part of the ids). */
function fleetBody(c: Parameters<typeof clientBody>[0]): string {
  return clientBody(c).split(VIDEO_URL_PREFIX).join(`${fleet.mediaUrl}/`);
}

describe("kvedge explain --tokens on the local fleet", () => {
  for (const id of CASES) {
    it(`prints the golden input_ids of ${id}`, async () => {
      const c = golden.cases.find((x) => x.id === id)!;
      expect(c.model).toBe(fleet.model);
      const file = join(dir, `${id.replace(/\//g, "_")}.json`);
      writeFileSync(file, fleetBody(c));
      const text = await cli(["explain", "--tokens", file]);
      expect(text.code, text.err).toBe(0);
      expect(idsFromText(text.out)).toEqual(c.input_ids);

      const j = await cli(["explain", "--tokens", file, "--json"]);
      expect(j.code, j.err).toBe(0);
      const e = JSON.parse(j.out) as { routing: string; routed: { ids: number[]; items: { padValue: number; mmHash: string | null }[]; blockHashes: string[] } };
      expect(e.routing).toBe("exact");
      expect(e.routed.ids).toEqual(c.input_ids);
      expect(e.routed.blockHashes.map((h) => BigInt("0x" + h).toString())).toEqual(await independentBlockHashes(c.input_ids!, 16));
      const items = c.items ?? [];
      expect(e.routed.items.map((i) => i.mmHash).sort()).toEqual(items.map((i) => i.mmHash).sort());
    }, 60_000);
  }

  it("refuses an unknown tokens view", async () => {
    const r = await fetch(`${fleet.edgeUrl}/admin/explain?tokens=some`, {
      method: "POST",
      headers: { authorization: `Bearer ${fleet.adminToken}`, "content-type": "application/json" },
      body: clientBody(golden.cases[0]!),
    });
    expect(r.status).toBe(400);
  });
});
