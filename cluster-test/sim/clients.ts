/**
 * Simulated clients. Each client process has at most one outstanding operation (read, write or
 * compare-and-swap on a small key set) against a node it picks at random, and records every
 * invoke and completion in a Jepsen-style history for the linearizability checker:
 *
 * - write / cas: proposed on the chosen node. NOT_LEADER or PROPOSAL_DROPPED -> `fail` (the
 *   command was never appended). Otherwise `ok` when the proposing node applies it (a CAS whose
 *   expected value did not match -> `fail`), or `info` on timeout (outcome unknown; the
 *   recorder moves that client to a fresh process number, as Jepsen does).
 * - read: readIndex on the chosen node (followers too); once its read state arrives and the node
 *   has applied that index, read the local state machine -> `ok`. A read failure or a timeout
 *   -> `fail` (reads have no effect).
 */
import { HistoryRecorder, type OpHandle } from '../checker/history.js';
import { isCairnError, type SeededRandom } from './raft.js';
import type { Replica } from './driver.js';
import type { EventLog } from './event-log.js';
import { encodeCommand, type KvResult } from './kv.js';
import type { Scheduler } from './scheduler.js';

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
  /** Probability that a client sends to the leader it last heard of rather than a random node. */
  readonly followLeaderProbability: number;
}

export interface ClientHost {
  readonly scheduler: Scheduler;
  readonly log: EventLog;
  /** Every replica, up or down. */
  nodes(): readonly Replica[];
}

export type Outcome = 'ok' | 'fail' | 'info';

interface PendingOp {
  readonly opId: string;
  readonly worker: number;
  readonly node: Replica;
  readonly kind: 'read' | 'write' | 'cas';
  readonly key: string;
  readonly handle: OpHandle;
  readonly value: string;
  readonly expected: string | null;
  done: boolean;
  readonly onDone: (outcome: Outcome, value: string | null) => void;
}

export interface ClientStats {
  ops: number;
  ok: number;
  info: number;
  fail: number;
}

export class Clients {
  readonly history = new HistoryRecorder();
  readonly stats: ClientStats = { ops: 0, ok: 0, info: 0, fail: 0 };
  private readonly pending = new Map<string, PendingOp>();
  private readonly seqOf = new Map<number, number>();
  /** Values recently seen per key (for plausible CAS expectations). */
  private readonly seen = new Map<string, string | null>();
  private issuing = false;
  private outstandingCount = 0;
  /** Per client: the node it believes is leader (from NOT_LEADER hints), as real clients do. */
  private readonly leaderHint = new Map<number, Replica>();

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
      this.write(worker, node, key, expected, again, true);
    } else this.write(worker, node, key, null, again, false);
  }

  /**
   * Invokes a write (or a CAS when `cas`) of a fresh unique value on `node`; `done` is called
   * once with the outcome.
   */
  write(worker: number, node: Replica, key: string, expected: string | null, done: (outcome: Outcome, value: string | null) => void, cas = false): void {
    const { opId, n } = this.nextOpId(worker);
    const value = `${worker}-${n}`;
    const now = this.host.scheduler.now();
    const handle = cas ? this.history.invoke(worker, 'cas', key, [expected, value], now) : this.history.invoke(worker, 'write', key, value, now);
    const op: PendingOp = { opId, worker, node, kind: cas ? 'cas' : 'write', key, handle, value, expected, done: false, onDone: done };
    this.begin(op, cas ? `cas ${key} ${expected ?? 'nil'}->${value}` : `write ${key}=${value}`);
    const data = encodeCommand(cas ? { type: 'cas', opId, key, expected, value } : { type: 'put', opId, key, value });
    try {
      const at = node.propose(opId, data);
      this.host.log.add('cli', `${opId} proposed on ${node.id} at ${at.index}/${at.term}`);
    } catch (e) {
      if (isCairnError(e, 'NOT_LEADER') || isCairnError(e, 'PROPOSAL_DROPPED') || isCairnError(e, 'UNAVAILABLE')) {
        const hinted = isCairnError(e, 'NOT_LEADER') ? e.details['leader'] : undefined;
        const leader = typeof hinted === 'string' ? this.host.nodes().find((n) => n.id === hinted) : undefined;
        if (leader !== undefined) this.leaderHint.set(worker, leader);
        else this.leaderHint.delete(worker);
        this.finish(op, 'fail', `${e.code}${leader !== undefined ? ` (leader ${leader.id})` : ''}`);
        return;
      }
      throw e;
    }
    this.armTimeout(op);
  }

  /** Invokes a linearizable read on `node`; `done` is called once with the outcome. */
  read(worker: number, node: Replica, key: string, done: (outcome: Outcome, value: string | null) => void): void {
    const { opId } = this.nextOpId(worker);
    const handle = this.history.invoke(worker, 'read', key, null, this.host.scheduler.now());
    const op: PendingOp = { opId, worker, node, kind: 'read', key, handle, value: '', expected: null, done: false, onDone: done };
    this.begin(op, `read ${key}`);
    try {
      node.readIndex(opId);
    } catch (e) {
      if (isCairnError(e, 'UNAVAILABLE')) {
        this.finish(op, 'fail', e.code);
        return;
      }
      throw e;
    }
    this.armTimeout(op);
  }

  private begin(op: PendingOp, what: string): void {
    this.pending.set(op.opId, op);
    this.outstandingCount++;
    this.stats.ops++;
    this.host.log.add('cli', `${op.opId} p${op.handle.process} invoke ${what} on ${op.node.id}`);
  }

  private armTimeout(op: PendingOp): void {
    this.host.scheduler.after(this.options.timeoutMs, () => {
      if (!op.done) this.finish(op, op.kind === 'read' ? 'fail' : 'info', 'timeout');
    });
  }

  private finish(op: PendingOp, outcome: Outcome, why: string, readValue: string | null = null): void {
    if (op.done) return;
    op.done = true;
    if (outcome === 'ok') this.leaderHint.set(op.worker, op.node);
    else if (why === 'timeout' || why.startsWith('read failed')) this.leaderHint.delete(op.worker);
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
      case 'cas':
        this.history.complete(op.handle as OpHandle<'cas'>, outcome, [op.expected, op.value], now);
        if (outcome === 'ok') this.seen.set(op.key, op.value);
        break;
    }
    const shown = op.kind === 'read' && outcome === 'ok' ? ` ${op.key}=${readValue ?? 'nil'}` : '';
    this.host.log.add('cli', `${op.opId} p${op.handle.process} ${outcome}${shown} (${why})`);
    op.onDone(outcome, op.kind === 'read' ? readValue : op.value);
  }

  /** A command was applied on `replica`: completes it if it was proposed there by a client. */
  onApplied(replica: Replica, result: KvResult): void {
    const op = this.pending.get(result.opId);
    if (op === undefined || op.node !== replica || !replica.isProposalPending(result.opId)) return;
    this.finish(op, result.ok ? 'ok' : 'fail', result.ok ? 'applied' : 'cas mismatch');
  }

  onReadServed(replica: Replica, requestId: string): void {
    const op = this.pending.get(requestId);
    if (op === undefined || op.node !== replica) return;
    this.finish(op, 'ok', 'read index applied', replica.read(op.key));
  }

  onReadFailed(replica: Replica, requestId: string, reason: string): void {
    const op = this.pending.get(requestId);
    if (op === undefined || op.node !== replica) return;
    this.finish(op, 'fail', `read failed: ${reason}`);
  }
}
