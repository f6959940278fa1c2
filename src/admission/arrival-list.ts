/**
 * A doubly linked list in arrival order: O(1) append, removal by node, oldest and newest. The
 * admission queue keeps each waiting request in two of them (its band's, and its band and tenant's),
 * so a pick and an eviction read list ends instead of scanning the queue.
 */
export interface ArrivalNode<T> {
  readonly value: T;
  prev: ArrivalNode<T> | null;
  next: ArrivalNode<T> | null;
}

export class ArrivalList<T> {
  #head: ArrivalNode<T> | null = null;
  #tail: ArrivalNode<T> | null = null;
  #size = 0;

  get size(): number {
    return this.#size;
  }

  /** The oldest node. */
  get first(): ArrivalNode<T> | null {
    return this.#head;
  }

  /** The newest node. */
  get last(): ArrivalNode<T> | null {
    return this.#tail;
  }

  push(value: T): ArrivalNode<T> {
    const node: ArrivalNode<T> = { value, prev: this.#tail, next: null };
    if (this.#tail) this.#tail.next = node;
    else this.#head = node;
    this.#tail = node;
    this.#size++;
    return node;
  }

  /** Unlinks a node of this list. */
  remove(node: ArrivalNode<T>): void {
    if (node.prev) node.prev.next = node.next;
    else this.#head = node.next;
    if (node.next) node.next.prev = node.prev;
    else this.#tail = node.prev;
    node.prev = node.next = null;
    this.#size--;
  }
}
