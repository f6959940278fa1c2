/** Runs async tasks one at a time, in submission order (a promise chain used as a mutex). */
export class Serial {
  private tail: Promise<unknown> = Promise.resolve();

  run<T>(task: () => Promise<T> | T): Promise<T> {
    const next = this.tail.then(() => task());
    this.tail = next.catch(() => undefined);
    return next;
  }
}
