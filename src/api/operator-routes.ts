import { CairnError, ErrorCode, NO_NODE, nodeId, type NodeId } from '../base/index.js';
import type { Coordinator } from '../replica/index.js';
import type { RouteAccess, Router } from './http-server.js';
import { METRICS_TARGET as METRICS, OPERATOR_TARGET, type AclTarget } from '../auth/index.js';

/** Operator routes as an authorization target: `read` for status, `admin` for changes. */
const OPERATOR: AclTarget = { ...OPERATOR_TARGET, partition: '', namespace: '', name: '' };
import type { Metrics } from './metrics.js';
import { START_WAIT_DEFAULT_MS, type ServedNode } from './served-node.js';

export interface OperatorDeps {
  readonly node: ServedNode;
  readonly metrics: Metrics;
  /** Replication lag (entries) under which a node counts as caught up for /readyz. Default 100. */
  readonly readyLagEntries?: number;
  /**
   * The HTTP/JSON API address of node `id`, whose gRPC address is `grpcAddress` (the Raft
   * configuration knows only that one); undefined when it cannot be learned now. Absent: never
   * known (`/v1/status/leader` answers `http_address: null`).
   */
  readonly httpAddressOf?: (id: NodeId, grpcAddress: string) => Promise<string | undefined>;
  /** Who may read `/metrics` (default: `read` on cairn.v1.Metrics; `public` with --metrics-anonymous). */
  readonly metricsAccess?: RouteAccess;
  /** How the node serves (docs/security.md): with TLS, or without it off loopback (`--insecure`). */
  readonly security?: { readonly tls: boolean; readonly insecure: boolean; readonly acl?: boolean };
  /** This node's data quota (`--quota-bytes`), shown in /v1/agent/self; absent: shown as null. */
  readonly quotaBytes?: number;
}

/** The coordinator; a request that arrives while the node starts waits for it (starting is not failing). */
function serving(deps: OperatorDeps): Promise<Coordinator> {
  return deps.node.coordinator(START_WAIT_DEFAULT_MS);
}

function obj(v: unknown, what: string): Record<string, unknown> {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new CairnError(ErrorCode.INVALID_ARGUMENT, `${what} must be a JSON object`);
  return v as Record<string, unknown>;
}

function onlyKeys(o: Record<string, unknown>, allowed: readonly string[], what: string): void {
  for (const k of Object.keys(o)) {
    if (!allowed.includes(k)) throw new CairnError(ErrorCode.INVALID_ARGUMENT, `unknown field ${JSON.stringify(k)} in ${what}; allowed: ${allowed.join(', ')}`);
  }
}

function parseNodeId(v: unknown, what: string): NodeId {
  if (typeof v !== 'string') throw new CairnError(ErrorCode.INVALID_ARGUMENT, `${what} must be a string`);
  try {
    return nodeId(v);
  } catch (e) {
    throw new CairnError(ErrorCode.INVALID_ARGUMENT, e instanceof Error ? e.message : String(e));
  }
}

const ADDRESS_RE = /^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):([0-9]{1,5})$/;

/** A request body as the audit log keeps it: the first 256 bytes of its text. */
function auditBody(b: Buffer): string {
  return b.subarray(0, 256).toString('utf8');
}

