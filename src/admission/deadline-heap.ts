/**
 * A binary min-heap of waiting requests by deadline (ties: arrival), with removal of any member in
 * O(log n): each member records its position. The admission queue reads its earliest deadline for
 * its one timer and takes the expired requests from the top.
 */
export interface DeadlineMember {
  readonly deadline: number;
  /** Arrival order: breaks deadline ties. */
  readonly seq: number;
  /** Position in the heap; -1 while outside it. */
  heapAt: number;
}

export class DeadlineHeap<M extends DeadlineMember> {
  readonly #a: M[] = [];

  get size(): number {
    return this.#a.length;
  }

  peek(): M | undefined {
    return this.#a[0];
  }

  push(m: M): void {
    m.heapAt = this.#a.length;
    this.#a.push(m);
    this.#up(m.heapAt);
  }

  remove(m: M): void {
    const i = m.heapAt;
    if (i < 0 || this.#a[i] !== m) return;
    const last = this.#a.pop()!;
    m.heapAt = -1;
    if (last === m) return;
    this.#a[i] = last;
    last.heapAt = i;
    this.#down(i);
    this.#up(last.heapAt);
  }

  #before(x: M, y: M): boolean {
    return x.deadline < y.deadline || (x.deadline === y.deadline && x.seq < y.seq);
  }

  #swap(i: number, j: number): void {
    const a = this.#a;
    [a[i], a[j]] = [a[j]!, a[i]!];
    a[i]!.heapAt = i;
    a[j]!.heapAt = j;
  }

  #up(i: number): void {
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!this.#before(this.#a[i]!, this.#a[p]!)) return;
      this.#swap(i, p);
      i = p;
    }
  }

  #down(i: number): void {
    const a = this.#a;
    for (;;) {
      const l = 2 * i + 1;
      const r = l + 1;
      let m = i;
      if (l < a.length && this.#before(a[l]!, a[m]!)) m = l;
      if (r < a.length && this.#before(a[r]!, a[m]!)) m = r;
      if (m === i) return;
      this.#swap(i, m);
      i = m;
    }
  }
}
