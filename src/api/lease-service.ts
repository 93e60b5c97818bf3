import { CairnError, ErrorCode, silentLogger, type Clock, type Logger } from '../base/index.js';
import { CommandType, MAX_LEASE_TTL_SECONDS, encodeEnvelope, leaseIdProblem, type LeaseGrantCommand, type LeaseRevokeCommand } from '../fsm/index.js';
import { authorize, type Identity } from '../auth/index.js';
import { ulid } from './ids.js';
import { leaseAclTarget } from './lease-acl.js';
import { LeaseClock, type LeaseTimeToLive } from './lease-clock.js';
import { idToJson, type ResourceIdJson } from './resource-json.js';
import { aclVerb, fromApplyError, type CallContext, type ResourceService } from './resource-service.js';
import { START_WAIT_DEFAULT_MS, type ServedNode } from './served-node.js';

export { leaseAclTarget };

export interface LeaseServiceOptions {
  /** The shortest TTL granted, in seconds (`minLeaseTtlSeconds` of the election timeout): a grant asking for less gets this. */
  readonly minTtlSeconds: number;
  /** `--max-leases`: the most leases the cluster holds (stamped into each grant; the state machine decides). */
  readonly maxLeases: number;
  readonly logger?: Logger;
  /** How long the leader waits for an expiry entry to apply, in ms. Default 10,000. */
  readonly expiryTimeoutMs?: number;
}

/** A lease as the API answers it. */
export interface LeaseAnswer {
  readonly id: string;
  readonly ttlSeconds: number;
}

export interface LeaseTtlAnswer extends LeaseTimeToLive {
  /** With `attached`: the resources attached to it, in key order. */
  readonly attached?: readonly ResourceIdJson[];
}

/** A lease request a follower forwards to the leader (msgpack on the cluster port). */
type LeaseRequest = { readonly op: 'keepalive'; readonly id: string } | { readonly op: 'ttl'; readonly id: string; readonly attached: boolean } | { readonly op: 'list' };

function invalid(message: string): CairnError {
  return new CairnError(ErrorCode.INVALID_ARGUMENT, message);
}

/** A requested TTL, checked (INVALID_ARGUMENT naming the field as the caller spelled it: `ttl_seconds` over HTTP, `ttlSeconds` over gRPC). */
export function checkTtlSeconds(ttl: unknown, field: 'ttl_seconds' | 'ttlSeconds'): number {
  if (typeof ttl !== 'number' || !Number.isSafeInteger(ttl) || ttl < 1 || ttl > MAX_LEASE_TTL_SECONDS) {
    throw invalid(`${field} must be a whole number of seconds from 1 to ${MAX_LEASE_TTL_SECONDS}, got ${JSON.stringify(ttl) ?? String(ttl)}`);
  }
  return ttl;
}

/**
 * Whether `identity` may `read` the resource `a` names (an attached list shows only those).
 * The ACL check only: a type's own access hook is consulted by the resource routes, which the
 * attached list does not go through.
 */
function mayRead(identity: Identity, a: ResourceIdJson): boolean {
  const parts = a.type.split('.');
  const kind = parts.pop() ?? '';
  const groupVersion = parts.pop() ?? '';
  const group = parts.join('.');
  return authorize(identity, aclVerb(group, kind, 'read'), { group, groupVersion, kind, partition: a.tenancy.partition, namespace: a.tenancy.namespace, name: a.name });
}

/** A lease id from a request, checked (INVALID_ARGUMENT naming what is wrong). */
export function checkLeaseId(v: unknown): string {
  const problem = leaseIdProblem(v);
  if (problem !== undefined) throw invalid(problem);
  return v as string;
}

/**
 * Leases (docs/api.md "Leases"), once for HTTP and gRPC: grant and revoke are log entries
 * (0x16, 0x17) proposed like writes; keep-alive, time-to-live and list are answered by the
 * leader from its lease clock (`LeaseClock`), forwarded there by a follower
 * (`Coordinator.leaseRequest`). Every call is checked against the caller's grants on
 * `leaseAclTarget`.
 */
export class LeaseService {
  readonly clock: LeaseClock;
  private readonly logger: Logger;

