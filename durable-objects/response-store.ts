/**
 * ResponseStore: one Durable Object per tenant (src/edge/responses/stored-response.ts storeNameOf)
 * holding that tenant's stored Responses in SQLite. Each record expires after its TTL; past the
 * tenant's byte budget the oldest go first; an alarm at the latest expiry clears the object, so an
 * idle tenant leaves nothing behind.
 */
import { DurableObject } from "cloudflare:workers";

export class ResponseStore extends DurableObject {
  #ready = false;

  #init(): void {
    if (this.#ready) return;
    this.ctx.storage.sql.exec("CREATE TABLE IF NOT EXISTS responses (id TEXT PRIMARY KEY, created_ms INTEGER NOT NULL, expires_ms INTEGER NOT NULL, bytes INTEGER NOT NULL, body TEXT NOT NULL)");
    this.#ready = true;
  }

  #expire(nowMs: number): void {
    this.ctx.storage.sql.exec("DELETE FROM responses WHERE expires_ms <= ?", nowMs);
  }

  /** Stores `body` under `id`, then drops the oldest records while the tenant is over `budgetBytes`. */
  async put(id: string, body: string, nowMs: number, ttlMs: number, budgetBytes: number): Promise<boolean> {
    this.#init();
    this.#expire(nowMs);
    const bytes = new TextEncoder().encode(body).byteLength;
    if (bytes > budgetBytes) return false;
    const sql = this.ctx.storage.sql;
    sql.exec("INSERT OR REPLACE INTO responses (id, created_ms, expires_ms, bytes, body) VALUES (?, ?, ?, ?, ?)", id, nowMs, nowMs + ttlMs, bytes, body);
    let total = Number(sql.exec<{ total: number }>("SELECT COALESCE(SUM(bytes), 0) AS total FROM responses").one().total);
    while (total > budgetBytes) {
      const oldest = sql.exec<{ id: string; bytes: number }>("SELECT id, bytes FROM responses WHERE id != ? ORDER BY created_ms ASC LIMIT 1", id).toArray()[0];
      if (!oldest) break;
      sql.exec("DELETE FROM responses WHERE id = ?", oldest.id);
      total -= Number(oldest.bytes);
    }
    const current = await this.ctx.storage.getAlarm();
    if (current === null || current < nowMs + ttlMs) await this.ctx.storage.setAlarm(nowMs + ttlMs);
    return true;
  }

  async get(id: string, nowMs: number): Promise<string | null> {
    this.#init();
    const row = this.ctx.storage.sql.exec<{ body: string }>("SELECT body FROM responses WHERE id = ? AND expires_ms > ?", id, nowMs).toArray()[0];
    return row?.body ?? null;
  }

  async delete(id: string): Promise<boolean> {
    this.#init();
    const removed = this.ctx.storage.sql.exec<{ id: string }>("DELETE FROM responses WHERE id = ? RETURNING id", id).toArray();
    return removed.length > 0;
  }

  /** The latest expiry has passed: every record is gone. */
  override async alarm(): Promise<void> {
    await this.ctx.storage.deleteAll();
    this.#ready = false;
  }
}
