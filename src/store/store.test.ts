import t from 'tap';
import type { CairnError, Result, Revision } from '../base/index.js';
import {
  ResourceStore,
  type ApplyContext,
  type ChangeRecord,
  type JsonValue,
  type Resource,
  type ResourceId,
  type Tenancy,
  type TypeRef,
  type WriteInput,
} from './index.js';
import { checkInvariants } from './testing/index.js';

/**
 * One test per rule of API.md's resource model ("Resources" and the operations table), each
 * named after the rule it checks.
 */

const ARTIST_V1: TypeRef = { group: 'demo', groupVersion: 'v1', kind: 'Artist' };
const ARTIST_V2: TypeRef = { group: 'demo', groupVersion: 'v2', kind: 'Artist' };
const ALBUM: TypeRef = { group: 'demo', groupVersion: 'v1', kind: 'Album' };
const NS: Tenancy = { partition: 'default', namespace: 'default' };

/** A store with a log: every command gets the next revision and a context derived from it. */
class Harness {
  readonly store = new ResourceStore();
  revision = 0;

  ctx(): ApplyContext {
    this.revision++;
    const r = this.revision;
    return { revision: r as Revision, time: `2026-11-21T10:00:${String(r).padStart(2, '0')}.000Z`, newUid: `uid-${r}`, newGeneration: `gen-${r}` };
  }

  write(name: string, data: JsonValue, extra: Partial<Omit<WriteInput, 'data'>> & { type?: TypeRef; tenancy?: Tenancy; uid?: string } = {}): Result<{ resource: Resource; changed: boolean; changes: readonly ChangeRecord[] }, CairnError> {
    const { type, tenancy, uid, id, ...rest } = extra;
    return this.store.write(
      {
        id: id ?? { type: type ?? ARTIST_V1, tenancy: tenancy ?? NS, name, ...(uid !== undefined ? { uid } : {}) },
        data,
        ...rest,
      },
      this.ctx(),
    );
  }

  /** Writes and expects success. */
  put(name: string, data: JsonValue, extra: Parameters<Harness['write']>[2] = {}): Resource {
    const r = this.write(name, data, extra);
    if (!r.ok) throw new Error(`write ${name} failed: ${r.error.message}`);
    return r.value.resource;
  }

  delete(name: string, extra: { type?: TypeRef; uid?: string; expectedVersion?: Revision } = {}): ReturnType<ResourceStore['delete']> {
    return this.store.delete(
      { id: { type: extra.type ?? ARTIST_V1, tenancy: NS, name, ...(extra.uid !== undefined ? { uid: extra.uid } : {}) }, ...(extra.expectedVersion !== undefined ? { expectedVersion: extra.expectedVersion } : {}) },
      this.ctx(),
    );
  }

  status(r: Resource, key: string, observedGeneration: string, extra: { expectedVersion?: Revision; uid?: string } = {}): ReturnType<ResourceStore['writeStatus']> {
    return this.store.writeStatus(
      {
        id: { type: r.id.type, tenancy: r.id.tenancy, name: r.id.name, uid: extra.uid ?? r.id.uid },
        key,
        observedGeneration,
        conditions: [{ type: 'Accepted', state: 'TRUE', reason: 'Ok', message: '' }],
        ...(extra.expectedVersion !== undefined ? { expectedVersion: extra.expectedVersion } : {}),
      },
      this.ctx(),
    );
  }

  get(name: string, type: TypeRef = ARTIST_V1): Resource | undefined {
    return this.store.get({ group: type.group, kind: type.kind, tenancy: NS, name });
  }
}

const rev = (n: number): Revision => n as Revision;

function code(r: Result<unknown, CairnError>): string {
  return r.ok ? 'ok' : r.error.code;
}

t.test('uid is assigned by the server on create; a client-supplied uid on create is ignored', async (t) => {
  const h = new Harness();
  const r = h.put('korn', { name: 'Korn' }, { uid: 'client-chose-this' });
  t.equal(r.id.uid, 'uid-1', 'the uid comes from the command context');
  t.equal(h.store.getByUid('uid-1'), r);
  t.equal(h.store.getByUid('client-chose-this'), undefined);
});

