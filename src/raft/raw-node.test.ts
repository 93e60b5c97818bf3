import t from 'tap';
import { TestCluster } from './testing/cluster.js';

t.test('three nodes elect a leader and replicate a command to all', async (t) => {
  const c = new TestCluster({ seed: 7 });
  c.bootstrap(['n1', 'n2', 'n3']);
  t.equal(c.elect('n1'), 'n1');
  c.propose('n1', 'hello');
  c.stabilize();
  for (const id of ['n1', 'n2', 'n3']) t.same(c.appliedCommands(id), ['hello'], `${id} applied it`);
});

t.test('a single node commits on its own', async (t) => {
  const c = new TestCluster();
  c.bootstrap(['n1']);
  t.equal(c.elect('n1'), 'n1');
  c.propose('n1', 'a');
  c.propose('n1', 'b');
  c.stabilize();
  t.same(c.appliedCommands('n1'), ['a', 'b']);
});
