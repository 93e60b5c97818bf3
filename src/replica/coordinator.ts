import { CairnError, ErrorCode, NO_NODE, isCairnError, type LogIndex, type NodeId, type Revision } from '../base/index.js';
import { decodeCommand, encodeEnvelope, type ApplyResult, type DecodedCommand, type Fsm, type CommandType } from '../fsm/index.js';
import { memberOf, parseConfigChange, type ConfigChange } from '../raft/index.js';
import type { Resource, StoreReader } from '../store/index.js';
import type { ForwardOp, Forwarder } from './ports.js';
import type { Replica, ReplicaEvent, ReplicaStatus } from './replica.js';

export type Consistency = 'linearizable' | 'stale';

export interface ReadOutcome<T> {
  readonly value: T;
  /** The store revision the read reflects (the applied index). */
  readonly revision: Revision;
  /** How long since this node heard from the leader (0 on the leader; undefined: no leader known). */
  readonly lastLeaderContactMs: number | undefined;
}

export interface CoordinatorOptions {
  /** Hands operations to the leader when this node is a follower. Without it, followers answer NOT_LEADER. */
  readonly forwarder?: Forwarder;
  /** Default deadline for a proposal, forwarding and retries included. Default 10,000 ms. */
  readonly requestTimeoutMs?: number;
  /**
   * Between two attempts at an operation no leader accepted, the wait doubles from `initial` to
   * `max` ms; a change of role or known leader ends it early. Default 20 and 250.
   */
  readonly retryBackoffMs?: { readonly initial: number; readonly max: number };
  /** Told about each proposal's outcome (for metrics). */
  readonly onProposal?: (outcome: 'ok' | 'refused' | 'unavailable' | 'unknown') => void;
  /**
   * Told how long a step of a request took on this node, in seconds of the replica's clock
   * (for metrics: where a request's time goes, bench/README.md). `read-index`: a linearizable
   * read's confirmation (§6.4), from asking until this node has applied the read index.
   * `proposal`: a proposal handed to this node's replica as leader (a local request or one
   * forwarded here), until committed and applied. Only steps that succeeded are told.
   */
  readonly onStepTimed?: (step: 'read-index' | 'proposal', seconds: number) => void;
  /**
   * Planted bug `stale-follower-read` (test use only): linearizable reads skip the ReadIndex
   * round and answer from the local state, which may be stale on a lagging or partitioned node.
   */
  readonly plantedStaleRead?: boolean;
  /**
   * The API layer's content rules (type registry, names, tenancy, schemas, hooks, limits),
   * run on the leader for a command it did not build: a follower's forwarded envelope
   * (`proposeLocal`), after the FSM's own decoding (`decodeCommand`). Throws a typed error
   * (INVALID_ARGUMENT) to refuse it. Without it only the FSM's structural checks run.
   * May instead return a replacement body for the same command type, which is proposed in
   * place of the envelope (the api clamps a forwarded command's quota to the leader's own,
   * docs/security.md "Quotas").
   */
  readonly checkCommand?: (command: DecodedCommand, store: StoreReader) => { readonly body: unknown } | undefined;
  /**
   * The leader's answer to a lease request (keep-alive, time-to-live, list: docs/api.md
   * "Leases"), from the api's lease clock. The request is opaque here and may come from the
   * network (a follower's forward): the handler checks its shape. Without it, lease requests
   * are refused.
   */
  readonly leaseRequests?: (request: unknown, timeoutMs: number) => Promise<unknown>;
}

/** Errors after which the operation was certainly not applied, so trying again (elsewhere) is safe. */
function retryable(e: unknown): boolean {
  return isCairnError(e) && (e.code === ErrorCode.NOT_LEADER || e.code === ErrorCode.PROPOSAL_DROPPED || e.code === ErrorCode.UNAVAILABLE);
}

/**
 * The facade the API layer talks to (ARCHITECTURE.md): propose commands, read at a chosen
 * consistency, follow changes, manage membership. On a follower, proposals go to the leader
 * through the forwarder; across a leader change the same envelope is retried until the
 * deadline — its request id makes the state machine apply it once however often it arrives.
 */
export class Coordinator {
  private readonly requestTimeoutMs: number;

  constructor(
    readonly replica: Replica<ApplyResult, Resource>,
    private readonly fsm: Fsm,
    private readonly opts: CoordinatorOptions = {},
  ) {
    this.requestTimeoutMs = opts.requestTimeoutMs ?? 10_000;
  }

  /** Proposes a command; resolves with the FSM's verdict once committed and applied. */
  async propose(type: CommandType, body: unknown, timeoutMs = this.requestTimeoutMs): Promise<ApplyResult> {
    const envelope = encodeEnvelope(type, body);
    try {
      const r = (await this.submit({ kind: 'envelope', envelope }, timeoutMs, (ms) => this.timed('proposal', () => this.replica.propose(envelope, ms)))) as ApplyResult;
      this.opts.onProposal?.(r.ok ? 'ok' : 'refused');
      return r;
    } catch (e) {
      this.opts.onProposal?.(isCairnError(e, ErrorCode.TIMEOUT) ? 'unknown' : 'unavailable');
      throw e;
    }
  }

