/**
 * The routing index's SQLite registry across restarts: region and prefill rate from the hello are
 * restored after eviction, and a version-1 database (before those columns) migrates in place.
 */
import { SELF, env, evictDurableObject, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { openRelay } from "./ws-helpers.ts";
import { initHashing } from "../../src/util/hash.ts";
import "../../functions/wasm-shim.ts";

const MODEL = "Qwen/Qwen3-VL-8B-Instruct";
const ADMIN = "test-admin-token-0123456789";

interface AdminWorker {
  workerId: string;
  kvEvents: boolean;
  region?: string | null;
  prefillTokensPerSec?: number | null;
  incrementalStreaming?: boolean;
  disaggregationMode?: string;
  bootstrapPort?: number | null;
}

async function adminWorkers(): Promise<AdminWorker[]> {
  const r = await SELF.fetch(`https://edge/admin/workers?model=${encodeURIComponent(MODEL)}`, { headers: { authorization: `Bearer ${ADMIN}` } });
  expect(r.status).toBe(200);
  return ((await r.json()) as { workers: AdminWorker[] }).workers;
}

describe("routing index persistence", () => {
  it("restores region, prefill rate and kvEvents=false after eviction", async () => {
    await initHashing();
    const id = "w-region";
    const ws = await openRelay((u, i) => SELF.fetch(u, i), id, {
      model: MODEL,
      hello: { kvEvents: false, region: "eu", prefillTokensPerSec: 9000, incrementalStreaming: true, disaggregationMode: "prefill", bootstrapPort: 8998 },
    });
    expect((await adminWorkers()).find((w) => w.workerId === id)).toMatchObject({ kvEvents: false, region: "eu", prefillTokensPerSec: 9000, incrementalStreaming: true });

    await evictDurableObject(env.ROUTING_INDEX.getByName(MODEL));
    // The PD role too: a prefill restored as unified would be sent requests without a decode peer.
    expect((await adminWorkers()).find((w) => w.workerId === id)).toMatchObject({ kvEvents: false, region: "eu", prefillTokensPerSec: 9000, incrementalStreaming: true, disaggregationMode: "prefill", bootstrapPort: 8998 });
    ws.close();
  });

  it("migrates a version-1 database: rows survive, new columns read as unknown", async () => {
    const stub = env.ROUTING_INDEX.getByName("migration-pool");
    await runInDurableObject(stub, (_instance, state) => {
      const sql = state.storage.sql;
      // Rebuild the database exactly as schema version 1 left it.
      sql.exec("DROP TABLE IF EXISTS workers");
      sql.exec("DROP TABLE IF EXISTS relay_nonces");
      sql.exec("DELETE FROM meta");
      sql.exec(`CREATE TABLE workers (
        worker_id TEXT PRIMARY KEY, url TEXT NOT NULL, block_size INTEGER NOT NULL, epoch INTEGER NOT NULL,
        status TEXT NOT NULL, model_name TEXT NOT NULL, contract_json TEXT, contract_digest TEXT,
        kv_events INTEGER NOT NULL, last_seen INTEGER NOT NULL)`);
      sql.exec("INSERT INTO meta (k, v) VALUES ('schema_version', '1'), ('block_size', '16')");
      sql.exec(
        "INSERT INTO workers VALUES ('old-1', 'http://127.0.0.1:9', 16, 5, 'down', 'migration-pool', NULL, NULL, 1, 1700000000000)",
      );
    });
    await evictDurableObject(stub);
    const workers = await stub.workers();
    expect(workers).toHaveLength(1);
    // A row from before version 4 reads as a worker streaming cumulative frames (SGLang's default).
    expect(workers[0]).toMatchObject({ workerId: "old-1", epoch: 5, status: "down", kvEvents: true, region: null, prefillTokensPerSec: null, incrementalStreaming: false, disaggregationMode: "null", bootstrapPort: null });
    await runInDurableObject(stub, (_instance, state) => {
      const sql = state.storage.sql;
      expect(sql.exec<{ v: string }>("SELECT v FROM meta WHERE k = 'schema_version'").one().v).toBe("5");
      sql.exec("UPDATE workers SET region = 'us', prefill_tokens_per_sec = 12000, incremental_streaming = 1 WHERE worker_id = 'old-1'");
      // The nonce table of version 2 exists too.
      expect(sql.exec("SELECT count(*) AS n FROM relay_nonces").one()).toMatchObject({ n: 0 });
    });
    await evictDurableObject(stub);
    expect((await stub.workers())[0]).toMatchObject({ region: "us", prefillTokensPerSec: 12000, incrementalStreaming: true });
  });
});
