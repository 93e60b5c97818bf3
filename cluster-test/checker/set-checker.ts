/**
 * The set checker (Jepsen's `set`): clients add unique elements, then one final read returns
 * the whole set. Every acknowledged add must be present; nothing may appear that no one tried
 * to add, nor an add that definitely failed; an add whose outcome is unknown may go either way.
 */
import { CairnError, ErrorCode } from '../../src/base/index.js';
import type { OpStatus } from './history.js';

export type SetElement = string | number;

export interface SetAdd {
  readonly element: SetElement;
  /** `ok` acknowledged, `fail` definitely not added, `info` unknown (or never completed). */
  readonly status: OpStatus;
}

export interface SetCheckResult {
  /** True when nothing is lost, unexpected, present after a failed add, or read twice. */
  readonly valid: boolean;
  /** Acknowledged (`ok`) adds present in the final read. */
  readonly ok: number;
  /** Acknowledged adds missing from the final read. */
  readonly lost: readonly SetElement[];
  /** Elements in the final read that no add attempted. */
  readonly unexpected: readonly SetElement[];
  /** Elements whose add was `fail` (definitely not applied) but which are present. */
  readonly failedButPresent: readonly SetElement[];
  /** Elements the final read returned more than once. */
  readonly duplicated: readonly SetElement[];
  /** `info` adds present in the final read: allowed, reported for information. */
  readonly recovered: readonly SetElement[];
  /** `info` adds absent from the final read: allowed. */
  readonly notApplied: number;
}

/**
 * Compares the adds with the final read. Throws a `CairnError` (INVALID_ARGUMENT) if an
 * element was added twice: the checker relies on adds being unique. Lists are sorted (numbers
 * before strings) so results are stable.
 */
export function checkSet(adds: readonly SetAdd[], finalRead: readonly SetElement[]): SetCheckResult {
  const statusOf = new Map<SetElement, OpStatus>();
  for (const add of adds) {
    if (statusOf.has(add.element)) {
      throw new CairnError(ErrorCode.INVALID_ARGUMENT, `set history adds ${JSON.stringify(add.element)} more than once; adds must be unique`, { element: add.element });
    }
    statusOf.set(add.element, add.status);
  }
  const present = new Set<SetElement>();
  const duplicated = new Set<SetElement>();
  for (const e of finalRead) {
    if (present.has(e)) duplicated.add(e);
    present.add(e);
  }
  const lost: SetElement[] = [];
  const unexpected: SetElement[] = [];
  const failedButPresent: SetElement[] = [];
  const recovered: SetElement[] = [];
  let ok = 0;
  let notApplied = 0;
  for (const [element, status] of statusOf) {
    const there = present.has(element);
    if (status === 'ok') {
      if (there) ok++;
      else lost.push(element);
    } else if (status === 'fail') {
      if (there) failedButPresent.push(element);
    } else if (there) {
      recovered.push(element);
    } else {
      notApplied++;
    }
  }
  for (const e of present) if (!statusOf.has(e)) unexpected.push(e);
  return {
    valid: lost.length === 0 && unexpected.length === 0 && failedButPresent.length === 0 && duplicated.size === 0,
    ok,
    lost: lost.sort(compareElements),
    unexpected: unexpected.sort(compareElements),
    failedButPresent: failedButPresent.sort(compareElements),
    duplicated: [...duplicated].sort(compareElements),
    recovered: recovered.sort(compareElements),
    notApplied,
  };
}

function compareElements(a: SetElement, b: SetElement): number {
  if (typeof a === 'number' && typeof b === 'number') return a - b;
  if (typeof a === 'number') return -1;
  if (typeof b === 'number') return 1;
  return a < b ? -1 : a > b ? 1 : 0;
}
