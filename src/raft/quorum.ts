import type { NodeId } from '../base/index.js';

/**
 * Majority quorum maths (Raft §5.2, §5.3). Kept separate and tiny so it can be checked against
 * naive reference code by property tests.
 */
export function majority(n: number): number {
  return Math.floor(n / 2) + 1;
}

/**
 * The largest value x such that a majority of `voters` have value >= x: the commit index
 * when the values are match indexes. 0 when there are no voters.
 */
export function majorityValue(voters: readonly NodeId[], valueOf: (id: NodeId) => number): number {
  const n = voters.length;
  if (n === 0) return 0;
  const values = voters.map(valueOf).sort((a, b) => b - a);
  return values[majority(n) - 1] ?? 0;
}

export type VoteResult = 'won' | 'lost' | 'pending';

/** Election outcome from the votes received so far (true = granted). */
export function voteResult(voters: readonly NodeId[], votes: ReadonlyMap<NodeId, boolean>): VoteResult {
  const need = majority(voters.length);
  let granted = 0;
  let rejected = 0;
  for (const id of voters) {
    const v = votes.get(id);
    if (v === true) granted++;
    else if (v === false) rejected++;
  }
  if (voters.length > 0 && granted >= need) return 'won';
  if (voters.length - rejected < need) return 'lost';
  return 'pending';
}