t.test('deleting and re-creating a name gives a new uid', async (t) => {
  const h = new Harness();
  const first = h.put('korn', 1);
  t.equal(code(h.delete('korn')), 'ok');
  const second = h.put('korn', 1);
  t.not(second.id.uid, first.id.uid);
  t.equal(h.store.getByUid(first.id.uid), undefined, 'the old uid is gone from the uid index');
});

t.test('version is the revision (log index) of the resource\'s last change', async (t) => {
  const h = new Harness();
  t.equal(h.put('korn', 1).version, 1);
  h.revision = 41; // entries 2..41 touched other things
  t.equal(h.put('korn', 2).version, 42);
  t.equal(h.put('other', 1).version, 43);
  t.equal(h.get('korn')?.version, 42, 'an unrelated change does not move the version');
});

t.test('identity is (group, kind, tenancy, name): the group version is an attribute, and a write may change it', async (t) => {
  const h = new Harness();
  const v1 = h.put('korn', { name: 'Korn' });
  const w = h.write('korn', { name: 'Korn' }, { type: ARTIST_V2 });
  t.ok(w.ok);
  if (!w.ok) return;
  t.equal(w.value.changed, true, 'a group version change is a change');
  t.equal(w.value.resource.id.uid, v1.id.uid, 'same resource');
  t.same(w.value.resource.id.type, ARTIST_V2);
  t.equal(w.value.resource.version, 2, 'new version');
  t.equal(w.value.resource.generation, v1.generation, 'generation unchanged: data, metadata, owner and finalizers are the same');
  t.equal(h.store.size, 1, 'still one resource');
  t.equal(h.put('korn', 1, { tenancy: { partition: 'default', namespace: 'other' } }).id.uid, 'uid-3', 'another namespace is another identity');
});

t.test('a write naming a uid that is not the stored one is UID_MISMATCH', async (t) => {
  const h = new Harness();
  const r = h.put('korn', 1);
  const w = h.write('korn', 2, { uid: 'uid-999' });
  t.equal(code(w), 'UID_MISMATCH');
  if (!w.ok) t.same({ ...w.error.details }, { expected: 'uid-999', actual: r.id.uid });
  t.equal(code(h.write('korn', 2, { uid: r.id.uid })), 'ok', 'the stored uid is accepted');
  t.equal(code(h.write('korn', 3, { uid: '' })), 'ok', "'' means no uid (the proto3 default)");
});

t.test('version absent: unconditional upsert', async (t) => {
  const h = new Harness();
  t.equal(code(h.write('korn', 1)), 'ok', 'creates');
  t.equal(code(h.write('korn', 2)), 'ok', 'updates whatever the stored version is');
  t.equal(h.get('korn')?.data, 2);
});

t.test('version 0: create only', async (t) => {
  const h = new Harness();
  t.equal(code(h.write('korn', 1, { expectedVersion: rev(0) })), 'ok', 'creates when absent');
  const again = h.write('korn', 2, { expectedVersion: rev(0) });
  t.equal(code(again), 'CAS_FAILED', 'refused when it exists');
  if (!again.ok) t.same({ ...again.error.details }, { expected: 0, actual: 1 });
  t.equal(h.get('korn')?.data, 1, 'unchanged');
});

t.test('version N: compare-and-swap, applied only if it equals the stored version', async (t) => {
  const h = new Harness();
  h.put('korn', 1);
  const stale = h.write('korn', 2, { expectedVersion: rev(7) });
  t.equal(code(stale), 'CAS_FAILED');
  if (!stale.ok) {
    t.same({ ...stale.error.details }, { expected: 7, actual: 1 });
    t.match(stale.error.message, /expected version 7 but the stored version is 1/);
  }
  t.equal(code(h.write('korn', 2, { expectedVersion: rev(1) })), 'ok', 'matching version applies');
  t.equal(h.get('korn')?.version, 3);
  const absent = h.write('nobody', 1, { expectedVersion: rev(5) });
  t.equal(code(absent), 'CAS_FAILED', 'a version on an absent resource fails');
  if (!absent.ok) t.same({ ...absent.error.details }, { expected: 5, actual: 0 });
});

