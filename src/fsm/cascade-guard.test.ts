import t, { type Test } from 'tap';
import type { LogIndex, Term } from '../base/index.js';
import type { Entry } from '../raft/index.js';
import type { Resource, ResourceId } from '../store/index.js';
import { Fsm, CommandType, encodeEnvelope, type ApplyResult } from './index.js';

/**
 * The cascade guard (docs/security.md "Cascades", issue 16 item 2): a delete by a restricted
 * caller carries `cascadeAllowed`, the uids the api checked the caller may delete; the state
 * machine refuses it (CAS_FAILED, details.cascade_changed) when the cascade now reaches a uid
 * that is not listed, and applies it when every reached uid is listed. The same holds for a
 * write that removes the last finalizer of a resource being deleted (that write deletes it).
 * Driven through whole log entries (validation, the fsm and the store), on two replicas that
 * must reach the same verdicts.
 */

const ARTIST = { group: 'demo', groupVersion: 'v1', kind: 'Artist' };
const ALBUM = { group: 'demo', groupVersion: 'v1', kind: 'Album' };
const A = { partition: 'default', namespace: 'team-a' };
const B = { partition: 'default', namespace: 'team-b' };

/** Two replicas fed the same entries: every verdict is asserted equal on both (determinism). */
class Log {
  readonly fsms = [new Fsm(), new Fsm()];
  index = 0;
  private seq = 0;

  apply(type: number, body: Record<string, unknown>): ApplyResult {
    this.index++;
    this.seq++;
    const e: Entry = {
      index: this.index as LogIndex,
      term: 1 as Term,
      data: encodeEnvelope(type, { time: `2026-11-27T07:00:${String(this.seq % 60).padStart(2, '0')}.000Z`, uid: `uid-${this.seq}`, generation: `gen-${this.seq}`, ...body }),
    };
    const [r0, r1] = this.fsms.map((f) => f.apply(e).result) as [ApplyResult, ApplyResult];
    if (JSON.stringify(r0) !== JSON.stringify(r1)) throw new Error(`replicas disagree at ${this.index}: ${JSON.stringify(r0)} vs ${JSON.stringify(r1)}`);
    return r0;
  }

  put(type: typeof ARTIST, tenancy: typeof A, name: string, extra: Record<string, unknown> = {}): Resource {
    const r = this.apply(CommandType.ResourceWrite, { id: { type, tenancy, name }, data: { name }, ...extra });
    if (!r.ok || r.kind !== 'write') throw new Error(`write ${name}: ${JSON.stringify(r)}`);
    return r.resource;
  }

  del(type: typeof ARTIST, tenancy: typeof A, name: string, extra: Record<string, unknown> = {}): ApplyResult {
    return this.apply(CommandType.ResourceDelete, { id: { type, tenancy, name }, ...extra });
  }

  names(): string[] {
    return [...(this.fsms[0] as Fsm).store.all()].map((r) => `${r.id.tenancy.namespace}/${r.id.name}${r.deletionTimestamp !== null ? '(marked)' : ''}`).sort();
  }

  /** Both replicas' full content, to show a refused command changed nothing. */
  dump(): string {
    const d = this.fsms.map((f) => JSON.stringify([...f.store.all()]));
    if (d[0] !== d[1]) throw new Error('replicas diverged');
    return d[0] as string;
  }
}

const ref = (r: Resource): ResourceId => r.id;

function refusedAsCascadeChanged(t: Test, r: ApplyResult, what: string): void {
  t.equal(r.ok, false, `${what}: refused`);
  if (!r.ok) {
    t.equal(r.error.code, 'CAS_FAILED', `${what}: CAS_FAILED`);
    t.equal(r.error.details['cascade_changed'], true, `${what}: details.cascade_changed`);
  }
}

