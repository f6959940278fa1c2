/**
 * The simulator's own media contract: what it computes for images and videos, derived exactly as a
 * relay derives the published one (same model directory reader, same deriveContract), from the
 * model directory and the simulated SGLang version. A relay beside the simulator therefore
 * publishes the contract the simulator actually follows.
 */
import { fileURLToPath } from "node:url";
import { deriveContract, type WorkerContract } from "../../src/layout/index.ts";
import { readModelDir } from "../relay/contract.ts";
import type { SimOptions } from "./options.ts";

/** test/fixtures/models/<family> of this repository. */
export function defaultModelDir(family: SimOptions["family"]): string {
  return fileURLToPath(new URL(`../../test/fixtures/models/${family}`, import.meta.url));
}

export interface SimMediaContract {
  modelDir: string;
  contract: WorkerContract;
}

/** Fails the start when the model directory cannot give a contract: the simulator could not do media. */
export async function loadSimContract(opts: Pick<SimOptions, "modelDir" | "family" | "version" | "acceptsMmHashes">): Promise<SimMediaContract> {
  const modelDir = opts.modelDir ?? defaultModelDir(opts.family);
  const files = await readModelDir(modelDir);
  const r = deriveContract(files, { version: opts.version, flags: { acceptsMmHashes: opts.acceptsMmHashes } });
  if (!r.ok) throw new Error(`model dir ${modelDir}: no media contract (${r.reason}: ${r.detail})`);
  if (r.contract.family !== opts.family) {
    throw new Error(`model dir ${modelDir} is ${r.contract.family} but the simulator family is ${opts.family}`);
  }
  return { modelDir, contract: r.contract };
}