t.test('generation changes when data, metadata, owner or finalizers change (deep structural equality)', async (t) => {
  const h = new Harness();
  const a = h.put('korn', { name: 'Korn', tags: ['a', 'b'] }, { metadata: { team: 'a' } });
  t.equal(a.generation, 'gen-1');
  const same = h.write('korn', { tags: ['a', 'b'], name: 'Korn' }, { metadata: { team: 'a' } });
  t.ok(same.ok && !same.value.changed, 'the same JSON with other key order is no change');
  t.equal(h.put('korn', { name: 'Korn', tags: ['b', 'a'] }).generation, 'gen-3', 'data changed (array order matters)');
  t.equal(h.put('korn', { name: 'Korn', tags: ['b', 'a'] }, { metadata: { team: 'b' } }).generation, 'gen-4', 'metadata changed');
  t.equal(h.put('korn', { name: 'Korn', tags: ['b', 'a'] }, { finalizers: ['x'] }).generation, 'gen-5', 'finalizers changed');
  t.equal(h.put('korn', { name: 'Korn', tags: ['b', 'a'] }, { finalizers: [] }).generation, 'gen-6', 'finalizers changed again');
  // The owner is fixed after creation; setting one at creation is part of the first generation.
  const child = h.put('child', 1, { owner: h.get('korn')?.id ?? null });
  t.equal(child.generation, 'gen-7');
});

t.test('generation does not change on status writes; version does', async (t) => {
  const h = new Harness();
  const r = h.put('korn', 1);
  const s = h.status(r, 'ctrl', r.generation);
  t.ok(s.ok);
  if (!s.ok) return;
  t.equal(s.value.resource.generation, r.generation);
  t.equal(s.value.resource.version, 2);
});

t.test('a write that changes nothing returns the stored resource as it is: no new version, no event', async (t) => {
  const h = new Harness();
  const r = h.put('korn', { a: 1 }, { metadata: { m: 'x' }, finalizers: ['f'] });
  const w = h.write('korn', { a: 1 }, { metadata: { m: 'x' }, finalizers: ['f'] });
  t.ok(w.ok);
  if (!w.ok) return;
  t.equal(w.value.changed, false);
  t.equal(w.value.resource, r, 'the very stored object');
  t.same(w.value.changes, [], 'no change record');
  const keep = h.write('korn', { a: 1 });
  t.ok(keep.ok && !keep.value.changed, 'absent metadata and finalizers keep the stored ones');
  t.equal(h.get('korn')?.version, 1);
});

t.test('status is written only through WriteStatus: Write may pass the stored status back unchanged or leave it out', async (t) => {
  const h = new Harness();
  const r = h.put('korn', 1);
  const s = h.status(r, 'ctrl', r.generation);
  if (!s.ok) {
    t.fail('status write failed');
    return;
  }
  const stored = s.value.resource.status;
  t.equal(code(h.write('korn', 2, { status: JSON.parse(JSON.stringify(stored)) as typeof stored })), 'ok', 'an equal copy of the stored status');
  t.equal(code(h.write('korn', 3)), 'ok', 'status left out');
  t.same(h.get('korn')?.status, stored, 'status kept');
  t.equal(code(h.write('new', 1, { status: {} })), 'ok', 'an empty status on create');
});

t.test('status is written only through WriteStatus: changing it through Write is refused', async (t) => {
  const h = new Harness();
  h.put('korn', 1);
  const w = h.write('korn', 2, { status: { ctrl: { observedGeneration: 'x', conditions: [], updatedAt: 'now' } } });
  t.equal(code(w), 'INVALID_ARGUMENT');
  if (!w.ok) t.match(w.error.message, /status is written only through WriteStatus/);
  t.equal(code(h.write('new', 1, { status: { ctrl: { observedGeneration: 'x', conditions: [], updatedAt: 'now' } } })), 'INVALID_ARGUMENT', 'also on create');
  t.equal(h.get('korn')?.data, 1);
});

