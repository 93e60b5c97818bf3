import t from 'tap';
import { CairnError, ErrorCode } from '../base/index.js';
import { ManualTime } from '../base/testing/index.js';
import type { LeaseEntry } from '../fsm/index.js';
import { LeaseService } from './lease-service.js';
import type { ResourceService } from './resource-service.js';
import type { ServedNode } from './served-node.js';

/**
 * The leader's side of lease requests (`LeaseService.handle`), over a fake node: a new leader
 * that has not yet applied a grant committed by its predecessor answers a keep-alive for it
 * after a read barrier, not NOT_FOUND; the shape of a request from the network is checked.
 */
function fakeNode(pendingGrant?: { id: string; ttlSeconds: number }) {
  const leases = new Map<string, LeaseEntry>();
  let changes = 0;
  let barriers = 0;
  const coordinator = {
    replica: { basicStatus: () => ({ role: 'leader', term: 2 }) },
    leaseTable: () => ({ changes, leases }),
    storeNow: () => ({ getByUid: () => undefined }),
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
  return { node, barriers: () => barriers };
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
  t.equal(barriers(), 1);
  t.same(await svc.handle({ op: 'keepalive', id: 'late' }), { id: 'late', ttlSeconds: 9, remainingSeconds: 9, remainingMs: 9000 });
  t.equal(barriers(), 1, 'a hit needs no barrier');
  t.equal(await codeOf(svc.handle({ op: 'ttl', id: 'never', attached: false })), ErrorCode.NOT_FOUND, 'a lease that is not there is NOT_FOUND after the barrier');
  t.equal(barriers(), 2);
});

t.test('requests from the network are checked', async (t) => {
  const { node } = fakeNode();
  const svc = new LeaseService(node, {} as ResourceService, new ManualTime(), { minTtlSeconds: 2, maxLeases: 10 });
  for (const bad of [null, 'keepalive', [], { op: 'drop' }, { op: 'keepalive' }, { op: 'keepalive', id: 'UP' }, { op: 'ttl', id: 5 }]) {
    t.equal(await codeOf(svc.handle(bad)), ErrorCode.INVALID_ARGUMENT, JSON.stringify(bad));
  }
  t.same(await svc.handle({ op: 'list' }), { leases: [] });
});
