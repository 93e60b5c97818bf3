/**
 * Simulated clients. Each client process has at most one outstanding operation (read, write or
 * compare-and-swap of a register on a small key set; registers are resources in the real
 * store, see resources.ts) against a node it picks, and records every invoke and completion in
 * a Jepsen-style history for the linearizability checker:
 *
 * - write: an unconditional write (a ResourcePut, whose type hooks run at apply) proposed on
 *   the chosen node (`Replica.propose`); CAS_FAILED for it is a violation (it never fails
 *   for contention).
 *   NOT_LEADER, PROPOSAL_DROPPED or UNAVAILABLE -> `fail` (the command was never appended, or
 *   never committed). Otherwise `ok` when the replica answers with the apply result, or
 *   `info` on a timeout (outcome unknown; the recorder moves that client to a fresh process
 *   number, as Jepsen does). Every answer is checked: the client's own command must be
 *   committed, durable on a quorum (`answer-before-commit`).
 * - read: `Replica.readIndex` on the chosen node (followers too); once it resolves (the node
 *   has applied the read index), read the local store -> `ok`. A read failure or a timeout ->
 *   `fail` (reads have no effect).
 * - cas(expected, new): a value CAS built on the store's version CAS, as an API client would.
 *   First a linearizable read on the chosen node gives (value, version); a value other than
 *   `expected` -> `fail` (no effect; the operation linearizes at that read). Otherwise a
 *   ResourceWrite with expectedVersion = version: applied -> `ok` (the version, hence the
 *   value, was unchanged when it applied), CAS_FAILED -> `fail`, a timeout -> `info`. The
 *   history holds one operation from the start of the read to the end of the write.
 * - txn(a, b): a two-register transaction (envelope `Txn`, resources.ts `encodePairTxn`): if `a`
 *   is present (or, drawn at random, absent) at apply, write one fresh value to both `a` and
 *   `b` in one entry; else nothing. Recorded as two writes of that value invoked and completed
 *   together, one per key (the second under its own process number, `PAIR_PROCESS_OFFSET` +
 *   worker, since a process has one operation at a time): `ok` when the branch applied, `fail`
 *   when the comparison did not hold (no effect), `info` on a timeout. Each key's history is
 *   checked for linearizability as any write's, so a transaction that changed one key and not
 *   the other, or changed anything while answering "not applied", is a violation.
 */
import { HistoryRecorder, type OpHandle } from '../checker/history.js';
import { isCairnError, type SeededRandom } from './raft.js';
import type { ApplyResult } from './raft.js';
import type { SimNode } from './node.js';
import { SIM_EPOCH_MS } from './node.js';
import type { EventLog } from './event-log.js';
import { encodePairTxn, encodeRegisterWrite, pairTxnVerdict, writeVerdict, type RegisterState, type Stamp } from './resources.js';
import type { Scheduler } from './scheduler.js';
import { SimViolation } from './violation.js';

export interface ClientOptions {
  /** Number of client processes issuing operations concurrently. */
  readonly clients: number;
  readonly keys: readonly string[];
  /** Pause between one operation's completion and the client's next invoke, in ms. */
  readonly thinkMinMs: number;
  readonly thinkMaxMs: number;
  /** A write without an answer after this long ends `info`; a read ends `fail`. */
  readonly timeoutMs: number;
  /** Probability that an operation is a read; of the rest, `casRatio` are CAS. */
  readonly readRatio: number;
  readonly casRatio: number;
  /** Of the writes that are not CAS, the probability that one is a two-register transaction. */
  readonly txnRatio: number;
  /** Probability that a client sends to the leader it last heard of rather than a random node. */
  readonly followLeaderProbability: number;
  /** The data quota stamped into every write (`--quota-bytes`); absent: none (the default). */
  readonly quotaBytes?: number;
}

export interface ClientHost {
  readonly scheduler: Scheduler;
  readonly log: EventLog;
  /** Every node, up or down. */
  nodes(): readonly SimNode[];
  /** A write was answered as applied on `node`: its command must be committed (throws otherwise). */
  checkAnswered(opId: string, node: SimNode): void;
  /** An exception in a client's callback, reported to the run. */
  violation(e: unknown): void;
}