t.test('owner may be set only at creation and never changed', async (t) => {
  const h = new Harness();
  const parent = h.put('parent', 1);
  const other = h.put('other', 1);
  const child = h.put('child', 1, { owner: parent.id });
  t.same(child.owner, parent.id);
  t.equal(code(h.write('child', 2)), 'ok', 'an absent owner on update keeps the owner');
  t.same(h.get('child')?.owner, parent.id);
  t.equal(code(h.write('child', 3, { owner: { ...parent.id, type: ARTIST_V2 } })), 'ok', 'the same owner (another group version of its type) is no change');
  t.equal(code(h.write('child', 4, { owner: other.id })), 'INVALID_ARGUMENT', 'another owner');
  t.equal(code(h.write('child', 4, { owner: null })), 'INVALID_ARGUMENT', 'removing the owner');
  t.equal(code(h.write('other', 2, { owner: parent.id })), 'INVALID_ARGUMENT', 'adding an owner after creation');
  t.equal(code(h.write('other', 2, { owner: null })), 'ok', 'null on a resource without owner is no change');
});

t.test('the owner must exist when the child is created', async (t) => {
  const h = new Harness();
  const ghost: ResourceId = { type: ARTIST_V1, tenancy: NS, name: 'ghost', uid: 'uid-ghost' };
  const w = h.write('child', 1, { owner: ghost });
  t.equal(code(w), 'INVALID_ARGUMENT');
  if (!w.ok) t.match(w.error.message, /owner demo\.v1\.Artist default\/default\/ghost \(uid uid-ghost\) does not exist/);
  const parent = h.put('parent', 1);
  const wrongUid = h.write('child', 1, { owner: { ...parent.id, uid: 'uid-old' } });
  t.equal(code(wrongUid), 'INVALID_ARGUMENT', 'an owner reference whose uid is not the stored one');
  if (!wrongUid.ok) t.match(wrongUid.error.message, /parent \(uid uid-old\) does not exist; the stored one has uid uid-2/);
  t.equal(h.store.size, 1);
});

t.test('deleting an owner deletes everything it owns, recursively, in the same committed entry', async (t) => {
  const h = new Harness();
  const root = h.put('root', 1);
  const b = h.put('b', 1, { owner: root.id });
  const a = h.put('a', 1, { owner: root.id });
  const z = h.put('z', 1, { owner: root.id, type: ALBUM });
  const a1 = h.put('a1', 1, { owner: a.id });
  const unrelated = h.put('unrelated', 1);
  const d = h.delete('root');
  t.ok(d.ok);
  if (!d.ok) return;
  t.equal(d.value.deleted, true);
  t.equal(d.value.resource, root, 'the result carries the last stored state');
  t.same(
    d.value.changes.map((c) => [c.kind, c.resource.id.type.kind, c.resource.id.name]),
    [
      ['delete', 'Artist', 'root'],
      ['delete', 'Album', 'z'], // children in key order: demo/Album sorts before demo/Artist
      ['delete', 'Artist', 'a'],
      ['delete', 'Artist', 'a1'], // depth first
      ['delete', 'Artist', 'b'],
    ],
    'parent first, then children depth-first in key order',
  );
  t.ok(d.value.changes.every((c) => c.revision === 7), 'every record carries the one revision');
  t.equal(d.value.changes[1]?.resource, z, 'a delete record carries the last stored state');
  t.equal(h.store.size, 1);
  t.equal(h.store.getByUid(unrelated.id.uid), unrelated);
  for (const gone of [root, a, b, z, a1]) t.equal(h.store.getByUid(gone.id.uid), undefined);
  t.same(h.store.listByOwner(root.id.uid), []);
  t.same(h.store.listByOwner(a.id.uid), []);
  t.equal(checkInvariants(h.store), null);
});

