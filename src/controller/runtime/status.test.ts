import t from 'tap';
import type { CairnClient, Condition, Resource, StatusBody } from '../../client/index.js';
import { sameConditions, writeStatus } from './status.js';

const ok: Condition = { type: 'Accepted', state: 'TRUE', reason: 'Ok', message: '' };

function artist(status: Resource['status'] = {}, generation = 'G1'): Resource<{ name: string }> {
  return {
    id: { type: 'demo.v1.Artist', tenancy: { partition: 'default', namespace: 'default' }, name: 'korn', uid: 'U1' },
    owner: null,
    version: '7',
    generation,
    metadata: {},
    finalizers: [],
    deletion_timestamp: null,
    data: { name: 'Korn' },
    status,
  };
}

function fakeClient(): { client: CairnClient; calls: Array<{ ref: unknown; key: string; body: StatusBody; signal: unknown }> } {
  const calls: Array<{ ref: unknown; key: string; body: StatusBody; signal: unknown }> = [];
  const client = {
    writeStatus: async (ref: unknown, key: string, body: StatusBody, opts: { signal?: AbortSignal }) => {
      calls.push({ ref, key, body, signal: opts.signal });
      return artist({ [key]: { ...body, updated_at: 'now' } });
    },
  } as unknown as CairnClient;
  return { client, calls };
}

t.test('writes the status keyed by the controller, observed_generation = generation, uid and signal passed', async (t) => {
  const { client, calls } = fakeClient();
  const signal = new AbortController().signal;
  const r = await writeStatus({ client, signal, controllerName: 'demo.v1.artist-controller' }, artist(), [ok]);
  t.equal(r.written, true);
  t.equal(calls.length, 1);
  t.same(calls[0]?.ref, { type: 'demo.v1.Artist', tenancy: { partition: 'default', namespace: 'default' }, name: 'korn', uid: 'U1' });
  t.equal(calls[0]?.key, 'demo.v1.artist-controller');
  t.same(calls[0]?.body, { observed_generation: 'G1', conditions: [ok] });
  t.equal(calls[0]?.signal, signal);
  t.ok(r.resource.status['demo.v1.artist-controller']);
});

t.test('skips the write when the stored status already says it for this generation', async (t) => {
  const { client, calls } = fakeClient();
  const ctx = { client, signal: new AbortController().signal, controllerName: 'c' };
  const current = artist({ c: { observed_generation: 'G1', conditions: [ok], updated_at: 'then' } });
  const r = await writeStatus(ctx, current, [{ ...ok }]);
  t.equal(r.written, false);
  t.equal(r.resource, current);
  t.equal(calls.length, 0);
  await writeStatus(ctx, artist({ c: { observed_generation: 'G0', conditions: [ok], updated_at: 'then' } }), [ok]);
  t.equal(calls.length, 1, 'an older observed_generation is rewritten');
  await writeStatus(ctx, current, [{ ...ok, message: 'changed' }]);
  t.equal(calls.length, 2, 'changed conditions are written');
  await writeStatus(ctx, artist({ other: { observed_generation: 'G1', conditions: [ok], updated_at: 'then' } }), [ok]);
  t.equal(calls.length, 3, "another controller's key does not count");
  await writeStatus(ctx, current, [ok], { key: 'd' });
  t.equal(calls.at(-1)?.key, 'd', 'opts.key overrides the controller name');
});

t.test('needs a key and a uid', async (t) => {
  const { client } = fakeClient();
  const signal = new AbortController().signal;
  await t.rejects(writeStatus({ client, signal }, artist(), [ok]), /needs a status key/);
  const noUid = { ...artist(), id: { ...artist().id, uid: '' } };
  await t.rejects(writeStatus({ client, signal, controllerName: 'c' }, noUid, [ok]), /needs the resource's uid/);
});

t.test('sameConditions compares every field, in order', async (t) => {
  const b: Condition = { type: 'Ready', state: 'FALSE', reason: 'Waiting', message: 'x' };
  t.ok(sameConditions([ok, b], [{ ...ok }, { ...b }]));
  t.notOk(sameConditions([ok, b], [b, ok]));
  t.notOk(sameConditions([ok], [ok, b]));
  for (const k of ['type', 'state', 'reason', 'message'] as const) t.notOk(sameConditions([ok], [{ ...ok, [k]: k === 'state' ? 'FALSE' : 'other' }]), k);
});