  /**
   * The leader side of forwarding: propose here, or refuse with NOT_LEADER and a hint. The
   * envelope comes from outside this process, so it is checked as the FSM will read it
   * (a known command type, a body that decodes and is well-formed) and as the API layer checks
   * a local request (`checkCommand`) before anything is appended: an envelope that would stop
   * every replica on apply, or that a local request could never produce, is refused with
   * INVALID_ARGUMENT (issue 15, item 4).
   */
  proposeLocal(envelope: Uint8Array, timeoutMs: number): Promise<ApplyResult> {
    let proposed = envelope;
    try {
      const command = decodeCommand(envelope);
      const replaced = this.opts.checkCommand?.(command, this.fsm.store);
      if (replaced !== undefined) {
        proposed = encodeEnvelope(command.type, replaced.body);
        // The replacement must pass the FSM's own decoding too (it is applied on every replica).
        decodeCommand(proposed);
      }
    } catch (e) {
      return Promise.reject(e instanceof Error ? e : new Error(String(e)));
    }
    return this.timed('proposal', () => this.replica.propose(proposed, timeoutMs));
  }

  /** Runs `start`; its time is told to `onStepTimed` when it succeeds. */
  private timed<T>(step: 'read-index' | 'proposal', start: () => Promise<T>): Promise<T> {
    const told = this.opts.onStepTimed;
    if (told === undefined) return start();
    const { clock } = this.replica;
    const started = clock.monotonicMs();
    return start().then((v) => {
      told(step, (clock.monotonicMs() - started) / 1000);
      return v;
    });
  }

  /**
   * Reads local state. Linearizable (default): confirm the read index with the leader (§6.4)
   * and wait until it is applied here, so every write acknowledged before the call is seen.
   * Stale: the local state as it is, with how fresh it might be.
   */
  async read<T>(consistency: Consistency, fn: (store: StoreReader) => T): Promise<ReadOutcome<T>> {
    if (consistency === 'linearizable' && this.opts.plantedStaleRead !== true) await this.timed('read-index', () => this.replica.readIndex());
    const store = this.fsm.store;
    return { value: fn(store), revision: store.revision, lastLeaderContactMs: this.replica.basicStatus().lastLeaderContactMs };
  }

  /**
   * A lease request answered by the leader's lease clock (`CoordinatorOptions.leaseRequests`):
   * here when this node leads, else forwarded to the leader, retried across a leader change
   * as a proposal is (the requests are idempotent: a keep-alive sets a deadline, the others read).
   */
  async leaseRequest(request: unknown, timeoutMs = this.requestTimeoutMs): Promise<unknown> {
    const handler = this.opts.leaseRequests;
    if (handler === undefined) throw new CairnError(ErrorCode.UNAVAILABLE, 'this node serves no lease requests');
    return this.submit({ kind: 'lease', request }, timeoutMs, (ms) => handler(request, ms));
  }

  /** The replicated lease table as applied on this node and its change counter (`Fsm.leaseTable`, `Fsm.leaseChanges`); for the leader's lease clock. */
  leaseTable(): { readonly changes: number; readonly leases: Fsm['leaseTable'] } {
    return { changes: this.fsm.leaseChanges, leases: this.fsm.leaseTable };
  }

  /** The local state as it is now, synchronously (access control's periodic re-checks); never a linearizable read. */
  storeNow(): StoreReader {
    return this.fsm.store;
  }

  /**
   * The applied state's data size (the store's deterministic `dataBytes`) and the state
   * machine's raised alarms (`['NO_SPACE']` or `[]`), as applied on this node now
   * (docs/security.md "Quotas"). Never waits.
   */
  dataStatus(): { readonly dataBytes: number; readonly alarms: readonly string[] } {
    return { dataBytes: this.fsm.store.dataBytes, alarms: this.fsm.alarms };
  }

  /**
   * A point-in-time copy of the state for a user's backup: after a read barrier, so it holds
   * every write acknowledged before the call. Cheap to take; serialized lazily in chunks.
   */
  async snapshot(): Promise<{ readonly index: LogIndex; chunks(): Iterable<Uint8Array> }> {
    await this.replica.readIndex();
    return this.fsm.snapshot();
  }

  /** Change records of every applied entry, in commit order (and a reset on snapshot install). */
  subscribe(listener: (e: ReplicaEvent<Resource>) => void): () => void {
    return this.replica.subscribe(listener);
  }

  /** One membership change, committed through Raft (on the leader, forwarded if need be). */
  async changeMembership(change: ConfigChange, timeoutMs = this.requestTimeoutMs): Promise<LogIndex> {
    // Every door to membership (the operator's HTTP route, a follower's forwarded request, a
    // joining node's) comes through here: refuse a malformed change before it reaches Raft.
    change = parseConfigChange(change);
    try {
      await this.submit({ kind: 'config-change', change }, timeoutMs, (ms) => this.replica.proposeConfigChange(change, ms));
    } catch (e) {
      // A retry of a change that already took effect (the first attempt's answer was lost).
      if (isCairnError(e, ErrorCode.INVALID_CONFIG_CHANGE) && alreadyApplied(this.replica.basicStatus(), change)) return this.replica.basicStatus().commit;
      throw e;
    }
    return this.replica.basicStatus().commit;
  }