t.test('finalizers: deleting a resource with finalizers only sets deletion_timestamp', async (t) => {
  const h = new Harness();
  const r = h.put('korn', 1, { finalizers: ['cleanup'] });
  const d = h.delete('korn');
  t.ok(d.ok);
  if (!d.ok) return;
  t.equal(d.value.deleted, false, 'not removed');
  const marked = d.value.resource;
  t.equal(marked?.deletionTimestamp, '2026-11-21T10:00:02.000Z', 'the time stamped by the leader');
  t.equal(marked?.version, 2, 'a new version');
  t.equal(marked?.generation, 'gen-2', 'a new generation (as Kubernetes does when deletion starts)');
  t.equal(marked?.id.uid, r.id.uid);
  t.same(d.value.changes.map((c) => c.kind), ['upsert']);
  t.equal(h.get('korn'), marked);
  const again = h.delete('korn');
  t.ok(again.ok && !again.value.deleted && again.value.changes.length === 0, 'deleting again changes nothing');
  t.equal(h.get('korn')?.deletionTimestamp, '2026-11-21T10:00:02.000Z', 'the first deletion timestamp stands');
});

t.test('finalizers: while deletion_timestamp is set, the only write accepted removes finalizers', async (t) => {
  const h = new Harness();
  h.put('korn', { a: 1 }, { finalizers: ['f1', 'f2'], metadata: { m: 'x' } });
  h.delete('korn');
  for (const [what, w] of [
    ['data', h.write('korn', { a: 2 }, { finalizers: ['f1'] })],
    ['metadata', h.write('korn', { a: 1 }, { metadata: { m: 'y' }, finalizers: ['f1'] })],
    ['group version', h.write('korn', { a: 1 }, { type: ARTIST_V2, finalizers: ['f1'] })],
    ['adding a finalizer', h.write('korn', { a: 1 }, { finalizers: ['f1', 'f2', 'f3'] })],
    ['replacing a finalizer', h.write('korn', { a: 1 }, { finalizers: ['f3'] })],
  ] as const) {
    t.equal(code(w), 'INVALID_ARGUMENT', `refused: changing ${what}`);
    if (!w.ok) t.match(w.error.message, /is being deleted .*the only write accepted removes finalizers/);
  }
  const noop = h.write('korn', { a: 1 });
  t.ok(noop.ok && !noop.value.changed, 'a write that changes nothing is fine');
  const removeOne = h.write('korn', { a: 1 }, { finalizers: ['f2'] });
  t.ok(removeOne.ok && removeOne.value.changed, 'removing a finalizer is accepted');
  t.same(h.get('korn')?.finalizers, ['f2']);
  t.not(h.get('korn')?.deletionTimestamp, null, 'still being deleted');
});

t.test('finalizers: when the last one is removed, the resource is deleted (in the same command, with its owned resources)', async (t) => {
  const h = new Harness();
  const r = h.put('korn', { a: 1 }, { finalizers: ['f1'] });
  h.put('child', 1, { owner: r.id });
  h.delete('korn');
  t.equal(h.store.size, 2, 'the marked owner keeps its children');
  const w = h.write('korn', { a: 1 }, { finalizers: [] });
  t.ok(w.ok);
  if (!w.ok) return;
  t.equal(w.value.changed, true);
  t.same(
    w.value.changes.map((c) => [c.kind, c.resource.id.name]),
    [
      ['delete', 'korn'],
      ['delete', 'child'],
    ],
  );
  t.same(w.value.resource.finalizers, [], 'the result (and the delete record) carries the last state: no finalizers');
  t.equal(w.value.changes[0]?.resource, w.value.resource);
  t.equal(w.value.resource.version, 4, 'the revision of the write');
  t.equal(h.store.size, 0);
});

