/**
 * The pool's relay-key registry (src/relay-wire/relay-auth.ts), in the pool object's SQLite: which key ids
 * exist, what each is bound to (pool, worker id, worker URL), what it grants (DP ranks, storage
 * group) and whether it was revoked. No key material is stored: the edge derives keys from the pool
 * secret and these rows. Rows from before the grant columns grant one rank and no storage group.
 */
import type { RelayKeyRecord } from "../src/relay-wire/relay-auth.ts";

interface KeyRow extends Record<string, SqlStorageValue> {
  key_id: string;
  model: string;
  worker_id: string;
  url: string;
  created_at: number;
  revoked_at: number | null;
  dp_size: number;
  storage_group: string | null;
}

/** Registry rows kept per pool; issuing refuses past this (revoked rows count until removed). */
export const MAX_RELAY_KEYS = 10_000;

export class RelayKeyStore {
  readonly #sql: SqlStorage;

  constructor(sql: SqlStorage) {
    this.#sql = sql;
    sql.exec(`CREATE TABLE IF NOT EXISTS relay_keys (
      key_id TEXT PRIMARY KEY, model TEXT NOT NULL, worker_id TEXT NOT NULL, url TEXT NOT NULL,
      created_at INTEGER NOT NULL, revoked_at INTEGER)`);
    const columns = new Set(sql.exec<{ name: string }>("PRAGMA table_info(relay_keys)").toArray().map((c) => c.name));
    if (!columns.has("dp_size")) sql.exec("ALTER TABLE relay_keys ADD COLUMN dp_size INTEGER NOT NULL DEFAULT 1");
    if (!columns.has("storage_group")) sql.exec("ALTER TABLE relay_keys ADD COLUMN storage_group TEXT");
  }

  issue(rec: RelayKeyRecord): boolean {
    const n = this.#sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM relay_keys").one().n;
    if (n >= MAX_RELAY_KEYS) return false;
    this.#sql.exec(
      "INSERT INTO relay_keys (key_id, model, worker_id, url, created_at, revoked_at, dp_size, storage_group) VALUES (?, ?, ?, ?, ?, NULL, ?, ?)",
      rec.keyId,
      rec.model,
      rec.workerId,
      rec.url,
      rec.createdAt,
      rec.dpSize,
      rec.storageGroup,
    );
    return true;
  }

  get(keyId: string): RelayKeyRecord | null {
    const row = this.#sql.exec<KeyRow>("SELECT * FROM relay_keys WHERE key_id = ?", keyId).toArray()[0];
    return row ? toRecord(row) : null;
  }

  /** Marks a key revoked; the record as it now is, or null when unknown. */
  revoke(keyId: string, nowSeconds: number): RelayKeyRecord | null {
    this.#sql.exec("UPDATE relay_keys SET revoked_at = ? WHERE key_id = ? AND revoked_at IS NULL", nowSeconds, keyId);
    return this.get(keyId);
  }

  list(): RelayKeyRecord[] {
    return this.#sql.exec<KeyRow>("SELECT * FROM relay_keys ORDER BY created_at, key_id").toArray().map(toRecord);
  }
}

function toRecord(r: KeyRow): RelayKeyRecord {
  return {
    keyId: r.key_id,
    model: r.model,
    workerId: r.worker_id,
    url: r.url,
    dpSize: r.dp_size,
    storageGroup: r.storage_group ?? null,
    createdAt: r.created_at,
    revokedAt: r.revoked_at ?? null,
  };
}
