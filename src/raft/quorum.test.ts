/**
 * Quorum maths against deliberately naive reference code (etcd quorum/quick_test.go): the
 * commit index of a set of match indexes (Raft §5.3, §5.4.2) and the outcome of an election
 * from the votes so far (§5.2).
 */
import fc from 'fast-check';
import t from 'tap';
import type { NodeId } from '../base/index.js';
import { majority, majorityValue, voteResult, type VoteResult } from './quorum.js';

const ids = (count: number): NodeId[] => Array.from({ length: count }, (_, k) => `n${k + 1}` as NodeId);

/** Naive: the largest x among the values (or 0) such that more than half of them are >= x. */
function naiveMajorityValue(values: readonly number[]): number {
  let best = 0;
  for (const x of values) {
    const atLeast = values.filter((v) => v >= x).length;
    if (atLeast * 2 > values.length && x > best) best = x;
  }
  return best;
}

/**
 * Naive: try every way the missing votes could still go. Won if every completion has a strict
 * majority of grants, lost if none has, pending otherwise.
 */
function naiveVoteResult(voters: readonly NodeId[], votes: ReadonlyMap<NodeId, boolean>): VoteResult {
  const missing = voters.filter((v) => !votes.has(v));
  let wins = 0;
  const completions = 2 ** missing.length;
  for (let mask = 0; mask < completions; mask++) {
    let granted = 0;
    for (const v of voters) {
      const known = votes.get(v);
      const vote = known ?? ((mask >> missing.indexOf(v)) & 1) === 1;
      if (vote) granted++;
    }
    if (granted * 2 > voters.length) wins++;
  }
  if (wins === completions) return 'won';
  if (wins === 0) return 'lost';
  return 'pending';
}

t.test('§5.2 majority(n) is the smallest count that is more than half of n', async (t) => {
  for (let size = 0; size <= 100; size++) {
    let k = 0;
    while (k * 2 <= size) k++;
    if (majority(size) !== k) t.fail(`majority(${size}) = ${majority(size)}, want ${k}`);
  }
  t.same([0, 1, 2, 3, 4, 5, 6, 7].map(majority), [1, 1, 2, 2, 3, 3, 4, 4]);
});

t.test('§5.3 majorityValue (the commit index from match indexes) agrees with the naive definition', async (t) => {
  fc.assert(
    fc.property(fc.array(fc.nat(30), { maxLength: 11 }), (values) => {
      const voters = ids(values.length);
      const got = majorityValue(voters, (id) => values[voters.indexOf(id)] ?? -1);
      return got === naiveMajorityValue(values);
    }),
    { numRuns: 2000 },
  );
  t.pass('2000 random match-index sets agree');
});

t.test('§5.3 majorityValue: a majority has at least the result, and no larger value has a majority', async (t) => {
  fc.assert(
    fc.property(fc.array(fc.nat(30), { minLength: 1, maxLength: 11 }), (values) => {
      const voters = ids(values.length);
      const got = majorityValue(voters, (id) => values[voters.indexOf(id)] ?? -1);
      const atLeast = values.filter((v) => v >= got).length;
      const above = values.filter((v) => v > got).length;
      return atLeast * 2 > values.length && above * 2 <= values.length;
    }),
    { numRuns: 1000 },
  );
  t.pass('holds for 1000 random sets');
});

t.test('§5.3 majorityValue does not depend on the order of voters and never decreases when a match index grows', async (t) => {
  fc.assert(
    fc.property(
      fc.array(fc.nat(30), { minLength: 1, maxLength: 9 }),
      fc.nat(),
      fc.nat(10),
      (values, pick, grow) => {
        const voters = ids(values.length);
        const f = (vals: readonly number[]): number => majorityValue(voters, (id) => vals[voters.indexOf(id)] ?? -1);
        const base = f(values);
        const reversed = [...values].reverse();
        const k = pick % values.length;
        const grown = values.map((v, i) => (i === k ? v + grow : v));
        return f(reversed) === base && f(grown) >= base;
      },
    ),
    { numRuns: 1000 },
  );
  t.pass('holds for 1000 random sets');
});

t.test('§5.3 majorityValue edge cases', async (t) => {
  const mv = (values: number[]): number => {
    const voters = ids(values.length);
    return majorityValue(voters, (id) => values[voters.indexOf(id)] ?? -1);
  };
  t.equal(mv([]), 0, 'no voters: 0');
  t.equal(mv([7]), 7, 'one voter: its own match');
  t.equal(mv([7, 3]), 3, 'two voters: both are needed, the smaller');
  t.equal(mv([9, 5, 1]), 5, 'three: the median');
  t.equal(mv([9, 8, 2, 1]), 2, 'four (even): three are needed, the second smallest');
  t.equal(mv([5, 5, 5, 0, 0]), 5, 'five with ties');
  t.equal(mv([5, 5, 0, 0, 0]), 0, 'two of five is not a majority');
  t.equal(mv([6, 6, 6, 6, 0, 0]), 6, 'four of six is');
  t.equal(mv([6, 6, 6, 0, 0, 0]), 0, 'three of six is not (exactly half)');
});