t.test('a cascade marks owned resources that have finalizers instead of removing them', async (t) => {
  const h = new Harness();
  const root = h.put('root', 1);
  const held = h.put('held', 1, { owner: root.id, finalizers: ['f'] });
  h.put('grandchild', 1, { owner: held.id });
  h.put('plain', 1, { owner: root.id });
  const d = h.delete('root');
  if (!d.ok) {
    t.fail('delete failed');
    return;
  }
  t.same(
    d.value.changes.map((c) => [c.kind, c.resource.id.name, c.resource.deletionTimestamp]),
    [
      ['delete', 'root', null],
      ['upsert', 'held', '2026-11-21T10:00:05.000Z'],
      ['delete', 'plain', null],
    ],
  );
  t.same(
    [...h.store.all()].map((r) => r.id.name),
    ['grandchild', 'held'],
    'the held child and (until it goes) its own children remain',
  );
  t.equal(checkInvariants(h.store), null, 'a marked child may outlive its owner; nothing else may');
  const done = h.write('held', 1, { finalizers: [] });
  if (!done.ok) {
    t.fail('finalizer removal failed');
    return;
  }
  t.same(
    done.value.changes.map((c) => [c.kind, c.resource.id.name]),
    [
      ['delete', 'held'],
      ['delete', 'grandchild'],
    ],
  );
  t.equal(h.store.size, 0);
});

t.test('Delete: deleting what does not exist succeeds with deleted: false', async (t) => {
  const h = new Harness();
  const d = h.delete('nobody');
  t.same(d.ok && d.value, { deleted: false, resource: null, changes: [] });
  h.put('korn', 1);
  const wrongUid = h.delete('korn', { uid: 'uid-old' });
  t.same(wrongUid.ok && wrongUid.value, { deleted: false, resource: null, changes: [] }, 'a uid that is not the stored one: that resource is gone');
  t.equal(h.store.size, 1);
  t.same(h.delete('nobody', { expectedVersion: rev(3) }).ok, true, 'with a version too');
});

t.test('Delete with version: compare-and-swap', async (t) => {
  const h = new Harness();
  h.put('korn', 1);
  const d = h.delete('korn', { expectedVersion: rev(9) });
  t.equal(code(d), 'CAS_FAILED');
  if (!d.ok) t.same({ ...d.error.details }, { expected: 9, actual: 1 });
  t.equal(h.store.size, 1);
  const ok = h.delete('korn', { expectedVersion: rev(1) });
  t.ok(ok.ok && ok.value.deleted);
});

t.test('WriteStatus sets one status key; other keys are kept; updated_at is set by the server; generation unchanged, version changes', async (t) => {
  const h = new Harness();
  const r = h.put('korn', 1);
  const a = h.status(r, 'ctrl-a', r.generation);
  const b = h.status(r, 'ctrl-b', 'older');
  if (!a.ok || !b.ok) {
    t.fail('status writes failed');
    return;
  }
  const s = b.value.resource;
  t.same(Object.keys(s.status), ['ctrl-a', 'ctrl-b']);
  t.same(s.status['ctrl-a'], a.value.resource.status['ctrl-a'], 'other keys are kept');
  t.same(s.status['ctrl-b'], {
    observedGeneration: 'older',
    conditions: [{ type: 'Accepted', state: 'TRUE', reason: 'Ok', message: '' }],
    updatedAt: '2026-11-21T10:00:03.000Z',
  });
  t.equal(s.generation, r.generation);
  t.equal(s.version, 3);
  t.same(b.value.changes.map((c) => c.kind), ['upsert']);
  const same = h.status(r, 'ctrl-b', 'older');
  t.ok(same.ok && same.value.resource.version === 4, 'the same report again still changes updated_at, so it is a change');
});

t.test('WriteStatus: the uid is required and a missing resource or another uid is NOT_FOUND; version is CAS', async (t) => {
  const h = new Harness();
  const r = h.put('korn', 1);
  t.equal(code(h.status(r, 'ctrl', 'g', { uid: 'uid-old' })), 'NOT_FOUND', 'another uid');
  t.equal(code(h.status(r, 'ctrl', 'g', { uid: '' })), 'NOT_FOUND', 'no uid');
  t.equal(code(h.status({ ...r, id: { ...r.id, name: 'nobody' } }, 'ctrl', 'g')), 'NOT_FOUND', 'absent');
  const cas = h.status(r, 'ctrl', 'g', { expectedVersion: rev(7) });
  t.equal(code(cas), 'CAS_FAILED');
  if (!cas.ok) t.same({ ...cas.error.details }, { expected: 7, actual: 1 });
  t.equal(code(h.status(r, 'ctrl', 'g', { expectedVersion: rev(1) })), 'ok');
  t.equal(code(h.status(r, 'ctrl', 'g', { expectedVersion: rev(0) })), 'CAS_FAILED', 'version 0 never matches an existing resource');
});

