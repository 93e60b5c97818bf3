/**
 * Runs async operations one at a time, in call order. The stores use it so a `compact` or a
 * `close` never interleaves with an `append` (their correctness reasons about one operation
 * at a time, e.g. the in-memory last index).
 */
export class Serial {
  private tail: Promise<unknown> = Promise.resolve();

  run<T>(op: () => Promise<T>): Promise<T> {
    const result = this.tail.then(() => op());
    this.tail = result.then(
      () => undefined,
      () => undefined,
    );
    return result;
  }
}
