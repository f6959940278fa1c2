/**
 * Shared HiCache storage views (src/routing-index/storage-views.ts) are bounded by the backends in
 * use, not by the identities ever named: a relay that names one backend after another (its hello's
 * `hicacheStorage` is its own word) must not hold every group slot, and with it the object's
 * memory (each group up to storageCapacityBlocks entries), nor keep an honest backend untracked.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { SharedStorageViews, MAX_STORAGE_GROUPS } from "../../../src/routing-index/storage-views.ts";
import { localBlockHashes } from "../../../src/blocks/block-hash.ts";
import { localHashToHex } from "../../../src/relay-wire/relay-protocol.ts";
import { initHashing } from "../../../src/util/hash.ts";
import type { SlottedWorker } from "../../../src/routing-index/worker-registry.ts";

beforeAll(() => initHashing());

const BS = 4;
const toks = Array.from({ length: 8 * BS }, (_, i) => i + 1);

describe("storage groups", () => {
  it("a group whose last member left is dropped: one relay cycling identities leaves room for an honest backend", () => {
    const locals = localBlockHashes(toks, BS);
    const blocks = locals.map((l, i) => ({ h: String(100 + i), l: localHashToHex(l) }));
    const views = new SharedStorageViews(1_000);
    for (let i = 0; i < MAX_STORAGE_GROUPS + 10; i++) {
      views.attach("rogue", `backend-${i}`);
      views.stored("rogue", null, blocks);
    }
    views.attach("honest", "honest-backend");
    expect(views.attached("honest")).toBe(true);
    // The rogue's earlier groups are gone with their blocks: only its current group credits it.
    views.attach("peer", "backend-0");
    views.stored("honest", null, blocks);
    const w = (id: string) => ({ workerId: id }) as SlottedWorker;
    expect(views.overlaps([w("honest"), w("peer"), w("rogue")], locals)).toEqual([8, 0, 8]);
  });
});

describe("storage groups across reconnects", () => {
  it("a hello naming the same backend again keeps the group's view", () => {
    const locals = localBlockHashes(toks, BS);
    const blocks = locals.map((l, i) => ({ h: String(100 + i), l: localHashToHex(l) }));
    const views = new SharedStorageViews(1_000);
    views.attach("solo", "b");
    views.stored("solo", null, blocks);
    views.attach("solo", "b");
    expect(views.overlaps([{ workerId: "solo" } as SlottedWorker], locals)).toEqual([8]);
  });
});
