import t from 'tap';
import { managedSpuSpec, planSpuGroup, type SpuGroupPlan, type SpuGroupView, type SpuView } from './spu-group.js';

const group: SpuGroupView = { name: 'main', uid: 'G1', replicas: 3, minId: 0 };

/** The SPUs a group would have made for `ids`. */
const owned = (g: SpuGroupView, ids: number[]): SpuView[] => ids.map((id) => ({ name: `${g.name}-${id}`, uid: `U${id}`, ownerUid: g.uid, version: '5', spec: managedSpuSpec(g, id) }));

const custom = (name: string, id: number): SpuView => ({
  name,
  uid: `C-${name}`,
  ownerUid: undefined,
  version: '3',
  spec: { id, type: 'custom', publicEndpoint: { host: 'h', port: 1 }, privateEndpoint: { host: 'h', port: 2 } },
});

const summary = (p: SpuGroupPlan): unknown =>
  p.resolution === 'Reserved' ? { create: p.create.map((c) => c.name), remove: p.remove.map((r) => r.name), update: p.update.map((u) => u.name), message: p.message } : p;

t.test('a new group creates its SPUs: ids minId..minId+replicas-1, named <group>-<id>, lowest first', async (t) => {
  t.same(summary(planSpuGroup(group, [])), { create: ['main-0', 'main-1', 'main-2'], remove: [], update: [], message: '3 SPUs, ids 0..2' });
  const p = planSpuGroup({ ...group, minId: 10, replicas: 2, rack: 'r1' }, []);
  t.ok(p.resolution === 'Reserved');
  if (p.resolution === 'Reserved') {
    t.same(p.create[0], {
      name: 'main-10',
      spec: { id: 10, type: 'managed', rack: 'r1', publicEndpoint: { host: 'main-10', port: 9005 }, privateEndpoint: { host: 'main-10', port: 9006 } },
    });
    t.equal(p.message, '2 SPUs, ids 10..11');
  }
});

t.test('a group whose SPUs all exist changes nothing (Reserved)', async (t) => {
  t.same(summary(planSpuGroup(group, [...owned(group, [0, 1, 2]), custom('other', 7)])), { create: [], remove: [], update: [], message: '3 SPUs, ids 0..2' });
});

t.test('scaling up creates the missing ids; scaling down removes the highest ids first', async (t) => {
  t.same(summary(planSpuGroup({ ...group, replicas: 5 }, owned(group, [0, 1, 2]))), { create: ['main-3', 'main-4'], remove: [], update: [], message: '5 SPUs, ids 0..4' });
  t.same(summary(planSpuGroup({ ...group, replicas: 1 }, owned(group, [0, 1, 2]))), { create: [], remove: ['main-2', 'main-1'], update: [], message: '1 SPU, ids 0..0' });
  t.same(summary(planSpuGroup({ ...group, replicas: 0 }, owned(group, [0, 1]))), { create: [], remove: ['main-1', 'main-0'], update: [], message: 'no SPUs (replicas 0)' });
});

t.test('an owned SPU whose spec drifted is rewritten with a compare-and-swap on its version', async (t) => {
  const spus = owned(group, [0, 1, 2]);
  const drifted = { ...(spus[1] as SpuView), spec: { ...(spus[1] as SpuView).spec, publicEndpoint: { host: 'elsewhere', port: 1 } } };
  const p = planSpuGroup(group, [spus[0] as SpuView, drifted, spus[2] as SpuView]);
  t.ok(p.resolution === 'Reserved');
  if (p.resolution === 'Reserved') t.same(p.update, [{ name: 'main-1', uid: 'U1', version: '5', spec: managedSpuSpec(group, 1) }]);
});

t.test('an id or name in the range held by an SPU the group does not own makes it Invalid, and nothing changes', async (t) => {
  t.same(planSpuGroup(group, [custom('custom-a', 1), custom('custom-b', 2), custom('far', 9)]), {
    resolution: 'Invalid',
    message: 'SPU ids 0..2 are not free: taken by custom-a (id 1), custom-b (id 2), which this group does not own',
  });
  t.match(planSpuGroup(group, [custom('main-1', 40)]), { resolution: 'Invalid', message: /taken by main-1 \(id 40\)/ }, 'the name is taken');
  const other = { ...group, uid: 'G2' };
  t.match(planSpuGroup(group, owned(other, [0])), { resolution: 'Invalid' }, 'an SPU owned by an older group of the same name is not ours');
  t.match(planSpuGroup({ ...group, replicas: 2 }, [...owned(group, [0, 1]), custom('c', 2)]), { resolution: 'Reserved' }, 'an id just outside the range is fine');
});
