import * as prom from 'prom-client';
import type { ReplicaStatus } from '../replica/index.js';

/**
 * Prometheus metrics (prom-client). Gauges read the replica's status at scrape time; counters
 * and histograms are fed by hooks the server wires in (log store timing, forwarding, rejects).
 */
export class Metrics {
  readonly registry = new prom.Registry();
  readonly leaderChanges: prom.Counter;
  readonly proposals: prom.Counter<'outcome'>;
  readonly forwarded: prom.Counter<'kind' | 'outcome'>;
  readonly rejectedPeerInput: prom.Counter<'reason'>;
  readonly appendSeconds: prom.Histogram;
  readonly fsyncSeconds: prom.Histogram;
  /** Where a request's time goes (bench/README.md, "Where a CAS spends its time"). */
  readonly readIndexSeconds: prom.Histogram;
  readonly proposalSeconds: prom.Histogram;
  readonly roundTripSeconds: prom.Histogram<'kind'>;
  readonly applySeconds: prom.Histogram;
  readonly grpcRequestSeconds: prom.Histogram<'method'>;
  readonly httpRequests: prom.Counter<'method' | 'status'>;
  readonly watchEvents: prom.Counter;
  readonly watchEnded: prom.Counter<'code'>;
  readonly tlsReloads: prom.Counter<'outcome'>;
  /** Requests, connections and streams refused by a limit (docs/security.md "Limits"). */
  readonly limitRefusals: prom.Counter<'limit'>;

