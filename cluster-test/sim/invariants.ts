/**
 * The safety invariants of Raft (Figure 3 of the paper), checked after every step of the
 * simulation against global records kept across all nodes and all incarnations:
 *
 * - Election safety (§5.2): at most one leader per term, ever.
 * - Log matching (§5.3): every appended (index, term) maps to one payload and one predecessor
 *   term. Checking each appended entry against the record is, by induction on the index, the
 *   full Log Matching Property, at O(appended) cost per step.
 * - Leader completeness (§5.4): a leader of term T holds every entry known committed in a term
 *   before T (checked at the leader's first Ready, when the driver's view of its log is exact).
 * - State machine safety (§5.4.3): every node applies the same entry at each index and the FSM
 *   returns the same result for it; wherever the whole FSM state is serialized (a snapshot
 *   taken, a snapshot restored, the end of the run), it is byte-identical to every other
 *   node's state at that index.
 */
import type { Entry, Role, SnapshotMeta } from './raft.js';

/** A node's log as the leader-completeness check reads it. */
export interface LogLookup {
  /** The first index stored (entries before it are covered by a snapshot). */
  readonly first: number;
  readonly lastIndex: number;
  termAt(index: number): number | undefined;
}
import { hashBytes } from './hash.js';
import { SimViolation } from './violation.js';

interface AppendRecord {
  readonly data: string;
  readonly prevTerm: number;
  readonly node: string;
}

interface AppliedRecord {
  readonly term: number;
  readonly data: string;
  /** Digest of the FSM's result for this entry (the resource it wrote, or its error). */
  readonly result: string;
  readonly node: string;
}

/** Where a node's whole FSM state at an index was serialized. */
export type StateSource = 'snapshot' | 'restore' | 'recover' | 'final';

interface StateRecord {
  /** Digest of the FSM snapshot bytes (store and de-duplication window). */
  readonly digest: string;
  readonly node: string;
  readonly source: StateSource;
}

interface CommitRecord {
  readonly term: number;
  /**
   * The smallest term any node was in when it applied this index. The entry was committed in
   * a term no later than this (a node learns a commit from a leader of its term or earlier).
   */
  minTermSeen: number;
}

export class Invariants {
  private readonly leaders = new Map<number, string>();
  private readonly appended = new Map<string, AppendRecord>();
  private readonly applied = new Map<number, AppliedRecord>();
  private readonly states = new Map<number, StateRecord>();
  private readonly committed = new Map<number, CommitRecord>();
  private readonly completenessChecked = new Set<string>();
  private readonly commandIndex = new Map<string, number>();
  private maxCommitted = 0;

  /** Number of distinct (term, leader) pairs seen. */
  get leaderCount(): number {
    return this.leaders.size;
  }

  /** The highest index known committed (applied by some node). */
  get commitIndex(): number {
    return this.maxCommitted;
  }

  /** Election safety: returns true when this is a leader not seen before. */
  observeRole(node: string, role: Role, term: number): boolean {
    if (role !== 'leader') return false;
    const known = this.leaders.get(term);
    if (known === undefined) {
      this.leaders.set(term, node);
      return true;
    }
    if (known !== node) {
      throw new SimViolation('election-safety', `two leaders in term ${term}: ${known} and ${node}`);
    }
    return false;
  }

  /**
   * Log matching, for entries a node appends after the entry at `entries[0].index - 1`, whose
   * term in that node's log is `prevTerm` (undefined when compacted away, then unchecked).
   */
  observeAppend(node: string, entries: readonly Entry[], prevTerm: number | undefined): void {
    let prev = prevTerm;
    for (const e of entries) {
      const key = `${e.index}/${e.term}`;
      const data = hashBytes(e.data);
      const rec = this.appended.get(key);
      if (rec === undefined) {
        if (prev !== undefined) this.appended.set(key, { data, prevTerm: prev, node });
      } else {
        if (rec.data !== data) {
          throw new SimViolation('log-matching', `${node} appended entry ${key} with payload ${data}, but ${rec.node} has ${rec.data}`);
        }
        if (prev !== undefined && rec.prevTerm !== prev) {
          throw new SimViolation(
            'log-matching',
            `${node} appended entry ${key} after an entry of term ${prev}, but ${rec.node} has it after term ${rec.prevTerm}`,
          );
        }
      }
      if (prev !== undefined && e.term < prev) {
        throw new SimViolation('log-matching', `${node} appended entry ${key} after an entry of the higher term ${prev}`);
      }
      prev = e.term;
    }
  }