export type Outcome = 'ok' | 'fail' | 'info';

interface PendingOp {
  readonly opId: string;
  readonly worker: number;
  readonly node: SimNode;
  readonly kind: 'read' | 'write' | 'cas' | 'txn';
  readonly key: string;
  readonly handle: OpHandle;
  /** A transaction's second register and its history handle (recorded as a write of `value`). */
  readonly pair?: { readonly key: string; readonly handle: OpHandle<'write'> };
  readonly value: string;
  readonly expected: string | null;
  /** `read` until a CAS's read is served (reads stay there); `propose` once its command is proposed. */
  phase: 'read' | 'propose';
  /** Bumped whenever a timeout is armed, so an earlier phase's timer does nothing. */
  timer: number;
  done: boolean;
  readonly onDone: (outcome: Outcome, value: string | null, why: string) => void;
}

export interface ClientStats {
  ops: number;
  ok: number;
  info: number;
  fail: number;
  /** CAS outcomes: took effect; refused at the read (value mismatch); refused at apply (version moved). */
  casOk: number;
  casMismatch: number;
  casConflict: number;
  /** Writes the state machine refused with NO_SPACE (only with a quota). */
  noSpace: number;
  /** Pair transactions whose branch applied (both registers), and whose comparison did not hold. */
  txnApplied: number;
  txnNotApplied: number;
}

/** A transaction's second register is recorded under this process number plus the worker's. */
export const PAIR_PROCESS_OFFSET = 1_000_000;

export class Clients {
  readonly history = new HistoryRecorder();
  readonly stats: ClientStats = { ops: 0, ok: 0, info: 0, fail: 0, casOk: 0, casMismatch: 0, casConflict: 0, noSpace: 0, txnApplied: 0, txnNotApplied: 0 };
  private readonly pending = new Map<string, PendingOp>();
  private readonly seqOf = new Map<number, number>();
  /** Values recently seen per key (for plausible CAS expectations). */
  private readonly seen = new Map<string, string | null>();
  private issuing = false;
  private outstandingCount = 0;
  /** Per client: the node it believes is leader (from NOT_LEADER hints), as real clients do. */
  private readonly leaderHint = new Map<number, SimNode>();

  constructor(
    private readonly options: ClientOptions,
    private readonly random: SeededRandom,
    private readonly host: ClientHost,
  ) {}

  /** Operations invoked and not yet completed. */
  get outstanding(): number {
    return this.outstandingCount;
  }

  /** Starts every client's loop. */
  start(): void {
    this.issuing = true;
    for (let c = 0; c < this.options.clients; c++) {
      const worker = c;
      this.host.scheduler.after(this.random.range(0, this.options.thinkMaxMs), () => this.issueRandom(worker));
    }
  }

  /** Clients stop issuing new operations; outstanding ones still complete or time out. */
  stop(): void {
    this.issuing = false;
  }

  private nextOpId(worker: number): { opId: string; n: number } {
    const n = (this.seqOf.get(worker) ?? 0) + 1;
    this.seqOf.set(worker, n);
    return { opId: `c${worker}.${n}`, n };
  }

  private issueRandom(worker: number): void {
    if (!this.issuing) return;
    const o = this.options;
    const key = this.random.pick(o.keys);
    // Mostly the node this client believes is leader; sometimes any node (reads on followers,
    // writes that will be refused), as in a real deployment with a load balancer in front.
    const hint = this.leaderHint.get(worker);
    const node = hint !== undefined && this.random.chance(o.followLeaderProbability) ? hint : this.random.pick(this.host.nodes());
    const again = (): void => {
      if (this.issuing) this.host.scheduler.after(this.random.range(o.thinkMinMs, o.thinkMaxMs), () => this.issueRandom(worker));
    };
    const r = this.random.next();
    if (r < o.readRatio) this.read(worker, node, key, again);
    else if (this.random.chance(o.casRatio)) {
      const known = this.seen.get(key);
      const expected = known === undefined || this.random.chance(0.2) ? null : known;
      this.cas(worker, node, key, expected, again);
    } else if (o.txnRatio > 0 && o.keys.length > 1 && this.random.chance(o.txnRatio)) {
      const others = o.keys.filter((k) => k !== key);
      this.txn(worker, node, key, this.random.pick(others), this.random.chance(0.5) ? 'exists' : 'absent', again);
    } else this.write(worker, node, key, again);
  }