  constructor(
    private readonly node: Pick<ServedNode, 'coordinator' | 'coordinatorNow'>,
    private readonly resources: ResourceService,
    time: Clock,
    private readonly opts: LeaseServiceOptions,
  ) {
    this.logger = opts.logger ?? silentLogger;
    this.clock = new LeaseClock(
      {
        leaderTerm: () => {
          const c = this.node.coordinatorNow();
          if (c === undefined) return undefined;
          const st = c.replica.basicStatus();
          return st.role === 'leader' ? (st.term as number) : undefined;
        },
        table: () => this.node.coordinatorNow()?.leaseTable(),
        proposeExpiry: (id, grantRevision) => this.proposeExpiry(id, grantRevision),
        barrier: async () => {
          const c = this.node.coordinatorNow();
          if (c === undefined) throw new CairnError(ErrorCode.UNAVAILABLE, 'the node is not running');
          // Concurrent barriers share one heartbeat round (read-index.ts), so a burst of keep-alives costs one round.
          await c.read('linearizable', () => undefined);
        },
      },
      { clock: time, logger: this.logger },
    );
  }

  /**
   * A grant forwarded by a follower: this leader's minimum TTL and `--max-leases` apply, as
   * for a grant it builds itself (the follower's settings may differ).
   */
  clampForwardedGrant(cmd: LeaseGrantCommand): { readonly body: LeaseGrantCommand } {
    return { body: { ...cmd, ttlSeconds: Math.max(cmd.ttlSeconds, this.opts.minTtlSeconds), maxLeases: this.opts.maxLeases } };
  }

  /** Drives the lease clock (the node calls it periodically). */
  tick(): void {
    this.clock.tick();
  }

  /** An expiry, proposed on this node's replica only: never forwarded (see LeaseClockHost). */
  private async proposeExpiry(id: string, grantRevision: number): Promise<unknown> {
    const c = this.node.coordinatorNow();
    if (c === undefined) throw new CairnError(ErrorCode.UNAVAILABLE, 'the node is not running');
    const cmd: LeaseRevokeCommand = { ...this.resources.header({}, { kind: 'open' }), id, reason: 'expired', grantRevision };
    const r = await c.replica.propose(encodeEnvelope(CommandType.LeaseRevoke, cmd), this.opts.expiryTimeoutMs ?? 10_000);
    if (r.ok && r.kind === 'lease-revoke') this.logger.info({ lease: id, grantRevision, deleted: r.deleted, revision: r.revision }, 'lease expired');
    else if (r.ok && r.kind === 'none') this.logger.info({ lease: id, grantRevision }, 'lease expiry was for an earlier grant of this id; the lease stays');
    return r;
  }

  /** Grants a lease: TTL in whole seconds (raised to the minimum), the id given or a new lowercase ULID. */
  async grant(req: { readonly ttlSeconds: unknown; readonly id?: unknown }, ctx: CallContext = {}): Promise<LeaseAnswer> {
    const ttl = checkTtlSeconds(req.ttlSeconds, 'ttlSeconds');
    const id = req.id === undefined || req.id === null || req.id === '' ? ulid().toLowerCase() : checkLeaseId(req.id);
    const ttlSeconds = Math.max(ttl, this.opts.minTtlSeconds);
    const identity = await this.resources.authorizeCall(ctx, 'write', leaseAclTarget(id));
    const c = await this.node.coordinator(ctx.timeoutMs ?? START_WAIT_DEFAULT_MS);
    const cmd: LeaseGrantCommand = { ...this.resources.header(ctx, identity), id, ttlSeconds, maxLeases: this.opts.maxLeases };
    const r = await c.propose(CommandType.LeaseGrant, cmd, ctx.timeoutMs);
    if (!r.ok) throw fromApplyError(r);
    if (r.kind !== 'lease-grant') throw reused(r.kind, 'lease grant');
    return { id: r.id, ttlSeconds: r.ttlSeconds };
  }

  /** Revokes a lease: its attached resources are deleted in the same entry. NOT_FOUND when there is no such lease. */
  async revoke(idIn: unknown, ctx: CallContext = {}): Promise<{ readonly id: string; readonly deleted: number; readonly revision: number }> {
    const id = checkLeaseId(idIn);
    const identity = await this.resources.authorizeCall(ctx, 'write', leaseAclTarget(id));
    const c = await this.node.coordinator(ctx.timeoutMs ?? START_WAIT_DEFAULT_MS);
    const cmd: LeaseRevokeCommand = { ...this.resources.header(ctx, identity), id, reason: 'revoked' };
    const r = await c.propose(CommandType.LeaseRevoke, cmd, ctx.timeoutMs);
    if (!r.ok) throw fromApplyError(r);
    if (r.kind !== 'lease-revoke') throw reused(r.kind, 'lease revoke');
    return { id: r.id, deleted: r.deleted, revision: r.revision };
  }

