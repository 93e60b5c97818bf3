import { deepStrictEqual } from 'node:assert/strict';
import fc from 'fast-check';
import t from 'tap';
import { RESOURCE_OVERHEAD_BYTES, ResourceStore, jsonBytes, lowWaterBytes, resourceBytes, utf8Length, type ApplyContext } from './index.js';
import { ReferenceStore, SMALL, checkInvariants, contextFor, normalizeReference, outcomeOf, plain, plainAll, resolve, stepsArb, type Command, type Outcome } from './testing/index.js';

/**
 * The deterministic data size (size.ts) and the quota (store.ts `checkSpace`): the incremental
 * `dataBytes` always equals a from-scratch sum (checkInvariants checks it after every step of
 * every property test), and under a quota the store refuses exactly the changes that would grow
 * the data past it, changing nothing when it does.
 */

const type = { group: 'demo', groupVersion: 'v1', kind: 'Artist' };
const tenancy = { partition: 'default', namespace: 'default' };

function ctx(revision: number, quota?: { bytes: number; alarm: boolean }): ApplyContext {
  return { ...contextFor(revision), ...(quota !== undefined ? { quota } : {}) };
}

t.test('utf8Length counts UTF-8 bytes from UTF-16 code units', async (t) => {
  t.equal(utf8Length(''), 0);
  t.equal(utf8Length('abc'), 3);
  t.equal(utf8Length('é'), 2);
  t.equal(utf8Length('€'), 3);
  t.equal(utf8Length('😀'), 4, 'a surrogate pair is one 4-byte code point');
  t.equal(utf8Length('\ud800'), 3, 'a lone surrogate counts as its replacement character');
  t.equal(utf8Length('a\ud800b'), 5);
  for (const s of ['plain', 'naïve café', '日本語', 'mixed 😀 and é']) t.equal(utf8Length(s), new TextEncoder().encode(s).length, `agrees with TextEncoder for ${s}`);
});

t.test('resourceBytes is a fixed function of the content (golden values)', async (t) => {
  t.equal(jsonBytes(null), 1);
  t.equal(jsonBytes(1.5), 9);
  t.equal(jsonBytes('ab'), 4);
  t.equal(jsonBytes({ a: [1, 'x'] }), 5 + 3 + 5 + 9 + 3);
  const s = new ResourceStore();
  const w = s.write({ id: { type, tenancy, name: 'a' }, data: { a: [1, 'x'] }, metadata: { k: 'v' }, finalizers: ['f'] }, ctx(1));
  if (!w.ok) throw w.error;
  const r = w.value.resource;
  // id: demo v1 Artist default default a uid-1; owner null; version; generation gen-1; metadata; finalizers; no deletion; data; status {}
  const id = 6 + 4 + 8 + 9 + 9 + 3 + 7;
  t.equal(resourceBytes(r), RESOURCE_OVERHEAD_BYTES + id + 1 + 9 + 7 + 5 + 6 + 5 + 3 + 1 + 25 + 5, 'the documented formula');
  t.equal(s.dataBytes, resourceBytes(r));
  // The same content built elsewhere (a restored copy: other objects) has the same size.
  const copy = ResourceStore.restore(s.snapshot().toBytes());
  t.equal(copy.dataBytes, s.dataBytes, 'a restored store recomputes the same figure');
  t.not(copy.getByUid('uid-1'), r, 'from other objects');
});

t.test('dataBytes follows inserts, replaces, removes and cascades, back to zero', async (t) => {
  const s = new ResourceStore();
  const owner = s.write({ id: { type, tenancy, name: 'owner' }, data: { big: 'x'.repeat(1000) } }, ctx(1));
  if (!owner.ok) throw owner.error;
  const ownerId = owner.value.resource.id;
  for (let i = 0; i < 5; i++) {
    const c = s.write({ id: { type, tenancy, name: `child-${i}` }, owner: ownerId, data: { i } }, ctx(2 + i));
    if (!c.ok) throw c.error;
  }
  t.equal(checkInvariants(s), null);
  const grown = s.dataBytes;
  const shrink = s.write({ id: { type, tenancy, name: 'owner' }, data: { big: 'x' } }, ctx(10));
  if (!shrink.ok) throw shrink.error;
  // 999 bytes less data; the new generation (gen-10) is one byte longer than the old (gen-1).
  t.equal(grown - s.dataBytes, 998, 'a replace counts the difference');
  const d = s.delete({ id: { type, tenancy, name: 'owner' } }, ctx(11));
  if (!d.ok) throw d.error;
  t.equal(d.value.changes.length, 6, 'the cascade removed the children');
  t.equal(s.dataBytes, 0, 'nothing stored, nothing counted');
  t.equal(s.snapshot().dataBytes, 0);
});

