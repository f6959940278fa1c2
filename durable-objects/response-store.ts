/**
 * ResponseStore: one Durable Object per tenant (src/edge/responses/stored-response.ts storeNameOf)
 * holding that tenant's stored Responses in SQLite. A continuation's record names its parent, and
 * a conversation is read by walking those links; so that a chain is always whole:
 *   - storing a child extends its ancestors' expiry to its own (a chain expires together);
 *   - past the tenant's byte budget, the least recently continued records that no other record
 *     continues go first (a parent outlives its children);
 *   - deleting a record that others continue hides it (get, delete and continuing it answer as if
 *     gone) and keeps its body for them; it goes with its last child.
 * An alarm at the latest expiry clears the object, so an idle tenant leaves nothing behind.
 */
import { DurableObject } from "cloudflare:workers";
import { MAX_CONVERSATION_RECORDS } from "../src/edge/responses/stored-response.ts";

export class ResponseStore extends DurableObject {
  #ready = false;

  #init(): void {
    if (this.#ready) return;
    const sql = this.ctx.storage.sql;
    // The table of whole-conversation records that came before chained ones: its rows cannot be continued.
    sql.exec("DROP TABLE IF EXISTS responses");
    sql.exec(
      "CREATE TABLE IF NOT EXISTS records (id TEXT PRIMARY KEY, parent TEXT, depth INTEGER NOT NULL, created_ms INTEGER NOT NULL, used_ms INTEGER NOT NULL, expires_ms INTEGER NOT NULL, hidden INTEGER NOT NULL DEFAULT 0, bytes INTEGER NOT NULL, body TEXT NOT NULL)",
    );
    sql.exec("CREATE INDEX IF NOT EXISTS records_parent ON records (parent)");
    this.#ready = true;
  }