  constructor(status: () => ReplicaStatus | undefined) {
    const r = this.registry;
    prom.collectDefaultMetrics({ register: r, prefix: 'cairn_process_' });
    const gauge = (name: string, help: string, read: (s: ReplicaStatus) => number): void => {
      new prom.Gauge({
        name,
        help,
        registers: [r],
        collect() {
          const s = status();
          if (s) this.set(read(s));
        },
      });
    };
    gauge('cairn_raft_term', 'Current Raft term.', (s) => s.term);
    gauge('cairn_raft_commit_index', 'Highest log index known committed.', (s) => s.commit);
    gauge('cairn_raft_applied_index', 'Highest log index applied to the store.', (s) => s.applied);
    gauge('cairn_raft_last_index', 'Last index in the log.', (s) => s.lastIndex);
    gauge('cairn_raft_snapshot_index', 'Index of the newest snapshot.', (s) => s.snapshotIndex);
    gauge('cairn_raft_is_leader', '1 if this node is the leader.', (s) => (s.role === 'leader' ? 1 : 0));
    gauge('cairn_raft_voters', 'Voters in the configuration.', (s) => s.config.members.filter((m) => m.suffrage === 'voter').length);
    gauge('cairn_raft_learners', 'Learners in the configuration.', (s) => s.config.members.filter((m) => m.suffrage === 'learner').length);
    // The replica counts its drops (ReplicaStatus.droppedMessages); the counter follows them
    // at scrape time, by the increase since the last scrape (from zero again if the replica
    // was reopened and its counts started over).
    const seen = new Map<string, number>();
    new prom.Counter({
      name: 'cairn_raft_messages_dropped_total',
      help: 'Raft messages dropped before the core saw them, by reason: non-member (the sender is not in the configuration), no-config (this node waits to be added and the message is not from a leader).',
      labelNames: ['reason'],
      registers: [r],
      collect() {
        const s = status();
        if (!s) return;
        for (const [reason, n] of Object.entries(s.droppedMessages)) {
          const last = seen.get(reason) ?? 0;
          const grew = n >= last ? n - last : n;
          if (grew > 0) this.inc({ reason }, grew);
          else if (!seen.has(reason)) this.inc({ reason }, 0);
          seen.set(reason, n);
        }
      },
    });
    this.leaderChanges = new prom.Counter({ name: 'cairn_raft_leader_changes_total', help: 'Times the leader seen by this node changed.', registers: [r] });
    this.proposals = new prom.Counter({ name: 'cairn_proposals_total', help: 'Proposals made on this node, by outcome.', labelNames: ['outcome'], registers: [r] });
    this.forwarded = new prom.Counter({ name: 'cairn_forwarded_requests_total', help: 'Operations forwarded to the leader.', labelNames: ['kind', 'outcome'], registers: [r] });
    this.rejectedPeerInput = new prom.Counter({ name: 'cairn_cluster_rejected_total', help: 'Batches or messages refused on the cluster port.', labelNames: ['reason'], registers: [r] });
    const buckets = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5];
    this.appendSeconds = new prom.Histogram({
      name: 'cairn_log_append_seconds',
      help: 'Time to write one Ready batch to the log as the driver waits for it, from the append call to its resolution: with the wal log store every batch, until durable (waiting for the writer included); with level only batches written without fsync.',
      buckets,
      registers: [r],
    });
    this.fsyncSeconds = new prom.Histogram({
      name: 'cairn_log_fsync_seconds',
      help: 'Time of one sync of the log: with the wal log store each O_DSYNC write of a synced round (write and flush in one system call) or fdatasync of a segment file, from the call to its libuv callback (thread-pool queueing and event-loop lag at completion included, not the continuation); with level each batch written with fsync (the write included).',
      buckets,
      registers: [r],
    });
    this.readIndexSeconds = new prom.Histogram({
      name: 'cairn_read_index_seconds',
      help: "A linearizable read's confirmation on this node (ReadIndex, thesis 6.4): from asking until this node has applied the read index.",
      buckets,
      registers: [r],
    });
    this.proposalSeconds = new prom.Histogram({
      name: 'cairn_proposal_seconds',
      help: 'A proposal on this node as leader (a local request or one forwarded to it), until committed and applied here; only proposals that got an answer.',
      buckets,
      registers: [r],
    });
    this.roundTripSeconds = new prom.Histogram({
      name: 'cairn_raft_round_trip_seconds',
      help: "On the leader: from handing a Raft message to the transport until the peer's answer reaches the driver. kind=heartbeat: a heartbeat and its response (the network both ways and one turn of the peer); kind=append: entries and their acknowledgement (the peer's log write included).",
      labelNames: ['kind'],
      buckets,
      registers: [r],
    });
    this.applySeconds = new prom.Histogram({
      name: 'cairn_apply_seconds',
      help: 'Applying one committed entry to the state machine on this node.',
      buckets: [0.00001, 0.00002, 0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05],
      registers: [r],
    });
    this.grpcRequestSeconds = new prom.Histogram({
      name: 'cairn_grpc_request_seconds',
      help: "A unary call of the public gRPC API on this node, by method: from its arrival (headers) until its status is sent.",
      labelNames: ['method'],
      buckets,
      registers: [r],
    });
    this.httpRequests = new prom.Counter({ name: 'cairn_http_requests_total', help: 'HTTP requests by method and status.', labelNames: ['method', 'status'], registers: [r] });
    this.watchEvents = new prom.Counter({ name: 'cairn_watch_events_sent_total', help: 'Watch events handed to watch streams (HTTP and gRPC).', registers: [r] });
    this.limitRefusals = new prom.Counter({
      name: 'cairn_limit_refusals_total',
      help: 'Refused by a limit: rate-address, rate-token, watch-node, watch-connection, http-connections, grpc-connections, grpc-message-cut.',
      labelNames: ['limit'],
      registers: [r],
    });
    this.tlsReloads = new prom.Counter({ name: 'cairn_tls_reloads_total', help: 'TLS material reloads (SIGHUP), by outcome (ok, failed: the old material stays).', labelNames: ['outcome'], registers: [r] });
    this.watchEnded = new prom.Counter({ name: 'cairn_watch_streams_ended_total', help: 'Watch streams ended by the server, by code (OK, COMPACTED, SLOW_CONSUMER, RESET, TIMEOUT, UNAVAILABLE).', labelNames: ['code'], registers: [r] });
  }

  /**
   * How this node serves its ports: `cairn_tls` 1 with TLS material; `cairn_insecure` 1 when it
   * serves without TLS off loopback (`--insecure`: anyone who can reach it can join and write).
   */
  security(s: { readonly tls: boolean; readonly insecure: boolean }): void {
    const r = this.registry;
    new prom.Gauge({ name: 'cairn_tls', help: '1 when the gRPC and HTTP ports speak TLS (peers prove their node identity).', registers: [r] }).set(s.tls ? 1 : 0);
    new prom.Gauge({ name: 'cairn_insecure', help: '1 when this node serves without TLS off loopback (--insecure).', registers: [r] }).set(s.insecure ? 1 : 0);
  }

  /**
   * The data quota (docs/security.md "Quotas"), read at scrape time: `cairn_quota_bytes` (this
   * node's --quota-bytes), `cairn_store_data_bytes` (the deterministic size of the applied
   * data) and `cairn_alarm_active{alarm="NO_SPACE"}` (1 while the replicated alarm is raised).
   */
  quotaGauges(quotaBytes: number, read: () => { readonly dataBytes: number; readonly alarms: readonly string[] } | undefined): void {
    const r = this.registry;
    new prom.Gauge({ name: 'cairn_quota_bytes', help: 'The data quota of this node (--quota-bytes), stamped into the commands it builds.', registers: [r] }).set(quotaBytes);
    new prom.Gauge({
      name: 'cairn_store_data_bytes',
      help: 'Deterministic size of the stored resources (the figure the quota is decided on).',
      registers: [r],
      collect() {
        const d = read();
        if (d) this.set(d.dataBytes);
      },
    });
    new prom.Gauge({
      name: 'cairn_alarm_active',
      help: '1 while the replicated state-machine alarm is raised (NO_SPACE: writes that grow the data are refused).',
      labelNames: ['alarm'],
      registers: [r],
      collect() {
        const d = read();
        if (d) this.set({ alarm: 'NO_SPACE' }, d.alarms.includes('NO_SPACE') ? 1 : 0);
      },
    });
  }

  /** Gauges of paged lists, read at scrape time. */
  listGauges(read: () => { snapshots: number }): void {
    new prom.Gauge({
      name: 'cairn_list_snapshots',
      help: 'Store snapshots held for unfinished paged lists (one per revision; bounded by --list-snapshots).',
      registers: [this.registry],
      collect() {
        this.set(read().snapshots);
      },
    });
  }

  /** Gauges read from the event publisher and the watch service at scrape time. */
  watchGauges(read: () => { streams: number; subscribers: number; windowEvents: number; windowBytes: number; snapshotBuilds: number; slowConsumers: number } | undefined): void {
    const r = this.registry;
    const g = (name: string, help: string, pick: (w: NonNullable<ReturnType<typeof read>>) => number): void => {
      new prom.Gauge({
        name,
        help,
        registers: [r],
        collect() {
          const w = read();
          if (w) this.set(pick(w));
        },
      });
    };
    g('cairn_watch_streams', 'Open watch streams.', (w) => w.streams);
    g('cairn_watch_subscribers', 'Subscriptions of the event publisher (one per watch of a stream).', (w) => w.subscribers);
    g('cairn_watch_window_events', 'Change events retained for watch resumes.', (w) => w.windowEvents);
    g('cairn_watch_window_bytes', 'Memory counted for the change events retained for watch resumes (each twice its resource\'s deterministic size; --watch-window-bytes bounds it).', (w) => w.windowBytes);
    g('cairn_watch_snapshot_builds', 'Initial states built from the store (cache misses) since start.', (w) => w.snapshotBuilds);
    g('cairn_watch_slow_consumers', 'Watchers ended as slow consumers since start.', (w) => w.slowConsumers);
  }
}