t.test('WriteStatus keeps the stored group version and works while the resource is being deleted', async (t) => {
  const h = new Harness();
  const r = h.put('korn', 1, { finalizers: ['f'] });
  h.delete('korn');
  const s = h.store.writeStatus({ id: { ...r.id, type: ARTIST_V2 }, key: 'ctrl', observedGeneration: 'g', conditions: [] }, h.ctx());
  t.ok(s.ok);
  t.same(h.get('korn')?.id.type, ARTIST_V1);
});

t.test('Read: a uid that does not match is NotFound', async (t) => {
  const h = new Harness();
  const r = h.put('korn', 1);
  t.equal(h.store.read({ type: ARTIST_V1, tenancy: NS, name: 'korn', uid: r.id.uid }).ok, true);
  t.equal(h.store.read({ type: ARTIST_V1, tenancy: NS, name: 'korn' }).ok, true, 'no uid');
  t.equal(code(h.store.read({ type: ARTIST_V1, tenancy: NS, name: 'korn', uid: 'uid-old' })), 'NOT_FOUND');
  const absent = h.store.read({ type: ARTIST_V1, tenancy: NS, name: 'nobody' });
  t.equal(code(absent), 'NOT_FOUND');
  if (!absent.ok) t.match(absent.error.message, /read demo\.v1\.Artist default\/default\/nobody: no such resource/);
});

t.test('Read with a different group version of a stored resource is GROUP_VERSION_MISMATCH, carrying the stored type', async (t) => {
  const h = new Harness();
  h.put('korn', 1, { type: ARTIST_V2 });
  const r = h.store.read({ type: ARTIST_V1, tenancy: NS, name: 'korn' });
  t.equal(code(r), 'GROUP_VERSION_MISMATCH');
  if (!r.ok) t.equal(r.error.details['stored_type'], 'demo.v2.Artist');
  t.equal(h.store.read({ type: ARTIST_V2, tenancy: NS, name: 'korn' }).ok, true);
});

t.test('List: * in partition or namespace is a wildcard; a type without group version matches every version; sorted by (partition, namespace, name)', async (t) => {
  const h = new Harness();
  const at = (partition: string, namespace: string): Tenancy => ({ partition, namespace });
  h.put('b', 1, { tenancy: at('p1', 'n1') });
  h.put('a', 1, { tenancy: at('p1', 'n2'), type: ARTIST_V2 });
  h.put('ab', 1, { tenancy: at('p1', 'n1') });
  h.put('a', 1, { tenancy: at('p2', 'n1') });
  h.put('a', 1, { tenancy: at('p1', 'n1'), type: ALBUM });
  const names = (q: Partial<Parameters<ResourceStore['list']>[0]>): string[] =>
    h.store.list({ group: 'demo', kind: 'Artist', partition: '*', namespace: '*', ...q }).map((r) => `${r.id.tenancy.partition}/${r.id.tenancy.namespace}/${r.id.name}`);
  t.same(names({}), ['p1/n1/ab', 'p1/n1/b', 'p1/n2/a', 'p2/n1/a'], 'every tenancy, every version, sorted');
  t.same(names({ partition: 'p1' }), ['p1/n1/ab', 'p1/n1/b', 'p1/n2/a']);
  t.same(names({ namespace: 'n1' }), ['p1/n1/ab', 'p1/n1/b', 'p2/n1/a']);
  t.same(names({ partition: 'p1', namespace: 'n1' }), ['p1/n1/ab', 'p1/n1/b']);
  t.same(names({ namePrefix: 'a' }), ['p1/n1/ab', 'p1/n2/a', 'p2/n1/a']);
  t.same(names({ partition: 'p1', namespace: 'n1', namePrefix: 'a' }), ['p1/n1/ab']);
  t.same(names({ groupVersion: 'v2' }), ['p1/n2/a']);
  t.same(names({ groupVersion: 'v1' }), ['p1/n1/ab', 'p1/n1/b', 'p2/n1/a']);
  t.same(names({ partition: 'p' }), [], 'a partition is not a prefix');
});