  /**
   * Invokes a pair transaction on `node`: if `key` is `when` at apply, write one fresh value to
   * `key` and `other`; `done` is called once with the outcome.
   */
  txn(worker: number, node: SimNode, key: string, other: string, when: 'exists' | 'absent', done: (outcome: Outcome, value: string | null, why: string) => void): void {
    const { opId, n } = this.nextOpId(worker);
    const value = `${worker}-${n}`;
    const now = this.host.scheduler.now();
    const handle = this.history.invoke(worker, 'write', key, value, now);
    const pairHandle = this.history.invoke(PAIR_PROCESS_OFFSET + worker, 'write', other, value, now);
    const op = this.newOp({ opId, worker, node, kind: 'txn', key, handle, value, expected: null, phase: 'propose', onDone: done, pair: { key: other, handle: pairHandle } });
    this.begin(op, `txn if ${key} ${when} then ${key},${other}=${value}`);
    const hex = (): string => this.random.nextUint32().toString(16).padStart(8, '0');
    const data = encodePairTxn(opId, key, other, when, value, this.stamp(), [`${hex()}-${hex()}-t0`, `${hex()}-${hex()}-t1`]);
    this.host.log.add('cli', `${opId} propose txn on ${node.id}`);
    node.propose(data).then(
      (result) => this.guarded(() => this.onProposed(op, result)),
      (e: unknown) => this.guarded(() => this.onRefused(op, e)),
    );
    this.armTimeout(op);
  }

  /** Invokes an unconditional write of a fresh unique value on `node`; `done` is called once with the outcome. */
  write(worker: number, node: SimNode, key: string, done: (outcome: Outcome, value: string | null, why: string) => void): void {
    const { opId, n } = this.nextOpId(worker);
    const value = `${worker}-${n}`;
    const handle = this.history.invoke(worker, 'write', key, value, this.host.scheduler.now());
    const op = this.newOp({ opId, worker, node, kind: 'write', key, handle, value, expected: null, phase: 'propose', onDone: done });
    this.begin(op, `write ${key}=${value}`);
    this.propose(op, undefined);
  }

  /**
   * Invokes a value CAS (`expected` -> a fresh unique value) on `node`: a linearizable read,
   * then a version-CAS write; `done` is called once with the outcome.
   */
  cas(worker: number, node: SimNode, key: string, expected: string | null, done: (outcome: Outcome, value: string | null) => void): void {
    const { opId, n } = this.nextOpId(worker);
    const value = `${worker}-${n}`;
    const handle = this.history.invoke(worker, 'cas', key, [expected, value], this.host.scheduler.now());
    const op = this.newOp({ opId, worker, node, kind: 'cas', key, handle, value, expected, phase: 'read', onDone: done });
    this.begin(op, `cas ${key} ${expected ?? 'nil'}->${value}`);
    this.startRead(op);
  }

  private newOp(o: Omit<PendingOp, 'timer' | 'done'>): PendingOp {
    return { ...o, timer: 0, done: false };
  }

  /**
   * What a proposer stamps on a command: the simulated time as an ISO timestamp, and a uid and
   * generation drawn from the seeded random (the API layer draws them from crypto randomness).
   */
  private stamp(): Stamp {
    const hex = (): string => this.random.nextUint32().toString(16).padStart(8, '0');
    return {
      time: new Date(SIM_EPOCH_MS + this.host.scheduler.now()).toISOString(),
      uid: `${hex()}-${hex()}-${hex()}-${hex()}`,
      generation: `${hex()}${hex()}`,
      ...(this.options.quotaBytes !== undefined ? { quotaBytes: this.options.quotaBytes } : {}),
    };
  }