  /** Renews a lease on the leader's clock; NOT_FOUND when it is gone (revoked, expired). */
  async keepAlive(idIn: unknown, ctx: CallContext = {}): Promise<LeaseTimeToLive> {
    const id = checkLeaseId(idIn);
    await this.resources.authorizeCall(ctx, 'write', leaseAclTarget(id));
    return (await this.ask({ op: 'keepalive', id }, ctx)) as LeaseTimeToLive;
  }

  /**
   * The lease's granted and remaining TTL, from the leader; with `attached`, the attached
   * resources the caller may `read` (the others are left out, as a list leaves them out).
   */
  async timeToLive(idIn: unknown, attached: boolean, ctx: CallContext = {}): Promise<LeaseTtlAnswer> {
    const id = checkLeaseId(idIn);
    const identity = await this.resources.authorizeCall(ctx, 'read', leaseAclTarget(id));
    const r = (await this.ask({ op: 'ttl', id, attached }, ctx)) as LeaseTtlAnswer;
    if (r.attached === undefined) return r;
    return { ...r, attached: r.attached.filter((a) => mayRead(identity, a)) };
  }

  /** Every lease the caller may `list`, in id order, with its granted TTL (as the leader has applied them). */
  async list(ctx: CallContext = {}): Promise<{ readonly leases: readonly LeaseAnswer[] }> {
    const identity = await this.resources.identifyCall(ctx);
    // Refused when no rule grants `list` on any lease; otherwise filtered lease by lease, as a list of resources is.
    this.resources.access.checkList(identity, 'list', leaseAclTarget(''));
    const out = (await this.ask({ op: 'list' }, ctx)) as { leases: LeaseAnswer[] };
    return { leases: out.leases.filter((l) => authorize(identity, 'list', leaseAclTarget(l.id))) };
  }

  private async ask(request: LeaseRequest, ctx: CallContext): Promise<unknown> {
    const c = await this.node.coordinator(ctx.timeoutMs ?? START_WAIT_DEFAULT_MS);
    return c.leaseRequest(request, ctx.timeoutMs);
  }

  /**
   * The leader's side (`CoordinatorOptions.leaseRequests`): a request from this node or a
   * follower's forward, so its shape is checked first (it may come from the network).
   */
  async handle(request: unknown): Promise<unknown> {
    const r = parseLeaseRequest(request);
    const c = this.node.coordinatorNow();
    if (c === undefined) throw new CairnError(ErrorCode.UNAVAILABLE, 'the node is not running');
    switch (r.op) {
      case 'keepalive':
        return this.clock.keepAlive(r.id);
      case 'ttl': {
        const ttl = await this.clock.timeToLive(r.id);
        if (!r.attached) return ttl;
        const lease = c.leaseTable().leases.get(r.id);
        const store = c.storeNow();
        const ids: ResourceIdJson[] = [];
        for (const uid of lease?.attached ?? []) {
          const res = store.getByUid(uid);
          if (res !== undefined) ids.push(idToJson(res.id));
        }
        ids.sort((a, b) => (JSON.stringify([a.type, a.tenancy, a.name]) < JSON.stringify([b.type, b.tenancy, b.name]) ? -1 : 1));
        return { ...ttl, attached: ids };
      }
      case 'list': {
        // The leader's applied table after a read barrier: every grant and revoke acknowledged before is in it.
        await c.read('linearizable', () => undefined);
        const leases = [...c.leaseTable().leases.entries()].map(([id, l]) => ({ id, ttlSeconds: l.ttlSeconds }));
        leases.sort((a, b) => (a.id < b.id ? -1 : 1));
        return { leases };
      }
    }
  }
}

function parseLeaseRequest(v: unknown): LeaseRequest {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw invalid('a lease request must be an object');
  const o = v as Record<string, unknown>;
  switch (o['op']) {
    case 'keepalive':
      return { op: 'keepalive', id: checkLeaseId(o['id']) };
    case 'ttl':
      return { op: 'ttl', id: checkLeaseId(o['id']), attached: o['attached'] === true };
    case 'list':
      return { op: 'list' };
    default:
      throw invalid('a lease request op must be keepalive, ttl or list');
  }
}

function reused(first: string, asked: string): CairnError {
  return new CairnError(ErrorCode.INVALID_ARGUMENT, `the request id (Idempotency-Key / request_id) was first used for a ${first}; use a new id for this ${asked} (nothing was applied)`);
}