const voteArb = fc
  .integer({ min: 0, max: 9 })
  .chain((size) =>
    fc.tuple(
      fc.constant(size),
      fc.array(fc.constantFrom<'granted' | 'rejected' | 'missing'>('granted', 'rejected', 'missing'), { minLength: size, maxLength: size }),
      fc.array(fc.boolean(), { maxLength: 3 }), // votes from non-voters (learners, removed nodes): must not count
    ),
  );

t.test('§5.2 voteResult agrees with enumerating every way the missing votes could go', async (t) => {
  fc.assert(
    fc.property(voteArb, ([size, states, strangers]) => {
      const voters = ids(size);
      const votes = new Map<NodeId, boolean>();
      states.forEach((s, k) => {
        if (s !== 'missing') votes.set(voters[k] as NodeId, s === 'granted');
      });
      strangers.forEach((g, k) => votes.set(`x${k}` as NodeId, g));
      return voteResult(voters, votes) === naiveVoteResult(voters, votes);
    }),
    { numRuns: 3000 },
  );
  t.pass('3000 random vote sets agree');
});

t.test('§5.2 voteResult edge cases', async (t) => {
  const v = (size: number, granted: number, rejected: number): VoteResult => {
    const voters = ids(size);
    const votes = new Map<NodeId, boolean>();
    voters.slice(0, granted).forEach((id) => votes.set(id, true));
    voters.slice(granted, granted + rejected).forEach((id) => votes.set(id, false));
    return voteResult(voters, votes);
  };
  t.equal(v(0, 0, 0), 'lost', 'no voters: an election can never be won');
  t.equal(v(1, 1, 0), 'won', 'one voter: its own vote wins');
  t.equal(v(1, 0, 0), 'pending');
  t.equal(v(1, 0, 1), 'lost');
  t.equal(v(2, 1, 0), 'pending', 'two voters: both are needed');
  t.equal(v(2, 1, 1), 'lost');
  t.equal(v(2, 2, 0), 'won');
  t.equal(v(4, 2, 0), 'pending', 'four voters: half is not enough');
  t.equal(v(4, 2, 2), 'lost', 'a 2-2 split is lost');
  t.equal(v(4, 3, 1), 'won');
  t.equal(v(5, 2, 2), 'pending', 'five voters: 2-2 with one to go');
  t.equal(v(5, 3, 2), 'won');
  t.equal(v(5, 2, 3), 'lost');
  const voters = ids(3);
  t.equal(voteResult(voters, new Map([['x1' as NodeId, true], ['x2' as NodeId, true], ['n1' as NodeId, true]])), 'pending', 'grants from non-voters do not count');
});

t.test('the naive references catch planted off-by-one bugs (a checker that never fails proves nothing)', async (t) => {
  // The median taken as floor((n-1)/2) in descending order: right for odd n, but for even n it
  // needs only half the voters, not a majority.
  const halfValue = (values: readonly number[]): number => [...values].sort((a, b) => b - a)[Math.floor((values.length - 1) / 2)] ?? 0;
  const commitRun = fc.check(fc.property(fc.array(fc.nat(30), { maxLength: 11 }), (values) => halfValue(values) === naiveMajorityValue(values)), { numRuns: 2000 });
  t.equal(commitRun.failed, true, `a "half is enough" commit rule is caught (counterexample ${JSON.stringify(commitRun.counterexample)})`);
  // An election won with exactly half the votes.
  const halfWins = (voters: readonly NodeId[], votes: ReadonlyMap<NodeId, boolean>): VoteResult => {
    const granted = voters.filter((v) => votes.get(v) === true).length;
    const rejected = voters.filter((v) => votes.get(v) === false).length;
    if (voters.length > 0 && granted * 2 >= voters.length) return 'won';
    if (voters.length - rejected < majority(voters.length)) return 'lost';
    return 'pending';
  };
  const voteRun = fc.check(
    fc.property(voteArb, ([size, states]) => {
      const voters = ids(size);
      const votes = new Map<NodeId, boolean>();
      states.forEach((s, k) => {
        if (s !== 'missing') votes.set(voters[k] as NodeId, s === 'granted');
      });
      return halfWins(voters, votes) === naiveVoteResult(voters, votes);
    }),
    { numRuns: 3000 },
  );
  t.equal(voteRun.failed, true, `a "half the votes wins" rule is caught (counterexample ${JSON.stringify(voteRun.counterexample)})`);
});