  /** Proposes `op`'s write (a version CAS when `expectedVersion` is set) on its node. */
  private propose(op: PendingOp, expectedVersion: number | undefined): void {
    const { opId, node, key, value } = op;
    op.phase = 'propose';
    const data = encodeRegisterWrite({ requestId: opId, key, value, ...(expectedVersion !== undefined ? { expectedVersion } : {}) }, this.stamp());
    this.host.log.add('cli', `${opId} propose on ${node.id}${expectedVersion !== undefined ? ` if version ${expectedVersion}` : ''}`);
    node.propose(data).then(
      (result) => this.guarded(() => this.onProposed(op, result)),
      (e: unknown) => this.guarded(() => this.onRefused(op, e)),
    );
    this.armTimeout(op);
  }

  /** Runs a promise callback; an exception in it (a violation) goes to the run, not into the void. */
  private guarded(fn: () => void): void {
    try {
      fn();
    } catch (e) {
      this.host.violation(e);
    }
  }

  /** The replica answered `op`'s write with its apply result. */
  private onProposed(op: PendingOp, result: ApplyResult): void {
    if (op.done || op.phase !== 'propose') return;
    this.host.checkAnswered(op.opId, op.node);
    if (op.kind === 'txn') {
      const v = pairTxnVerdict(op.opId, result, this.options.quotaBytes !== undefined);
      if (v === 'applied') {
        this.stats.txnApplied++;
        this.finish(op, 'ok', 'applied to both registers');
      } else if (v === 'not-applied') {
        this.stats.txnNotApplied++;
        this.finish(op, 'fail', 'the comparison did not hold: nothing applied');
      } else {
        this.stats.noSpace++;
        this.finish(op, 'fail', 'NO_SPACE: the data quota is reached');
      }
      return;
    }
    const verdict = writeVerdict(op.opId, result, this.options.quotaBytes !== undefined);
    if (verdict === 'ok') {
      this.finish(op, 'ok', 'applied');
      return;
    }
    if (verdict === 'no-space') {
      // Refused at apply on every replica alike: certainly not applied.
      this.stats.noSpace++;
      this.finish(op, 'fail', 'NO_SPACE: the data quota is reached');
      return;
    }
    if (op.kind !== 'cas') throw new SimViolation('exception', `unconditional write ${op.opId} was refused with CAS_FAILED`);
    this.stats.casConflict++;
    this.finish(op, 'fail', 'CAS_FAILED: the version moved since the read');
  }

  /** The replica refused `op`'s write (or a read): not applied, or outcome unknown on TIMEOUT. */
  private onRefused(op: PendingOp, e: unknown): void {
    if (op.done) return;
    if (isCairnError(e, 'NOT_LEADER') || isCairnError(e, 'PROPOSAL_DROPPED') || isCairnError(e, 'UNAVAILABLE')) {
      const hinted = isCairnError(e, 'NOT_LEADER') ? e.details['leader'] : undefined;
      const leader = typeof hinted === 'string' ? this.host.nodes().find((n) => n.id === hinted) : undefined;
      if (leader !== undefined) this.leaderHint.set(op.worker, leader);
      else this.leaderHint.delete(op.worker);
      const why = op.phase === 'read' ? `read failed: ${e.code}` : e.code;
      this.finish(op, 'fail', `${why}${leader !== undefined ? ` (leader ${leader.id})` : ''}`);
      return;
    }
    if (isCairnError(e, 'TIMEOUT')) {
      this.finish(op, op.phase === 'read' ? 'fail' : 'info', `timeout: ${e.message}`);
      return;
    }
    throw e;
  }

  /** Invokes a linearizable read on `node`; `done` is called once with the outcome. */
  read(worker: number, node: SimNode, key: string, done: (outcome: Outcome, value: string | null) => void): void {
    const { opId } = this.nextOpId(worker);
    const handle = this.history.invoke(worker, 'read', key, null, this.host.scheduler.now());
    const op = this.newOp({ opId, worker, node, kind: 'read', key, handle, value: '', expected: null, phase: 'read', onDone: done });
    this.begin(op, `read ${key}`);
    this.startRead(op);
  }