t.test('List by owner uid', async (t) => {
  const h = new Harness();
  const p = h.put('parent', 1);
  h.put('c2', 1, { owner: p.id });
  h.put('c1', 1, { owner: p.id });
  h.put('c3', 1, { owner: p.id, type: ALBUM });
  h.put('stranger', 1);
  t.same(
    h.store.list({ group: 'demo', kind: 'Artist', partition: '*', namespace: '*', ownerUid: p.id.uid }).map((r) => r.id.name),
    ['c1', 'c2'],
  );
  t.same(
    h.store.listByOwner(p.id.uid).map((r) => r.id.name),
    ['c3', 'c1', 'c2'],
    'listByOwner: every type, in key order',
  );
  t.same(h.store.listByOwner('uid-nobody'), []);
});

t.test('List reflects the store revision: the FSM sets it for every applied entry', async (t) => {
  const h = new Harness();
  h.put('korn', 1);
  t.equal(h.store.revision, 1);
  h.store.setRevision(rev(5)); // entries 2..5 were no-ops or configuration changes
  t.equal(h.store.revision, 5);
  h.revision = 5;
  h.write('korn', 1, { expectedVersion: rev(99) }); // refused, still applied
  t.equal(h.store.revision, 6);
  t.throws(() => h.store.setRevision(rev(4)), /may only move forward/, 'going back is a bug');
});

t.test('stored resources are immutable and inputs are copied', async (t) => {
  const h = new Harness();
  const data = { list: [1, 2], nested: { x: 1 } };
  const metadata = { team: 'a' };
  const finalizers = ['f'];
  const r = h.put('korn', data, { metadata, finalizers });
  data.list.push(3);
  data.nested.x = 2;
  metadata.team = 'b';
  finalizers.push('g');
  t.same(h.get('korn')?.data, { list: [1, 2], nested: { x: 1 } }, 'the caller mutating its input does not reach the store');
  t.same(h.get('korn')?.metadata, { team: 'a' });
  t.same(h.get('korn')?.finalizers, ['f']);
  t.ok(Object.isFrozen(r) && Object.isFrozen(r.data) && Object.isFrozen((r.data as { list: unknown }).list) && Object.isFrozen(r.id.type));
  t.throws(() => {
    (r.finalizers as string[]).push('x');
  }, TypeError);
});

t.test('malformed input is INVALID_ARGUMENT, never a crash', async (t) => {
  const h = new Harness();
  const cases: Array<[string, Parameters<Harness['write']>[1], Parameters<Harness['write']>[2]]> = [
    ['non-finite number', { x: Number.NaN }, {}],
    ['non-JSON value', { x: new Date(0) as unknown as JsonValue }, {}],
    ['__proto__ key', JSON.parse('{"__proto__": 1}') as JsonValue, {}],
    ['duplicate finalizer', 1, { finalizers: ['f', 'f'] }],
    ['empty finalizer', 1, { finalizers: [''] }],
    ['NUL in a name', 1, { id: { type: ARTIST_V1, tenancy: NS, name: 'a\u0000b' } }],
    ['empty name', 1, { id: { type: ARTIST_V1, tenancy: NS, name: '' } }],
    ['non-string metadata', 1, { metadata: { a: 1 as unknown as string } }],
    ['negative version', 1, { expectedVersion: -1 as Revision }],
  ];
  let deep: JsonValue = 1;
  for (let i = 0; i < 200; i++) deep = [deep];
  cases.push(['too deep', deep, {}]);
  for (const [what, data, extra] of cases) {
    const w = h.write('korn', data, extra);
    t.equal(code(w), 'INVALID_ARGUMENT', what);
  }
  t.equal(h.store.size, 0);
});
