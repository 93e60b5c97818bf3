import type { LogIndex, NodeId } from '../base/index.js';
import type { Entry, Message, SnapshotMeta } from '../raft/index.js';
import type { StateMachine, Transport } from '../replica/index.js';

/**
 * Thin delegating wrappers around two of the replica's ports that time what passes through them
 * for the metrics (like TimedLogStore for the log): where a request's time goes, without a hook
 * inside the driver (bench/README.md, "Where a CAS spends its time").
 */

/** Milliseconds from an arbitrary origin (performance.now in the agent; a fake in tests). */
export type NowMs = () => number;

/** Round trips the transport saw, in seconds (cairn_raft_round_trip_seconds). */
export interface RoundTripSink {
  heartbeat(seconds: number): void;
  append(seconds: number): void;
}

/** At most this many unanswered sends remembered per peer and kind; the oldest are forgotten first. */
const MAX_PENDING = 256;

/**
 * The transport, timing the leader's round trips from the moment the driver hands a message to
 * the transport until the peer's answer reaches the driver's handler:
 *
 * - **heartbeat**: a heartbeat and its response, matched by `readSeq`. Heartbeats of the same
 *   read sequence are timed from the first one sent (a response says which sequence it answers,
 *   not which heartbeat); older sequences are forgotten once a later one is answered.
 * - **append**: an append carrying entries, until the peer acknowledges an index at or past its
 *   last entry (a follower acknowledges once its log write is durable). Each append is timed
 *   from its own send; a rejection forgets the peer's pending appends (the leader probes again).
 *
 * Every node's transport is wrapped; only a leader sends these, so only a leader times them.
 * A stale or unmatched answer is ignored. Costs a clock read and a map update per message.
 */
export class RoundTripTransport implements Transport {
  private readonly heartbeats = new Map<NodeId, Map<number, number>>();
  private readonly appends = new Map<NodeId, { last: LogIndex; atMs: number }[]>();
  readonly onConnectionLost?: (handler: (peer: NodeId) => void) => void;

  constructor(
    private readonly inner: Transport,
    private readonly sink: RoundTripSink,
    private readonly now: NowMs,
  ) {
    const lost = inner.onConnectionLost?.bind(inner);
    if (lost !== undefined) this.onConnectionLost = lost;
  }

  send(messages: readonly Message[]): void {
    const t = this.now();
    for (const m of messages) {
      if (m.type === 'heartbeat') {
        let byPeer = this.heartbeats.get(m.to);
        if (byPeer === undefined) this.heartbeats.set(m.to, (byPeer = new Map()));
        if (!byPeer.has(m.readSeq)) {
          if (byPeer.size >= MAX_PENDING) byPeer.delete(byPeer.keys().next().value as number);
          byPeer.set(m.readSeq, t);
        }
      } else if (m.type === 'app' && m.entries.length > 0) {
        let q = this.appends.get(m.to);
        if (q === undefined) this.appends.set(m.to, (q = []));
        if (q.length >= MAX_PENDING) q.shift();
        q.push({ last: (m.index + m.entries.length) as LogIndex, atMs: t });
      }
    }
    this.inner.send(messages);
  }

  onMessage(handler: (m: Message) => void): void {
    this.inner.onMessage((m) => {
      if (m.type === 'heartbeat-resp') this.heartbeatAnswered(m.from, m.readSeq);
      else if (m.type === 'app-resp') this.appendAnswered(m.from, m.index, m.reject);
      handler(m);
    });
  }

  close(): Promise<void> {
    return this.inner.close();
  }

  private heartbeatAnswered(peer: NodeId, readSeq: number): void {
    const byPeer = this.heartbeats.get(peer);
    if (byPeer === undefined) return;
    const sentAt = byPeer.get(readSeq);
    // Forget this sequence and every older one: their answers are no longer awaited.
    // (Deleting the entry being visited is safe in a Map's iteration.)
    for (const seq of byPeer.keys()) if (seq <= readSeq) byPeer.delete(seq);
    if (sentAt !== undefined) this.sink.heartbeat((this.now() - sentAt) / 1000);
  }

  private appendAnswered(peer: NodeId, index: LogIndex, reject: boolean): void {
    const q = this.appends.get(peer);
    if (q === undefined || q.length === 0) return;
    if (reject) {
      q.length = 0;
      return;
    }
    const t = this.now();
    let done = 0;
    while (done < q.length && (q[done] as { last: LogIndex }).last <= index) {
      this.sink.append((t - (q[done] as { atMs: number }).atMs) / 1000);
      done++;
    }
    if (done > 0) q.splice(0, done);
  }
}

/** The state machine, timing each apply (cairn_apply_seconds); everything else passes through. */
export class TimedStateMachine<Result, R> implements StateMachine<Result, R> {
  constructor(
    private readonly inner: StateMachine<Result, R>,
    private readonly observe: (seconds: number) => void,
    private readonly now: NowMs,
  ) {}

  apply(entry: Entry): ReturnType<StateMachine<Result, R>['apply']> {
    const t = this.now();
    try {
      return this.inner.apply(entry);
    } finally {
      this.observe((this.now() - t) / 1000);
    }
  }

  snapshot(): ReturnType<StateMachine<Result, R>['snapshot']> {
    return this.inner.snapshot();
  }

  restore(meta: SnapshotMeta, data: Uint8Array): void {
    this.inner.restore(meta, data);
  }

  get appliedIndex(): LogIndex {
    return this.inner.appliedIndex;
  }
}