/** Health, readiness, metrics, agent and status endpoints, and Raft membership (API.md "Cluster and operations"). */
export function addOperatorRoutes(router: Router, deps: OperatorDeps): void {
  // The probes report the node's state as it is now; they never wait.
  router.add('GET', '/healthz', () => {
    const c = deps.node.coordinatorNow();
    const failed = c?.status().failed;
    if (failed !== undefined) return { status: 503, json: { status: 'failed', reason: failed } };
    return { status: 200, json: { status: 'ok' } };
  }, { access: 'public', rateLimitExempt: true });

  router.add('GET', '/readyz', () => {
    const c = deps.node.coordinatorNow();
    if (!c) return { status: 503, json: { ready: false, reason: deps.node.state } };
    const st = c.status();
    if (st.failed !== undefined) return { status: 503, json: { ready: false, reason: st.failed } };
    if (st.leader === NO_NODE) return { status: 503, json: { ready: false, reason: 'no leader known' } };
    const lag = st.commit - st.applied;
    if (lag > (deps.readyLagEntries ?? 100)) return { status: 503, json: { ready: false, reason: `applying: ${lag} entries behind the commit index` } };
    return { status: 200, json: { ready: true, leader: st.leader, term: st.term } };
  }, { access: 'public', rateLimitExempt: true });

  router.add('GET', '/metrics', async () => {
    const text = await deps.metrics.registry.metrics();
    return { status: 200, bytes: Buffer.from(text), contentType: deps.metrics.registry.contentType };
  }, { access: deps.metricsAccess ?? { verb: 'read', target: { ...METRICS, partition: '', namespace: '', name: '' } } });

  router.add('GET', '/v1/agent/self', async () => {
    const c = await serving(deps);
    const st = c.status();
    const data = c.dataStatus();
    return {
      status: 200,
      json: {
        id: st.id,
        role: st.role,
        term: st.term,
        leader: st.leader === NO_NODE ? null : st.leader,
        commit_index: st.commit,
        applied_index: st.applied,
        last_index: st.lastIndex,
        snapshot_index: st.snapshotIndex,
        last_leader_contact_ms: st.lastLeaderContactMs === undefined ? null : Math.round(st.lastLeaderContactMs),
        failed: st.failed ?? null,
        tls: deps.security?.tls ?? false,
        insecure: deps.security?.insecure ?? false,
        acl: deps.security?.acl ?? false,
        // docs/security.md "Quotas": the replicated alarms as applied here, the deterministic
        // size of the applied data, and this node's quota.
        alarms: data.alarms,
        data_bytes: data.dataBytes,
        quota_bytes: deps.quotaBytes ?? null,
      },
    };
  }, { access: { verb: 'read', target: OPERATOR } });

  // `address` is the gRPC address (kept from the first wave, which answered only that one);
  // `grpc_address` says so by name; `http_address` is null when this node cannot learn it
  // (the leader does not answer Hello in time, or is an older node): said, not guessed.
  router.add('GET', '/v1/status/leader', async () => {
    const st = (await serving(deps)).status();
    const leader = st.config.members.find((m) => m.id === st.leader);
    if (st.leader === NO_NODE || !leader) throw new CairnError(ErrorCode.UNAVAILABLE, 'no leader is known right now');
    const http = (await deps.httpAddressOf?.(leader.id, leader.address)) ?? null;
    return { status: 200, json: { id: leader.id, address: leader.address, grpc_address: leader.address, http_address: http } };
  }, { access: 'public' });

  router.add('GET', '/v1/operator/raft/configuration', async () => {
    const st = (await serving(deps)).status();
    return {
      status: 200,
      json: {
        index: st.configIndex,
        servers: st.config.members.map((m) => ({ id: m.id, address: m.address, suffrage: m.suffrage, leader: m.id === st.leader })),
      },
    };
  }, { access: { verb: 'read', target: OPERATOR } });

  router.add('POST', '/v1/operator/raft/peers', async (req) => {
    const o = obj(req.json(), 'the peer');
    onlyKeys(o, ['id', 'address', 'voter'], 'the peer');
    const id = parseNodeId(o['id'], 'id');
    const address = o['address'];
    if (typeof address !== 'string' || !ADDRESS_RE.test(address)) throw new CairnError(ErrorCode.INVALID_ARGUMENT, 'address must be host:port');
    const voter = o['voter'] ?? true;
    if (typeof voter !== 'boolean') throw new CairnError(ErrorCode.INVALID_ARGUMENT, 'voter must be a boolean');
    // A new member always starts as a learner (it catches up without weakening the quorum);
    // `voter: true` asks the leader to promote it once caught up.
    const index = await (await serving(deps)).changeMembership({ type: 'add-learner', id, address, ...(voter ? { autoPromote: true } : {}) });
    return { status: 200, json: { index, id, address, suffrage: 'learner', promote_when_caught_up: voter } };
  }, { access: { verb: 'admin', target: OPERATOR }, audit: (req) => ({ action: 'raft.add-peer', target: { body: auditBody(req.body) } }) });

  router.add('DELETE', '/v1/operator/raft/peers/:id', async (req) => {
    const id = parseNodeId(req.params['id'], 'id');
    const c = await serving(deps);
    if (!c.status().config.members.some((m) => m.id === id)) {
      throw new CairnError(ErrorCode.NOT_FOUND, `node ${id} is not a member of the cluster`, { id });
    }
    const index = await c.changeMembership({ type: 'remove', id });
    return { status: 200, json: { index, removed: id } };
  }, { access: { verb: 'admin', target: OPERATOR }, audit: (req) => ({ action: 'raft.remove-peer', target: { id: req.params['id'] ?? '' } }) });

  router.add('POST', '/v1/operator/raft/transfer-leader', async (req) => {
    const o = req.body.length === 0 ? {} : obj(req.json(), 'the request');
    onlyKeys(o, ['id'], 'the request');
    const target = o['id'] === undefined || o['id'] === null || o['id'] === '' ? '' : parseNodeId(o['id'], 'id');
    const c = await serving(deps);
    await c.transferLeadership(target);
    return { status: 200, json: { requested: target === '' ? 'most up-to-date voter' : target } };
  }, { access: { verb: 'admin', target: OPERATOR }, audit: (req) => ({ action: 'raft.transfer-leader', target: { body: auditBody(req.body) } }) });
}