t.test('a snapshot keeps the figure of its moment', async (t) => {
  const s = new ResourceStore();
  s.write({ id: { type, tenancy, name: 'a' }, data: 'x'.repeat(100) }, ctx(1));
  const snap = s.snapshot();
  const before = s.dataBytes;
  s.write({ id: { type, tenancy, name: 'b' }, data: 'y' }, ctx(2));
  t.equal(snap.dataBytes, before);
  t.ok(s.dataBytes > before);
});

t.test('under a quota: growing past it is NO_SPACE with details and changes nothing; shrinking, keeping and deletes pass', async (t) => {
  const s = new ResourceStore();
  const a = s.write({ id: { type, tenancy, name: 'a' }, data: 'x'.repeat(500) }, ctx(1));
  if (!a.ok) throw a.error;
  const quota = s.dataBytes + 100;
  const before = plainAll(s.all());
  const refused = s.write({ id: { type, tenancy, name: 'b' }, data: 'y'.repeat(10) }, ctx(2, { bytes: quota, alarm: false }));
  t.notOk(refused.ok, 'a create that does not fit is refused');
  if (!refused.ok) {
    t.equal(refused.error.code, 'NO_SPACE');
    t.match(refused.error.message, /write demo\.v1\.Artist .*b.*needs \d+ more bytes.*quota of \d+ bytes/);
    t.same(refused.error.details, { quotaBytes: quota, dataBytes: quota - 100, needed: refused.error.details['needed'], alarm: false });
    t.ok((refused.error.details['needed'] as number) > 100);
  }
  deepStrictEqual(plainAll(s.all()), before, 'nothing changed');
  t.equal(s.revision, 2, 'the revision still moves (the entry was applied, as a refusal)');

  const grow = s.write({ id: { type, tenancy, name: 'a' }, data: 'x'.repeat(550) }, ctx(3, { bytes: quota, alarm: false }));
  t.ok(grow.ok, 'growing within the quota passes');
  const over = s.write({ id: { type, tenancy, name: 'a' }, data: 'x'.repeat(700) }, ctx(4, { bytes: quota, alarm: false }));
  t.equal(over.ok ? 'ok' : over.error.code, 'NO_SPACE', 'growing past it does not');

  const alarm = { bytes: quota, alarm: true };
  const small = s.write({ id: { type, tenancy, name: 'a' }, data: 'x'.repeat(551) }, ctx(5, alarm));
  t.equal(small.ok ? 'ok' : small.error.code, 'NO_SPACE', 'while the alarm is raised, no growth at all, even within the quota');
  if (!small.ok) t.match(small.error.message, /NO_SPACE alarm is raised/);
  const same = s.write({ id: { type, tenancy, name: 'a' }, data: 'z'.repeat(550) }, ctx(6, alarm));
  t.ok(same.ok, 'a write that keeps the size passes under the alarm');
  const shrink = s.write({ id: { type, tenancy, name: 'a' }, data: 'z'.repeat(10) }, ctx(7, { bytes: 1, alarm: true }));
  t.ok(shrink.ok, 'a write that shrinks passes even far over the quota');
  const uid = shrink.ok ? shrink.value.resource.id.uid : '';
  const status = s.writeStatus({ id: { type, tenancy, name: 'a', uid }, key: 'c', observedGeneration: 'g', conditions: [] }, ctx(8, { bytes: 1, alarm: true }));
  t.equal(status.ok ? 'ok' : status.error.code, 'NO_SPACE', 'a status write that grows is refused too');
  const fin = s.write({ id: { type, tenancy, name: 'a' }, data: 'z'.repeat(10), finalizers: [] }, ctx(9, { bytes: 1, alarm: true }));
  t.ok(fin.ok);
  const del = s.delete({ id: { type, tenancy, name: 'a' } }, ctx(10, { bytes: 1, alarm: true }));
  t.ok(del.ok && del.value.deleted, 'deletes always pass');
  t.equal(s.dataBytes, 0);
});

t.test('lowWaterBytes is 90% of the quota, in integers', async (t) => {
  t.equal(lowWaterBytes(100), 90);
  t.equal(lowWaterBytes(4 * 1024 * 1024), 4 * 1024 * 1024 - 419430);
  t.equal(lowWaterBytes(9), 9);
});

/**
 * Random command sequences under random quotas and alarm states, run against the naive reference
 * (which knows no quota): the reference applies a command only when the store did. A NO_SPACE
 * must be right (without the quota the command would have grown the data past it, or at all
 * under the alarm) and change nothing; an accepted write or status write must not have grown
 * the data past the quota. The incremental size is checked against a from-scratch sum at every
 * step (checkInvariants).
 */