  /** Hands leadership to `target` ('' = let the leader pick the most up-to-date voter). */
  async transferLeadership(target: NodeId | '', timeoutMs = this.requestTimeoutMs): Promise<void> {
    await this.submit({ kind: 'transfer', to: target }, timeoutMs, async () => {
      this.replica.transferLeadership(target === '' ? this.bestTransferTarget() : target);
      return undefined;
    });
  }

  /** Leader only: the voter with the highest match index, other than this node. */
  bestTransferTarget(): NodeId {
    const st = this.replica.status();
    let best: NodeId = NO_NODE;
    let bestMatch = -1;
    for (const m of st.config.members) {
      if (m.suffrage !== 'voter' || m.id === st.id) continue;
      const match = st.progress?.get(m.id)?.match ?? 0;
      if (match > bestMatch) {
        best = m.id;
        bestMatch = match;
      }
    }
    if (best === NO_NODE) throw new CairnError(ErrorCode.INVALID_ARGUMENT, 'no other voter to transfer leadership to');
    return best;
  }

  status(): ReplicaStatus {
    return this.replica.status();
  }

  private async submit(op: ForwardOp, timeoutMs: number, local: (ms: number) => Promise<unknown>): Promise<unknown> {
    const { clock } = this.replica;
    const forwarder = this.opts.forwarder;
    const deadline = clock.monotonicMs() + timeoutMs;
    const backoff = this.opts.retryBackoffMs ?? { initial: 20, max: 250 };
    let backoffMs = backoff.initial;
    let lastError: unknown;
    // Whether an attempt may have reached a leader's log: only then is the outcome unknown.
    let maybeApplied = false;
    const giveUp = (): CairnError => {
      const why = lastError instanceof Error ? lastError.message : 'no leader';
      if (!maybeApplied) return new CairnError(ErrorCode.UNAVAILABLE, `no leader accepted the operation within ${timeoutMs} ms (${why}); it was not applied`);
      return new CairnError(ErrorCode.TIMEOUT, `not confirmed within ${timeoutMs} ms (${why}); the operation may or may not have been applied`);
    };
    for (;;) {
      const remaining = Math.max(1, Math.round(deadline - clock.monotonicMs()));
      const st = this.replica.basicStatus();
      if (this.replica.stopped) {
        throw new CairnError(ErrorCode.UNAVAILABLE, `node ${st.id} is not serving: ${st.failed ?? 'shutting down'}`);
      }
      if (st.config.members.length > 0 && !st.config.members.some((m) => m.id === st.id)) {
        // Removed from the cluster (its configuration no longer names it): no leader will talk
        // to this node, so waiting for one would only hold the caller until the deadline. (A
        // node still joining has an empty configuration until the leader's log reaches it.)
        throw new CairnError(ErrorCode.UNAVAILABLE, `node ${st.id} is not a member of the cluster; send requests to a member`);
      }
      try {
        if (st.role === 'leader') return await local(remaining);
        if (st.leader !== NO_NODE) {
          if (!forwarder) throw new CairnError(ErrorCode.NOT_LEADER, `node ${st.id} is not the leader`, { leader: st.leader });
          try {
            return await forwarder.forward(st.leader, op, remaining);
          } catch (e) {
            // UNAVAILABLE from the forwarder may come from a connection lost mid-call.
            if (isCairnError(e, ErrorCode.UNAVAILABLE)) maybeApplied = true;
            throw e;
          }
        }
        lastError = new CairnError(ErrorCode.UNAVAILABLE, `no leader is known to node ${st.id}`);
      } catch (e) {
        if (!retryable(e) || (!forwarder && isCairnError(e, ErrorCode.NOT_LEADER))) throw e;
        lastError = e;
      }
      const left = deadline - clock.monotonicMs();
      if (left <= 1) throw giveUp();
      // Try again once the role or the leader this node knows changes (a new leader is
      // elected, or this node learns of it), or after the backoff, whichever comes first: a
      // caller waiting out a failover goes on as soon as there is a leader, not at the next
      // step of the backoff. A change since the attempt began needs no waiting at all.
      const now = this.replica.basicStatus();
      if (now.role === st.role && now.leader === st.leader && now.term === st.term) {
        await this.replica.waitForRoleChange(Math.min(backoffMs, left));
      }
      backoffMs = Math.min(backoffMs * 2, backoff.max);
      if (clock.monotonicMs() >= deadline) throw giveUp();
    }
  }
}

function alreadyApplied(st: ReplicaStatus, change: ConfigChange): boolean {
  const m = memberOf(st.config, change.id);
  switch (change.type) {
    case 'add-learner':
      return m !== undefined;
    case 'add-voter':
    case 'promote':
      return m?.suffrage === 'voter';
    case 'remove':
      return m === undefined;
  }
}