  /** A read, or a CAS's read: a linearizable read on the op's node. */
  private startRead(op: PendingOp): void {
    op.node.read(op.key).then(
      (state) => this.guarded(() => this.onRead(op, state)),
      (e: unknown) => this.guarded(() => this.onRefused(op, e)),
    );
    this.armTimeout(op);
  }

  private begin(op: PendingOp, what: string): void {
    this.pending.set(op.opId, op);
    this.outstandingCount++;
    this.stats.ops++;
    this.host.log.add('cli', `${op.opId} p${op.handle.process} invoke ${what} on ${op.node.id}`);
  }

  /** A timeout for the op's current phase: a read (or a CAS still reading) ends `fail`, a proposed write `info`. */
  private armTimeout(op: PendingOp): void {
    const timer = ++op.timer;
    this.host.scheduler.after(this.options.timeoutMs, () => {
      if (!op.done && op.timer === timer) this.finish(op, op.phase === 'read' ? 'fail' : 'info', 'timeout');
    });
  }

  private finish(op: PendingOp, outcome: Outcome, why: string, readValue: string | null = null): void {
    if (op.done) return;
    op.done = true;
    if (outcome === 'ok') this.leaderHint.set(op.worker, op.node);
    else if (why.startsWith('timeout') || why.startsWith('read failed')) this.leaderHint.delete(op.worker);
    this.pending.delete(op.opId);
    this.outstandingCount--;
    this.stats[outcome]++;
    const now = this.host.scheduler.now();
    switch (op.kind) {
      case 'read':
        this.history.complete(op.handle as OpHandle<'read'>, outcome, readValue, now);
        if (outcome === 'ok') this.seen.set(op.key, readValue);
        break;
      case 'write':
        this.history.complete(op.handle as OpHandle<'write'>, outcome, op.value, now);
        if (outcome === 'ok') this.seen.set(op.key, op.value);
        break;
      case 'txn':
        this.history.complete(op.handle as OpHandle<'write'>, outcome, op.value, now);
        if (op.pair !== undefined) this.history.complete(op.pair.handle, outcome, op.value, now);
        if (outcome === 'ok') {
          this.seen.set(op.key, op.value);
          if (op.pair !== undefined) this.seen.set(op.pair.key, op.value);
        }
        break;
      case 'cas':
        this.history.complete(op.handle as OpHandle<'cas'>, outcome, [op.expected, op.value], now);
        if (outcome === 'ok') {
          this.seen.set(op.key, op.value);
          this.stats.casOk++;
        }
        break;
    }
    const shown = op.kind === 'read' && outcome === 'ok' ? ` ${op.key}=${readValue ?? 'nil'}` : '';
    this.host.log.add('cli', `${op.opId} p${op.handle.process} ${outcome}${shown} (${why})`);
    op.onDone(outcome, op.kind === 'read' ? readValue : op.value, why);
  }

  /** A linearizable read on the op's node completed with `state`. */
  private onRead(op: PendingOp, state: RegisterState): void {
    if (op.done || op.phase !== 'read') return;
    if (op.kind === 'read') {
      this.finish(op, 'ok', 'read index applied', state.value);
      return;
    }
    // A CAS's read. It was linearizable, so what it saw is a good expectation for later CASes.
    this.seen.set(op.key, state.value);
    if (state.value !== op.expected) {
      this.stats.casMismatch++;
      this.finish(op, 'fail', `cas mismatch at read: ${op.key}=${state.value ?? 'nil'} version ${state.version}`);
      return;
    }
    this.host.log.add('cli', `${op.opId} read ${op.key}=${state.value ?? 'nil'} version ${state.version} on ${op.node.id}`);
    // Proposed as the client's next step, on the scheduler.
    op.phase = 'propose';
    this.host.scheduler.after(0, () => {
      if (!op.done) this.propose(op, state.version);
    });
  }
}
