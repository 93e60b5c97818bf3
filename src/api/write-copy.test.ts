import t from 'tap';
import { LocalCluster, testClock } from '../replica/testing/index.js';
import { registerDemoTypes } from './demo-types.js';
import { TypeRegistry } from './registry.js';
import { registryWriteHooks } from './write-hooks.js';
import { ResourceService } from './resource-service.js';
import { runningNode } from './served-node.js';

/**
 * A write's data is copied only for a type's mutate hook (docs/performance.md "CPU per
 * request"): the hook must never edit the caller's object, and a type without one writes the
 * caller's data as given.
 */
t.test("a mutate hook edits a copy, never the caller's data; a type without one stores the data as given", async (t) => {
  const registry = new TypeRegistry();
  registerDemoTypes(registry);
  const cluster = new LocalCluster({ writeHooks: registryWriteHooks(registry) });
  t.teardown(() => cluster.close());
  await cluster.bootstrap(['n1']);
  const leader = await cluster.waitForLeader();
  const svc = new ResourceService(runningNode({ coordinator: leader.coordinator }), registry, testClock);
  const artist = { name: 'Korn' };
  const written = await svc.write({ type: 'demo.v1.Artist', namespace: 'default', name: 'korn', data: artist });
  t.same(written.data, { name: 'Korn', genre: 'unknown' }, 'the hook added its default to what was written');
  t.same(artist, { name: 'Korn' }, "the caller's object is unchanged");
  const album = { title: 'Blue Train', tracks: ['Moment'] };
  const stored = await svc.write({ type: 'demo.v1.Album', namespace: 'default', name: 'blue-train', data: album });
  t.same(stored.data, album, 'no hook: written as given');
  t.same(album, { title: 'Blue Train', tracks: ['Moment'] }, 'and the caller still holds its own object');
  const dated = await svc
    .write({ type: 'demo.v1.Album', namespace: 'default', name: 'dated', data: { title: new Date(Date.UTC(2026, 10, 27)) } })
    .then((r) => r.data);
  t.same(dated, { title: '2026-11-27T00:00:00.000Z' }, 'a non-plain value (a Date) still goes through the JSON round trip, as before');
});
