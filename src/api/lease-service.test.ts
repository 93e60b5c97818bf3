import t from 'tap';
import { CairnError, ErrorCode } from '../base/index.js';
import { ManualTime } from '../base/testing/index.js';
import type { LeaseEntry } from '../fsm/index.js';
import { LeaseService } from './lease-service.js';
import type { ResourceService } from './resource-service.js';
import type { ServedNode } from './served-node.js';

/**
 * The leader's side of lease requests (`LeaseService.handle`), over a fake node: every
 * keep-alive and time-to-live passes a read barrier, so a new leader that has not yet applied
 * a grant committed by its predecessor answers it after the barrier, not NOT_FOUND; the shape
 * of a request from the network is checked; the attached list shows only what the caller may read.
 */
function fakeNode(pendingGrant?: { id: string; ttlSeconds: number }, attached: Array<{ name: string; kind: string }> = []) {
  const leases = new Map<string, LeaseEntry>();
  let changes = 0;
  let barriers = 0;
  const coordinator = {
    replica: { basicStatus: () => ({ role: 'leader', term: 2 }) },
    leaseTable: () => ({ changes, leases }),
    storeNow: () => ({
      getByUid: (uid: string) => {
        const a = attached.find((x) => x.name === uid);
        return a === undefined ? undefined : { id: { type: { group: 'demo', groupVersion: 'v1', kind: a.kind }, tenancy: { partition: 'default', namespace: 'default' }, name: a.name, uid } };
      },
    }),
    // The barrier: the leader applies what was committed before the call (here, the pending grant).
    read: async () => {
      barriers++;
      if (pendingGrant !== undefined) {
        leases.set(pendingGrant.id, { ttlSeconds: pendingGrant.ttlSeconds, grantRevision: 7, attached: new Set() });
        changes++;
        pendingGrant = undefined;
      }
      return { value: undefined };
    },
  };
  const node = { coordinator: async () => coordinator, coordinatorNow: () => coordinator } as unknown as Pick<ServedNode, 'coordinator' | 'coordinatorNow'>;
  const grant = (id: string, ttlSeconds: number) => {
    leases.set(id, { ttlSeconds, grantRevision: 9, attached: new Set(attached.map((a) => a.name)) });
    changes++;
  };
  return { node, coordinator, grant, barriers: () => barriers };
}

async function codeOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return 'none';
  } catch (e) {
    return e instanceof CairnError ? e.code : String(e);
  }
}

t.test('a new leader catches up before it calls a lease missing', async (t) => {
  const { node, barriers } = fakeNode({ id: 'late', ttlSeconds: 9 });
  const svc = new LeaseService(node, {} as ResourceService, new ManualTime(), { minTtlSeconds: 2, maxLeases: 10 });
  t.same(await svc.handle({ op: 'keepalive', id: 'late' }), { id: 'late', ttlSeconds: 9, remainingSeconds: 9, remainingMs: 9000 }, 'renewed once applied');
  t.equal(barriers(), 2, "the clock's start barrier and the keep-alive's");
  t.same(await svc.handle({ op: 'keepalive', id: 'late' }), { id: 'late', ttlSeconds: 9, remainingSeconds: 9, remainingMs: 9000 });
  t.equal(barriers(), 3, 'every keep-alive confirms leadership');
  t.equal(await codeOf(svc.handle({ op: 'ttl', id: 'never', attached: false })), ErrorCode.NOT_FOUND, 'a lease that is not there is NOT_FOUND after the barrier');
  t.equal(barriers(), 4);
});

t.test('the attached list shows only the resources the caller may read', async (t) => {
  const { node, coordinator, grant } = fakeNode(undefined, [{ name: 'p', kind: 'Artist' }, { name: 'q', kind: 'Album' }, { name: 'boss', kind: 'Executive' }]);
  grant('svc', 10);
  const identity = {
    kind: 'token',
    accessorId: 'writer',
    roles: [],
    management: false,
    rules: [{ verbs: ['read', 'write'], types: ['demo.v1.Artist'], partitions: ['*'], namespaces: ['*'], namePrefix: '' }, { verbs: ['write'], types: ['demo.v1.Album'], partitions: ['*'], namespaces: ['*'], namePrefix: '' }],
  };
  const resources = { authorizeCall: async () => identity } as unknown as ResourceService;
  const svc = new LeaseService(node, resources, new ManualTime(), { minTtlSeconds: 2, maxLeases: 10 });
  (coordinator as unknown as { leaseRequest: (r: unknown) => Promise<unknown> }).leaseRequest = (r) => svc.handle(r);
  const r = await svc.timeToLive('svc', true);
  t.same(r.attached?.map((a) => a.name), ['p'], 'Album q (write only) and Executive boss (no grant) are left out');
  t.equal((await svc.timeToLive('svc', false)).attached, undefined);
});

t.test('requests from the network are checked', async (t) => {
  const { node } = fakeNode();
  const svc = new LeaseService(node, {} as ResourceService, new ManualTime(), { minTtlSeconds: 2, maxLeases: 10 });
  for (const bad of [null, 'keepalive', [], { op: 'drop' }, { op: 'keepalive' }, { op: 'keepalive', id: 'UP' }, { op: 'ttl', id: 5 }]) {
    t.equal(await codeOf(svc.handle(bad)), ErrorCode.INVALID_ARGUMENT, JSON.stringify(bad));
  }
  t.same(await svc.handle({ op: 'list' }), { leases: [] });
});