  #expire(nowMs: number): void {
    // Ancestors expire no earlier than their descendants, so no record outlives its parent.
    this.ctx.storage.sql.exec("DELETE FROM records WHERE expires_ms <= ?", nowMs);
  }

  /** Removes `id`, then each hidden ancestor left without children; the bytes freed. */
  #remove(id: string): number {
    const sql = this.ctx.storage.sql;
    let freed = 0;
    let next: string | null = id;
    while (next !== null) {
      const row: { parent: string | null; bytes: number } | undefined = sql.exec<{ parent: string | null; bytes: number }>("DELETE FROM records WHERE id = ? RETURNING parent, bytes", next).toArray()[0];
      freed += Number(row?.bytes ?? 0);
      const parent: string | null = row?.parent ?? null;
      next = parent !== null && sql.exec("SELECT 1 FROM records WHERE id = ? AND hidden = 1 AND NOT EXISTS (SELECT 1 FROM records c WHERE c.parent = ?)", parent, parent).toArray().length > 0 ? parent : null;
    }
    return freed;
  }

  /**
   * Stores `body` under `id` as a child of `parent` (null: a conversation's first record), then
   * drops the least recently continued childless records while the tenant is over `budgetBytes`.
   * False when not stored: larger than the budget, the parent gone, or the chain at its record limit.
   */
  async put(id: string, parent: string | null, body: string, nowMs: number, ttlMs: number, budgetBytes: number): Promise<boolean> {
    this.#init();
    this.#expire(nowMs);
    const bytes = new TextEncoder().encode(body).byteLength;
    if (bytes > budgetBytes) return false;
    const sql = this.ctx.storage.sql;
    let depth = 0;
    if (parent !== null) {
      const p = sql.exec<{ depth: number }>("SELECT depth FROM records WHERE id = ?", parent).toArray()[0];
      if (!p || p.depth + 1 >= MAX_CONVERSATION_RECORDS) return false;
      depth = p.depth + 1;
    }
    const expires = nowMs + ttlMs;
    sql.exec("INSERT OR REPLACE INTO records (id, parent, depth, created_ms, used_ms, expires_ms, hidden, bytes, body) VALUES (?, ?, ?, ?, ?, ?, 0, ?, ?)", id, parent, depth, nowMs, nowMs, expires, bytes, body);
    if (parent !== null)
      sql.exec(
        "WITH RECURSIVE up(id) AS (SELECT ? UNION ALL SELECT r.parent FROM records r JOIN up ON r.id = up.id WHERE r.parent IS NOT NULL) UPDATE records SET used_ms = MAX(used_ms, ?), expires_ms = MAX(expires_ms, ?) WHERE id IN (SELECT id FROM up)",
        parent,
        nowMs,
        expires,
      );
    let total = Number(sql.exec<{ total: number }>("SELECT COALESCE(SUM(bytes), 0) AS total FROM records").one().total);
    while (total > budgetBytes) {
      const victim = sql.exec<{ id: string; bytes: number }>("SELECT id, bytes FROM records r WHERE id != ? AND NOT EXISTS (SELECT 1 FROM records c WHERE c.parent = r.id) ORDER BY used_ms ASC, created_ms ASC LIMIT 1", id).toArray()[0];
      if (!victim) break;
      total -= this.#remove(victim.id);
    }
    const current = await this.ctx.storage.getAlarm();
    if (current === null || current < expires) await this.ctx.storage.setAlarm(expires);
    return true;
  }

  async get(id: string, nowMs: number): Promise<string | null> {
    this.#init();
    const row = this.ctx.storage.sql.exec<{ body: string }>("SELECT body FROM records WHERE id = ? AND hidden = 0 AND expires_ms > ?", id, nowMs).toArray()[0];
    return row?.body ?? null;
  }

  /** The bodies of `id`'s conversation, root first; null when `id` is not stored (or a link is missing); "too_large" past `maxBytes`. */
  async chain(id: string, nowMs: number, maxBytes: number): Promise<string[] | null | "too_large"> {
    this.#init();
    const sql = this.ctx.storage.sql;
    const head = sql.exec<{ depth: number }>("SELECT depth FROM records WHERE id = ? AND hidden = 0 AND expires_ms > ?", id, nowMs).toArray()[0];
    if (!head) return null;
    const links = sql
      .exec<{ id: string; depth: number; bytes: number }>(
        "WITH RECURSIVE up(id, depth) AS (SELECT id, depth FROM records WHERE id = ? UNION ALL SELECT r.id, r.depth FROM records r JOIN records c ON r.id = c.parent JOIN up ON c.id = up.id) SELECT records.id AS id, records.depth AS depth, records.bytes AS bytes FROM up JOIN records ON records.id = up.id ORDER BY records.depth ASC",
        id,
      )
      .toArray();
    // Depths run 0, 1, … up to the head's when every link is there.
    if (links.length !== head.depth + 1 || links.some((l, i) => l.depth !== i)) return null;
    if (links.reduce((n, l) => n + Number(l.bytes), 0) > maxBytes) return "too_large";
    return links.map((l) => sql.exec<{ body: string }>("SELECT body FROM records WHERE id = ?", l.id).one().body);
  }

  /** Deletes a visible record (hidden while others continue it); false when there is none. */
  async delete(id: string): Promise<boolean> {
    this.#init();
    const sql = this.ctx.storage.sql;
    const row = sql.exec<{ children: number }>("SELECT (SELECT COUNT(*) FROM records c WHERE c.parent = r.id) AS children FROM records r WHERE id = ? AND hidden = 0", id).toArray()[0];
    if (!row) return false;
    if (Number(row.children) > 0) sql.exec("UPDATE records SET hidden = 1 WHERE id = ?", id);
    else this.#remove(id);
    return true;
  }

  /** The latest expiry has passed: every record is gone. */
  override async alarm(): Promise<void> {
    await this.ctx.storage.deleteAll();
    this.#ready = false;
  }
}