/** An owner (team-a artist) with an album in team-a and an album in team-b, and a grandchild under the team-a album. */
function tree(): { log: Log; owner: Resource; childA: Resource; childB: Resource; grand: Resource } {
  const log = new Log();
  const owner = log.put(ARTIST, A, 'owner');
  const childA = log.put(ALBUM, A, 'child-a', { data: { title: 'a' }, owner: ref(owner) });
  const childB = log.put(ALBUM, B, 'child-b', { data: { title: 'b' }, owner: ref(owner) });
  const grand = log.put(ALBUM, A, 'grand', { data: { title: 'g' }, owner: ref(childA) });
  return { log, owner, childA, childB, grand };
}

t.test('a delete whose cascade reaches an unlisted uid is refused with CAS_FAILED cascade_changed and changes nothing', async (t) => {
  const { log, childA, grand } = tree();
  const before = log.dump();
  refusedAsCascadeChanged(t, log.del(ARTIST, A, 'owner', { cascadeAllowed: [childA.id.uid, grand.id.uid] }), 'child-b unlisted');
  t.equal(log.dump(), before, 'the store content is unchanged on both replicas');
  refusedAsCascadeChanged(t, log.del(ARTIST, A, 'owner', { cascadeAllowed: [] }), 'an empty list with children');
  refusedAsCascadeChanged(t, log.del(ARTIST, A, 'owner', { cascadeAllowed: ['uid-unrelated', 'x'] }), 'a list of unrelated uids');
  t.equal(log.dump(), before);
});

t.test('a delete is applied when every uid its cascade reaches is listed (extra uids do no harm)', async (t) => {
  const { log, childA, childB, grand } = tree();
  const r = log.del(ARTIST, A, 'owner', { cascadeAllowed: [grand.id.uid, childB.id.uid, childA.id.uid, 'uid-not-there'] });
  t.ok(r.ok && r.kind === 'delete' && r.deleted, 'applied');
  t.same(log.names(), [], 'the whole cascade is gone');
});

t.test('a grandchild counts: listing only the direct children is not enough', async (t) => {
  const { log, childA, childB } = tree();
  refusedAsCascadeChanged(t, log.del(ARTIST, A, 'owner', { cascadeAllowed: [childA.id.uid, childB.id.uid] }), 'grandchild unlisted');
  t.same(log.names(), ['team-a/child-a', 'team-a/grand', 'team-a/owner', 'team-b/child-b']);
});

t.test('a child created after the check (the cascade grew) makes the same command fail; absent cascadeAllowed is unrestricted', async (t) => {
  const log = new Log();
  const owner = log.put(ARTIST, A, 'owner');
  const c1 = log.put(ALBUM, A, 'c1', { data: { title: 'c1' }, owner: ref(owner) });
  const allowed = [c1.id.uid]; // what the api checked
  log.put(ALBUM, B, 'late', { data: { title: 'late' }, owner: ref(owner) }); // then someone adds a child
  refusedAsCascadeChanged(t, log.del(ARTIST, A, 'owner', { cascadeAllowed: allowed }), 'the cascade grew');
  t.same(log.names(), ['team-a/c1', 'team-a/owner', 'team-b/late']);
  const r = log.del(ARTIST, A, 'owner');
  t.ok(r.ok && r.kind === 'delete' && r.deleted, 'a management delete (no cascadeAllowed) still removes everything');
  t.same(log.names(), []);
});

t.test('a leaf: an empty cascadeAllowed deletes it', async (t) => {
  const log = new Log();
  log.put(ARTIST, A, 'leaf');
  const r = log.del(ARTIST, A, 'leaf', { cascadeAllowed: [] });
  t.ok(r.ok && r.kind === 'delete' && r.deleted);
  t.same(log.names(), []);
});

