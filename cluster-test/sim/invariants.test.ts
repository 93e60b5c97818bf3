import t from 'tap';
import { Invariants, type LogLookup } from './invariants.js';
import { logIndex, term, type Entry } from './raft.js';
import { SimViolation, type ViolationKind } from './violation.js';

const e = (index: number, t: number, byte = index): Entry => ({ index: logIndex(index), term: term(t), data: new Uint8Array([0x10, byte]) });
/** A whole log from index 1. */
const logOf = (entries: readonly Entry[]): LogLookup => ({ first: 1, lastIndex: entries.length, termAt: (i) => entries[i - 1]?.term });
const meta = (index: number, t: number) => ({ index: logIndex(index), term: term(t), config: { members: [] } });

/** The kind of violation `fn` throws, or 'none'. */
function violationOf(fn: () => void): ViolationKind | 'none' {
  try {
    fn();
    return 'none';
  } catch (err) {
    if (err instanceof SimViolation) return err.kind;
    throw err;
  }
}

t.test('election safety: a second leader in a term is caught', async (t) => {
  const inv = new Invariants();
  t.equal(inv.observeRole('n1', 'leader', 3), true, 'first sighting');
  t.equal(inv.observeRole('n1', 'leader', 3), false, 'same leader again is fine');
  inv.observeRole('n2', 'candidate', 3);
  inv.observeRole('n2', 'leader', 4);
  t.equal(violationOf(() => inv.observeRole('n3', 'leader', 3)), 'election-safety', 'n3 leads term 3 too');
});

t.test('log matching: same (index, term) must mean same payload and same predecessor', async (t) => {
  const inv = new Invariants();
  inv.observeAppend('n1', [e(1, 1), e(2, 1), e(3, 2)], 0);
  inv.observeAppend('n2', [e(2, 1), e(3, 2)], 1);
  t.equal(violationOf(() => inv.observeAppend('n3', [e(3, 2, 99)], 1)), 'log-matching', 'different payload');
  t.equal(violationOf(() => inv.observeAppend('n4', [e(3, 2)], 2)), 'log-matching', 'different predecessor term');
  t.equal(violationOf(() => inv.observeAppend('n5', [e(4, 1)], 2)), 'log-matching', 'term goes down along a log');
});

t.test('state machine safety: one entry and one FSM result per index', async (t) => {
  const inv = new Invariants();
  inv.observeApply('n1', e(1, 1), 'R1', 1);
  inv.observeApply('n2', e(1, 1), 'R1', 2);
  t.equal(violationOf(() => inv.observeApply('n3', e(1, 2), 'R1', 2)), 'state-machine-safety', 'a different entry at index 1');
  t.equal(violationOf(() => inv.observeApply('n3', e(1, 1), 'R9', 2)), 'state-machine-safety', 'a different result at index 1');
  inv.observeRestore('n4', meta(1, 1));
  t.equal(violationOf(() => inv.observeRestore('n4', meta(1, 3))), 'state-machine-safety', 'a snapshot with another term');
  t.equal(violationOf(() => inv.observeRestore('n4', meta(7, 3))), 'state-machine-safety', 'a snapshot no node ever reached');
});

t.test('state machine safety: one whole FSM state per index, however it was reached', async (t) => {
  const inv = new Invariants();
  inv.observeState('n1', 10, 'S10', 'snapshot');
  inv.observeState('n2', 10, 'S10', 'restore');
  inv.observeState('n3', 10, 'S10', 'final');
  inv.observeState('n3', 12, 'S12', 'final');
  t.equal(violationOf(() => inv.observeState('n4', 10, 'S10x', 'recover')), 'state-machine-safety', 'a recovered snapshot with another state');
  t.equal(violationOf(() => inv.observeState('n1', 12, 'S12x', 'final')), 'state-machine-safety', 'two final states differ at one index');
});

t.test('leader completeness: a new leader must hold entries committed in earlier terms', async (t) => {
  const inv = new Invariants();
  inv.observeApply('n1', e(1, 1), 'a', 2);
  inv.observeApply('n1', e(2, 2), 'b', 2);
  const full = logOf([e(1, 1), e(2, 2), e(3, 3)]);
  inv.checkLeaderCompleteness('n2', 3, full);
  t.pass('a leader with every committed entry passes');
  const lacking = logOf([e(1, 1), e(2, 3)]);
  t.equal(violationOf(() => inv.checkLeaderCompleteness('n3', 4, lacking)), 'leader-completeness', 'entry 2/2 is missing');
  // An entry first seen committed by a node in term 5 may legitimately be missing from a
  // stale leader of term 5 (it may have been committed in term 5 itself).
  inv.observeApply('n1', e(3, 5), 'c', 5);
  const stale = logOf([e(1, 1), e(2, 2)]);
  inv.checkLeaderCompleteness('n4', 5, stale);
  t.pass('not flagged when the commit may be from the same term');
});

t.test('exactly once: one command at two log positions is caught', async (t) => {
  const inv = new Invariants();
  inv.observeCommand('n1', 'c1.1', 5);
  inv.observeCommand('n2', 'c1.1', 5);
  t.equal(violationOf(() => inv.observeCommand('n3', 'c1.1', 9)), 'state-machine-safety');
});