  /**
   * State machine safety for one applied entry: same entry, same FSM result (`result` is its
   * digest) on every node; `nodeTerm` is the applier's current term.
   */
  observeApply(node: string, entry: Entry, result: string, nodeTerm: number): void {
    const index = entry.index as number;
    const data = hashBytes(entry.data);
    const rec = this.applied.get(index);
    if (rec === undefined) {
      this.applied.set(index, { term: entry.term, data, result, node });
    } else if (rec.term !== entry.term || rec.data !== data) {
      throw new SimViolation(
        'state-machine-safety',
        `${node} applied ${index}/${entry.term} (${data}) but ${rec.node} applied ${index}/${rec.term} (${rec.data})`,
      );
    } else if (rec.result !== result) {
      throw new SimViolation(
        'state-machine-safety',
        `${node} applied ${index}/${entry.term} with FSM result ${result}, but ${rec.node} got ${rec.result}`,
      );
    }
    const c = this.committed.get(index);
    if (c === undefined) this.committed.set(index, { term: entry.term, minTermSeen: nodeTerm });
    else c.minTermSeen = Math.min(c.minTermSeen, nodeTerm);
    if (index > this.maxCommitted) this.maxCommitted = index;
  }

  /**
   * Exactly once: clients never resend a command, so one opId in two different log positions
   * means the core duplicated an entry.
   */
  observeCommand(node: string, opId: string, index: number): void {
    const at = this.commandIndex.get(opId);
    if (at === undefined) this.commandIndex.set(opId, index);
    else if (at !== index) {
      throw new SimViolation('state-machine-safety', `${node} applied command ${opId} at index ${index}, but it was already applied at ${at}`);
    }
  }

  /** Where the command `opId` was applied (by any node), if anywhere. */
  commandAt(opId: string): { readonly index: number; readonly term: number } | undefined {
    const index = this.commandIndex.get(opId);
    const rec = index === undefined ? undefined : this.applied.get(index);
    return index === undefined || rec === undefined ? undefined : { index, term: rec.term };
  }

  /** A snapshot restored into the FSM must be of an index some node applied, in the same term. */
  observeRestore(node: string, meta: SnapshotMeta): void {
    const index = meta.index as number;
    const rec = this.applied.get(index);
    if (rec === undefined) {
      throw new SimViolation('state-machine-safety', `${node} restored a snapshot at ${index}/${meta.term} that no node ever applied up to`);
    }
    if (rec.term !== meta.term) {
      throw new SimViolation('state-machine-safety', `${node} restored a snapshot at ${index}/${meta.term}, but ${rec.node} applied ${index}/${rec.term}`);
    }
  }

  /**
   * The whole FSM state of `node` at `index`, serialized (`digest` of its snapshot bytes): every
   * node's state at one index must be byte-identical, however it got there (applying entries,
   * restoring a snapshot, recovering one from disk).
   */
  observeState(node: string, index: number, digest: string, source: StateSource): void {
    const rec = this.states.get(index);
    if (rec === undefined) this.states.set(index, { digest, node, source });
    else if (rec.digest !== digest) {
      throw new SimViolation(
        'state-machine-safety',
        `${node} has FSM state ${digest} at index ${index} (${source}), but ${rec.node} had ${rec.digest} there (${rec.source})`,
      );
    }
  }

  /**
   * Leader completeness, once per (leader, term): `log` must be the leader's whole log. Every
   * entry committed in an earlier term and not covered by the leader's snapshot must be there.
   */
  checkLeaderCompleteness(node: string, term: number, log: LogLookup): void {
    const key = `${node}/${term}`;
    if (this.completenessChecked.has(key)) return;
    this.completenessChecked.add(key);
    const snapIndex = log.first - 1;
    for (const [index, c] of this.committed) {
      if (index <= snapIndex || c.minTermSeen >= term) continue;
      const have = log.termAt(index);
      if (have !== c.term) {
        throw new SimViolation(
          'leader-completeness',
          `${node} became leader of term ${term} without committed entry ${index}/${c.term} (its log has ${have === undefined ? 'nothing' : `term ${have}`} there, last index ${log.lastIndex})`,
        );
      }
    }
  }
}
