/**
 * Prints each family's cohort contract digest (the fixture model directories derived with the
 * default SGLang runtime), the input the whole-request generator needs for the mm identity record.
 *   node_modules/.bin/tsx scripts/golden/contract-digests.ts > digests.json
 */
import { cohortEligibility, SGLANG_CONTRACT_KEY } from "../../src/layout/index.ts";
import { initHashing } from "../../src/util/hash.ts";
import { fixtureContract } from "../../test/fixtures/models/load.ts";

await initHashing();
const out: Record<string, string> = {};
for (const fam of ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"] as const) {
  const r = cohortEligibility([{ [SGLANG_CONTRACT_KEY]: fixtureContract(fam) }]);
  if (!r.ok) throw new Error(`${fam}: ${r.reason}`);
  out[fam] = r.digest;
}
process.stdout.write(JSON.stringify(out, null, 2) + "\n");
