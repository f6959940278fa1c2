/**
 * In-flight cost per tenant (an API key's or client network's label): predicted uncached prefill
 * tokens plus the decode budget of each request admitted and not yet settled. The admission queue
 * lets the tenant with the least go first, so a tenant under its share of the pool goes ahead of
 * one over it. Bounded: past `maxEntries` the oldest entry is forgotten (a request never settled).
 */
interface Charge {
  tenant: string;
  cost: number;
}

export const MAX_LEDGER_ENTRIES = 20_000;

export class TenantLedger {
  readonly #charges = new Map<string, Charge>();
  readonly #usage = new Map<string, number>();
  readonly #maxEntries: number;

  constructor(maxEntries = MAX_LEDGER_ENTRIES) {
    this.#maxEntries = maxEntries;
  }

  charge(receiptId: string, tenant: string, cost: number): void {
    this.release(receiptId);
    this.#charges.set(receiptId, { tenant, cost });
    this.#usage.set(tenant, (this.#usage.get(tenant) ?? 0) + cost);
    if (this.#charges.size > this.#maxEntries) this.release(this.#charges.keys().next().value!);
  }

  release(receiptId: string): void {
    const c = this.#charges.get(receiptId);
    if (!c) return;
    this.#charges.delete(receiptId);
    const left = (this.#usage.get(c.tenant) ?? 0) - c.cost;
    if (left > 0) this.#usage.set(c.tenant, left);
    else this.#usage.delete(c.tenant);
  }

  usage(tenant: string): number {
    return this.#usage.get(tenant) ?? 0;
  }

  get tenants(): number {
    return this.#usage.size;
  }
}
