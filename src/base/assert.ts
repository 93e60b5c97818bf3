/**
 * Assertions for invariants. A broken invariant is a bug, and continuing would risk serving
 * wrong data, so it throws an `AssertionError` that callers must not catch and carry on from
 * (TigerBeetle style). Conditions a caller can act on are `CairnError`s instead.
 */
export class AssertionError extends Error {
  override readonly name = 'AssertionError';
}

export function assert(condition: unknown, message: string | (() => string)): asserts condition {
  if (!condition) {
    throw new AssertionError(typeof message === 'function' ? message() : message);
  }
}

/** Exhaustiveness check: every `switch` over a union ends here. */
export function assertNever(value: never, what = 'value'): never {
  throw new AssertionError(`unexpected ${what}: ${JSON.stringify(value)}`);
}