t.test('property: the quota refuses exactly the growth past it, and dataBytes always equals the sum', async (t) => {
  let refusals = 0;
  let accepted = 0;
  fc.assert(
    fc.property(stepsArb(SMALL, 60), fc.array(fc.record({ quota: fc.integer({ min: 0, max: 4000 }), alarm: fc.boolean(), stamped: fc.boolean() }), { minLength: 60, maxLength: 60 }), (steps, quotas) => {
      const store = new ResourceStore();
      const ref = new ReferenceStore();
      let revision = 0;
      for (const [i, step] of steps.entries()) {
        revision += step.gap;
        const q = quotas[i] as { quota: number; alarm: boolean; stamped: boolean };
        const quota = q.stamped ? { bytes: q.quota, alarm: q.alarm } : undefined;
        const cmd: Command = resolve(SMALL, step.spec, ref);
        const before = store.dataBytes;
        const unlimited = ResourceStore.restore(store.snapshot().toBytes());
        const c = ctx(revision, quota);
        const out = run(store, cmd, c);
        const free = run(unlimited, cmd, ctx(revision));
        if (!out.ok && out.code === 'NO_SPACE') {
          refusals++;
          if (quota === undefined) throw new Error(`step ${i}: NO_SPACE without a quota`);
          if (cmd.op === 'delete') throw new Error(`step ${i}: a delete was refused for space`);
          if (!free.ok) throw new Error(`step ${i}: NO_SPACE for a command that fails anyway (${free.code}); the other check should decide`);
          const grownTo = unlimited.dataBytes;
          if (!(grownTo > before && (quota.alarm || grownTo > quota.bytes))) throw new Error(`step ${i}: NO_SPACE though the result (${grownTo} from ${before}) fits quota ${JSON.stringify(quota)}`);
          if (store.dataBytes !== before) throw new Error(`step ${i}: a refusal changed the size`);
        } else {
          deepStrictEqual(out, free, `step ${i}: with and without the quota, the verdicts differ`);
          const refOut = normalizeReference(runRef(ref, cmd, c));
          deepStrictEqual(out, refOut, `step ${i}: the store and the reference disagree`);
          if (out.ok) accepted++;
          if (quota !== undefined && out.ok && cmd.op !== 'delete' && store.dataBytes > before && (quota.alarm || store.dataBytes > quota.bytes)) {
            throw new Error(`step ${i}: ${cmd.op} grew the data to ${store.dataBytes} past quota ${JSON.stringify(quota)}`);
          }
        }
        if (store.dataBytes !== unlimited.dataBytes && !(!out.ok && out.code === 'NO_SPACE')) throw new Error(`step ${i}: sizes differ from the unlimited copy`);
        deepStrictEqual(plainAll(store.all()), plain(ref.all()), `step ${i}: states differ`);
        const broken = checkInvariants(store);
        if (broken !== null) throw new Error(`step ${i}: ${broken}`);
      }
    }),
    { numRuns: 200 },
  );
  t.ok(refusals > 50, `NO_SPACE happened (${refusals} times)`);
  t.ok(accepted > 500, `commands were accepted (${accepted} times)`);
});

t.test('the from-scratch check catches a store whose size drifts (a checker that cannot fail is a defect)', async (t) => {
  const s = new ResourceStore();
  s.write({ id: { type, tenancy, name: 'a' }, data: { x: 1 } }, ctx(1));
  const drifting = new Proxy(s, {
    get(target, prop, receiver) {
      if (prop === 'dataBytes') return target.dataBytes + 1;
      const v = Reflect.get(target, prop, receiver) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
  t.match(checkInvariants(drifting), /dataBytes is \d+ but the stored resources add up to \d+/);
});

function run(store: ResourceStore, cmd: Command, c: ApplyContext): Outcome {
  switch (cmd.op) {
    case 'write':
      return outcomeOf(store.write(cmd.input, c));
    case 'delete':
      return outcomeOf(store.delete(cmd.input, c));
    case 'status':
      return outcomeOf(store.writeStatus(cmd.input, c));
  }
}

function runRef(ref: ReferenceStore, cmd: Command, c: ApplyContext): ReturnType<ReferenceStore['write']> {
  switch (cmd.op) {
    case 'write':
      return ref.write(cmd.input, c);
    case 'delete':
      return ref.delete(cmd.input, c);
    case 'status':
      return ref.writeStatus(cmd.input, c);
  }
}