t.test('a child with finalizers is marked, not removed: it must be listed, its own children need not be', async (t) => {
  const log = new Log();
  const owner = log.put(ARTIST, A, 'owner');
  const held = log.put(ALBUM, A, 'held', { data: { title: 'h' }, owner: ref(owner), finalizers: ['x.io/keep'] });
  log.put(ALBUM, B, 'below-held', { data: { title: 'b' }, owner: ref(held) });
  refusedAsCascadeChanged(t, log.del(ARTIST, A, 'owner', { cascadeAllowed: [] }), 'the marked child is part of the cascade');
  const r = log.del(ARTIST, A, 'owner', { cascadeAllowed: [held.id.uid] });
  t.ok(r.ok && r.kind === 'delete' && r.deleted, 'applied with only the held child listed');
  t.same(log.names(), ['team-a/held(marked)', 'team-b/below-held']);
});

t.test('a resource with finalizers is only marked by a delete: no cascade check until the last finalizer goes', async (t) => {
  const log = new Log();
  const owner = log.put(ARTIST, A, 'owner', { finalizers: ['x.io/f'] });
  const child = log.put(ALBUM, B, 'child', { data: { title: 'c' }, owner: ref(owner) });
  const marked = log.del(ARTIST, A, 'owner', { cascadeAllowed: [] });
  t.ok(marked.ok && marked.kind === 'delete' && !marked.deleted, 'marked, whatever the list');
  t.same(log.names(), ['team-a/owner(marked)', 'team-b/child']);
  const before = log.dump();

  // Removing the last finalizer deletes it with its cascade: guarded the same way.
  const strip = (extra: Record<string, unknown>): ApplyResult => log.apply(CommandType.ResourceWrite, { id: { type: ARTIST, tenancy: A, name: 'owner' }, data: { name: 'owner' }, finalizers: [], ...extra });
  refusedAsCascadeChanged(t, strip({ cascadeAllowed: [] }), 'last finalizer removed, child unlisted');
  t.equal(log.dump(), before, 'nothing changed: the owner keeps its finalizer');
  const ok = strip({ cascadeAllowed: [child.id.uid] });
  t.ok(ok.ok && ok.kind === 'write', 'applied when the child is listed');
  t.same(log.names(), [], 'owner and child gone');
});

t.test('a write that keeps a finalizer, or touches a resource not being deleted, is not held to the list', async (t) => {
  const log = new Log();
  const owner = log.put(ARTIST, A, 'owner', { finalizers: ['x.io/a', 'x.io/b'] });
  log.put(ALBUM, B, 'child', { data: { title: 'c' }, owner: ref(owner) });
  const w1 = log.apply(CommandType.ResourceWrite, { id: { type: ARTIST, tenancy: A, name: 'owner' }, data: { name: 'owner' }, finalizers: [], cascadeAllowed: [] });
  t.ok(w1.ok, 'removing finalizers of a live resource deletes nothing: applied');
  log.apply(CommandType.ResourceWrite, { id: { type: ARTIST, tenancy: A, name: 'owner' }, data: { name: 'owner' }, finalizers: ['x.io/a', 'x.io/b'] });
  log.del(ARTIST, A, 'owner');
  const w2 = log.apply(CommandType.ResourceWrite, { id: { type: ARTIST, tenancy: A, name: 'owner' }, data: { name: 'owner' }, finalizers: ['x.io/b'], cascadeAllowed: [] });
  t.ok(w2.ok, 'one finalizer left: nothing is deleted, applied');
  t.same(log.names(), ['team-a/owner(marked)', 'team-b/child']);
});

t.test('a malformed cascadeAllowed is refused by validation on every replica, store untouched', async (t) => {
  const { log } = tree();
  const before = log.dump();
  for (const bad of [5, 'uid-1', [1, 2], { a: 1 }, [null]]) {
    const r = log.del(ARTIST, A, 'owner', { cascadeAllowed: bad });
    t.equal(r.ok, false, `cascadeAllowed ${JSON.stringify(bad)} refused`);
    const w = log.apply(CommandType.ResourceWrite, { id: { type: ARTIST, tenancy: A, name: 'owner' }, data: { name: 'x' }, cascadeAllowed: bad });
    t.equal(w.ok, false, `a write with cascadeAllowed ${JSON.stringify(bad)} refused`);
  }
  t.equal(log.dump(), before);
});
