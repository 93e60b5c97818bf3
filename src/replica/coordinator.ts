import { CairnError, ErrorCode, type LogIndex, type NodeId, type Revision } from '../base/index.js';
import { encodeEnvelope, type ApplyResult, type Fsm, type MessageType } from '../fsm/index.js';
import type { ConfigChange } from '../raft/index.js';
import type { Resource, StoreReader } from '../store/index.js';
import type { Replica, ReplicaEvent, ReplicaStatus } from './replica.js';

export type Consistency = 'linearizable' | 'stale';

export interface ReadOutcome<T> {
  readonly value: T;
  /** The store revision the read reflects (the applied index). */
  readonly revision: Revision;
  /** For stale reads: how long since this node heard from the leader (undefined: no leader known). */
  readonly lastLeaderContactMs: number | undefined;
}

/**
 * The facade the API layer talks to (ARCHITECTURE.md): propose commands, read at a chosen
 * consistency, follow changes, manage membership. Forwarding a proposal from a follower to
 * the leader plugs in here (Stage 3); until then a follower answers NOT_LEADER with a hint.
 */
export class Coordinator {
  constructor(
    readonly replica: Replica<ApplyResult, Resource>,
    private readonly fsm: Fsm,
  ) {}

  /** Proposes a command; resolves with the FSM's verdict once committed and applied here. */
  propose(type: MessageType, body: unknown): Promise<ApplyResult> {
    return this.replica.propose(encodeEnvelope(type, body));
  }

  /**
   * Reads local state. Linearizable (default): confirm the read index with the leader (§6.4)
   * and wait until it is applied here, so every write acknowledged before the call is seen.
   * Stale: the local state as it is, with how fresh it might be.
   */
  async read<T>(consistency: Consistency, fn: (store: StoreReader) => T): Promise<ReadOutcome<T>> {
    if (consistency === 'linearizable') await this.replica.readIndex();
    const store = this.fsm.store;
    return { value: fn(store), revision: store.revision, lastLeaderContactMs: this.replica.status().lastLeaderContactMs };
  }

  /** Change records of every applied entry, in commit order (and a reset on snapshot install). */
  subscribe(listener: (e: ReplicaEvent<Resource>) => void): () => void {
    return this.replica.subscribe(listener);
  }

  async changeMembership(change: ConfigChange): Promise<LogIndex> {
    const r = await this.replica.proposeConfigChange(change);
    if (!r.ok) throw new CairnError(ErrorCode.INTERNAL, `membership change was refused at apply: ${r.error.message}`);
    return this.replica.status().commit;
  }

  transferLeadership(target: NodeId): void {
    this.replica.transferLeadership(target);
  }

  status(): ReplicaStatus {
    return this.replica.status();
  }
}
