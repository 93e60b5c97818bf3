import { deepStrictEqual } from 'node:assert/strict';
import fc from 'fast-check';
import t from 'tap';
import { ok } from '../base/index.js';
import { ResourceStore, type Page, type Resource, type StoreSnapshot } from './index.js';
import { keyOfId } from './keys.js';
import {
  ReferenceStore,
  SMALL,
  WIDE,
  checkInvariants,
  contextFor,
  normalizeReference,
  outcomeOf,
  plain,
  plainAll,
  querySpecArb,
  resolve,
  resolveQuery,
  stepsArb,
  type Command,
  type Outcome,
  type Step,
  type Universe,
} from './testing/index.js';

/**
 * Property tests against the naive reference (testing/reference.ts): random sequences of
 * write / delete / writeStatus with random expected versions, uids, owners, finalizers and
 * status, resolved against the current state so that hits are common. fast-check prints the
 * seed and the shrunk counterexample on failure; rerun with `{ seed, path }` to replay it.
 */

interface Applied {
  readonly cmd: Command;
  readonly before: StoreSnapshot;
  readonly store: Outcome;
  readonly reference: Outcome;
  readonly revision: number;
}

function apply(store: ResourceStore, ref: ReferenceStore, cmd: Command, revision: number): { store: Outcome; reference: Outcome } {
  const ctx = contextFor(revision);
  switch (cmd.op) {
    case 'write':
      return { store: outcomeOf(store.write(cmd.input, ctx)), reference: normalizeReference(ref.write(cmd.input, ctx)) };
    case 'delete':
      return { store: outcomeOf(store.delete(cmd.input, ctx)), reference: normalizeReference(ref.delete(cmd.input, ctx)) };
    case 'status':
      return { store: outcomeOf(store.writeStatus(cmd.input, ctx)), reference: normalizeReference(ref.writeStatus(cmd.input, ctx)) };
  }
}

/** Runs the steps on both, checking verdicts, results, change records, state and invariants. */
function runAgainstReference(
  u: Universe,
  steps: readonly Step[],
  onStep?: (a: Applied) => void,
  makeStore: () => ResourceStore = () => new ResourceStore(),
): { store: ResourceStore; ref: ReferenceStore } {
  const store = makeStore();
  const ref = new ReferenceStore();
  let revision = 0;
  for (const [i, step] of steps.entries()) {
    revision += step.gap;
    const cmd = resolve(u, step.spec, ref);
    const before = store.snapshot();
    const out = apply(store, ref, cmd, revision);
    deepStrictEqual(out.store, out.reference, `step ${i}: ${JSON.stringify(cmd)} gave different outcomes`);
    deepStrictEqual(plainAll(store.all()), plain(ref.all()), `step ${i}: ${JSON.stringify(cmd)} left different states`);
    deepStrictEqual(store.revision, ref.revision, `step ${i}: revisions differ`);
    const broken = checkInvariants(store);
    if (broken !== null) throw new Error(`step ${i}: ${JSON.stringify(cmd)}: invariant broken: ${broken}`);
    onStep?.({ cmd, before, store: out.store, reference: out.reference, revision });
  }
  return { store, ref };
}

t.test('CAS verdicts, results, change records and resulting state match the naive reference', async (t) => {
  fc.assert(
    fc.property(stepsArb(SMALL, 60), (steps) => {
      runAgainstReference(SMALL, steps);
    }),
    { numRuns: 300 },
  );
  t.pass('300 random sequences of up to 60 commands agree with the reference');
});

t.test('the verdicts cover every outcome (the generator is not vacuous)', async (t) => {
  const seen = new Map<string, number>();
  fc.assert(
    fc.property(stepsArb(SMALL, 60), (steps) => {
      runAgainstReference(SMALL, steps, (a) => {
        const v = a.store;
        const label = v.ok
          ? `${a.cmd.op}:ok${a.cmd.op === 'write' ? `:changed=${String((v.value as { changed: boolean }).changed)}` : ''}${a.cmd.op === 'delete' ? `:deleted=${String((v.value as { deleted: boolean }).deleted)}` : ''}`
          : `${a.cmd.op}:${v.code}`;
        seen.set(label, (seen.get(label) ?? 0) + 1);
        if (v.ok) {
          for (const c of (v.value as { changes: Array<{ kind: string }> }).changes) seen.set(`record:${c.kind}`, (seen.get(`record:${c.kind}`) ?? 0) + 1);
          if ((v.value as { changes: unknown[] }).changes.length > 1) seen.set(`${a.cmd.op}:cascade`, (seen.get(`${a.cmd.op}:cascade`) ?? 0) + 1);
        }
      });
    }),
    { numRuns: 100, seed: 42 },
  );
  for (const label of [
    'write:ok:changed=true',
    'write:ok:changed=false',
    'write:CAS_FAILED',
    'write:UID_MISMATCH',
    'write:INVALID_ARGUMENT',
    'delete:ok:deleted=true',
    'delete:ok:deleted=false',
    'delete:CAS_FAILED',
    'delete:cascade',
    'write:cascade',
    'status:ok',
    'status:NOT_FOUND',
    'status:CAS_FAILED',
    'record:upsert',
    'record:delete',
  ]) {
    t.ok((seen.get(label) ?? 0) > 0, `${label} happens (${seen.get(label) ?? 0} times)`);
  }
});

t.test('generation changes exactly when data, metadata, owner or finalizers change, or deletion starts', async (t) => {
  fc.assert(
    fc.property(stepsArb(SMALL, 60), (steps) => {
      runAgainstReference(SMALL, steps, ({ cmd, before, store, revision }) => {
        if (!store.ok) return;
        const gen = `gen-${revision}`;
        if (cmd.op === 'status') {
          const { resource } = store.value as { resource: Resource };
          const prev = before.getByUid(resource.id.uid);
          if (prev === undefined || resource.generation !== prev.generation) throw new Error('a status write changed the generation');
          if (resource.version !== revision) throw new Error('a status write did not change the version');
          return;
        }
        if (cmd.op !== 'write') return;
        const { resource, changed } = store.value as { resource: Resource; changed: boolean };
        const prev = before.getByUid(resource.id.uid);
        if (prev === undefined) {
          if (resource.generation !== gen || resource.version !== revision) throw new Error('a create did not take the new generation and version');
          return;
        }
        const desiredChanged =
          JSON.stringify(plain(prev.data)) !== JSON.stringify(plain(resource.data)) ||
          JSON.stringify(plain(prev.metadata)) !== JSON.stringify(plain(resource.metadata)) ||
          JSON.stringify(prev.finalizers) !== JSON.stringify(resource.finalizers);
        if (desiredChanged !== (resource.generation === gen)) throw new Error(`generation rule broken: desired state changed=${String(desiredChanged)}, generation ${resource.generation}`);
        if (!desiredChanged && resource.generation !== prev.generation) throw new Error('generation changed without a change of desired state');
        if (changed !== (resource.version === revision)) throw new Error('version changed without a change, or a change kept the version');
        if (!changed) deepStrictEqual(resource, plain(prev), 'a write that changed nothing did not return the stored resource');
      });
    }),
    { numRuns: 200 },
  );
  t.pass('generation and version rules hold over 200 random sequences');
});

t.test('cascading delete removes everything owned, recursively, in one command, in depth-first key order', async (t) => {
  let cascades = 0;
  let marked = 0;
  fc.assert(
    fc.property(stepsArb(SMALL, 80, { write: 8, delete: 4, status: 1 }), (steps) => {
      runAgainstReference(SMALL, steps, ({ store, revision }) => {
        if (!store.ok) return;
        const changes = (store.value as { changes: Array<{ kind: string; revision: number; resource: Resource }> }).changes;
        if (changes.some((c) => c.revision !== revision)) throw new Error('a change record carries another revision');
        if (changes.length > 1) cascades++;
        marked += changes.filter((c, i) => i > 0 && c.kind === 'upsert').length;
      });
    }),
    { numRuns: 200 },
  );
  t.ok(cascades > 20, `cascades happened (${cascades})`);
  t.ok(marked > 0, `cascades marked finalizer-held children (${marked})`);
});

t.test('list filters match the naive reference for every combination of wildcards, prefixes, group versions and owners', async (t) => {
  let nonEmpty = 0;
  let total = 0;
  const hits = new Map<string, number>();
  fc.assert(
    fc.property(stepsArb(WIDE, 120, { write: 12, delete: 1, status: 1 }), fc.array(querySpecArb(WIDE), { minLength: 20, maxLength: 40 }), (steps, queries) => {
      const store = new ResourceStore();
      const ref = new ReferenceStore();
      let revision = 0;
      for (const step of steps) {
        revision += step.gap;
        apply(store, ref, resolve(WIDE, step.spec, ref), revision);
      }
      const owners = [...new Set(ref.resources.flatMap((r) => (r.owner === null ? [] : [r.owner.uid])))].sort();
      const views = [store, store.snapshot()];
      for (const spec of queries) {
        const q = resolveQuery(spec, owners);
        const want = plain(ref.list(q));
        for (const view of views) deepStrictEqual(plainAll(view.list(q)), want, `list ${JSON.stringify(q)}`);
        total++;
        if (want.length > 0) {
          nonEmpty++;
          const features = [
            q.partition === '*' && q.namespace === '*' ? 'both wildcards' : q.partition === '*' ? 'partition wildcard' : q.namespace === '*' ? 'namespace wildcard' : 'fixed tenancy',
            ...(q.namePrefix ? ['name prefix'] : []),
            ...(q.groupVersion !== undefined ? ['group version'] : []),
            ...(q.ownerUid !== undefined ? ['owner uid'] : []),
          ];
          for (const f of features) hits.set(f, (hits.get(f) ?? 0) + 1);
        }
      }
      for (const uid of owners) deepStrictEqual(plainAll(store.listByOwner(uid)), plain(ref.listByOwner(uid)), `listByOwner ${uid}`);
    }),
    { numRuns: 200 },
  );
  t.ok(nonEmpty > total / 10, `a fair share of queries match something (${nonEmpty} of ${total})`);
  for (const f of ['both wildcards', 'partition wildcard', 'namespace wildcard', 'fixed tenancy', 'name prefix', 'group version', 'owner uid']) {
    t.ok((hits.get(f) ?? 0) > 10, `queries with ${f} return results (${hits.get(f) ?? 0})`);
  }
});

t.test('reads match the naive reference (NOT_FOUND, uid mismatch, GROUP_VERSION_MISMATCH)', async (t) => {
  fc.assert(
    fc.property(stepsArb(SMALL, 40), fc.array(fc.record({ kind: fc.nat(), partition: fc.nat(), namespace: fc.nat(), name: fc.nat(), gv: fc.constantFrom('v1', 'v2'), uid: fc.constantFrom('none', 'stored', 'bogus') }), { maxLength: 20 }), (steps, reads) => {
      const { store, ref } = runAgainstReference(SMALL, steps);
      for (const r of reads) {
        const target = { group: 0, kind: r.kind, partition: r.partition, namespace: r.namespace, name: r.name };
        const type = { group: 'demo', groupVersion: r.gv, kind: SMALL.kinds[target.kind % SMALL.kinds.length] as string };
        const tenancy = { partition: SMALL.partitions[r.partition % SMALL.partitions.length] as string, namespace: SMALL.namespaces[r.namespace % SMALL.namespaces.length] as string };
        const name = SMALL.names[r.name % SMALL.names.length] as string;
        const stored = store.get({ group: type.group, kind: type.kind, tenancy, name });
        const uid = r.uid === 'stored' ? stored?.id.uid : r.uid === 'bogus' ? 'uid-bogus' : undefined;
        const input = { type, tenancy, name, ...(uid !== undefined ? { uid } : {}) };
        deepStrictEqual(outcomeOf(store.read(input)), normalizeReference(ref.read(input)), `read ${JSON.stringify(input)}`);
      }
    }),
    { numRuns: 150 },
  );
  t.pass('reads agree');
});

t.test('the reference comparison catches planted bugs (a checker that cannot fail is a defect)', async (t) => {
  const mutants: Record<string, () => ResourceStore> = {
    'CAS ignored on write': () =>
      new (class extends ResourceStore {
        override write(...[input, ctx]: Parameters<ResourceStore['write']>): ReturnType<ResourceStore['write']> {
          const { expectedVersion: _ignored, ...rest } = input;
          return super.write(rest, ctx);
        }
      })(),
    'cascade records in reverse order': () =>
      new (class extends ResourceStore {
        override delete(...args: Parameters<ResourceStore['delete']>): ReturnType<ResourceStore['delete']> {
          const r = super.delete(...args);
          return r.ok ? ok({ ...r.value, changes: [...r.value.changes].reverse() }) : r;
        }
      })(),
    'generation kept on metadata change': () =>
      new (class extends ResourceStore {
        override write(...[input, ctx]: Parameters<ResourceStore['write']>): ReturnType<ResourceStore['write']> {
          const before = this.getByUid(this.get({ group: input.id.type.group, kind: input.id.type.kind, tenancy: input.id.tenancy, name: input.id.name })?.id.uid ?? '');
          const dataSame = before !== undefined && JSON.stringify(plain(before.data)) === JSON.stringify(plain(input.data));
          return super.write(input, dataSame ? { ...ctx, newGeneration: before.generation } : ctx);
        }
      })(),
  };
  for (const [name, make] of Object.entries(mutants)) {
    const result = fc.check(
      fc.property(stepsArb(SMALL, 60), (steps) => {
        runAgainstReference(SMALL, steps, undefined, make);
      }),
      { numRuns: 300, seed: 7 },
    );
    t.ok(result.failed, `caught: ${name}${result.failed ? ` (after ${result.numRuns} runs)` : ''}`);
  }
});

/** Reads every page of a paged scan, checking each page's shape; returns the pages. */
function readPages(read: (after: string | undefined) => Page, limit: number, fullPages: boolean): Resource[][] {
  const pages: Resource[][] = [];
  let after: string | undefined;
  for (let i = 0; ; i++) {
    if (i > 10_000) throw new Error('paging does not end');
    const p = read(after);
    if (p.items.length > limit) throw new Error(`a page of ${p.items.length} items with limit ${limit}`);
    if (p.nextAfter !== undefined) {
      if (p.items.length === 0) throw new Error('an empty page says more remain');
      if (fullPages && p.items.length !== limit) throw new Error(`a page before the last holds ${p.items.length} of ${limit} items`);
      if (p.nextAfter !== keyOfId((p.items.at(-1) as Resource).id)) throw new Error('nextAfter is not the key of the last item');
    }
    pages.push(p.items);
    if (p.nextAfter === undefined) return pages;
    after = p.nextAfter;
  }
}

t.test('listPage and listByOwnerPage, page after page, give list() filtered by the visibility predicate, with full pages', async (t) => {
  let multiPage = 0;
  let filtered = 0;
  fc.assert(
    fc.property(
      stepsArb(WIDE, 120, { write: 12, delete: 1, status: 1 }),
      fc.array(fc.record({ q: querySpecArb(WIDE), limit: fc.integer({ min: 1, max: 9 }), hide: fc.integer({ min: 0, max: 3 }), maxBytes: fc.option(fc.integer({ min: 1, max: 3000 }), { nil: undefined }) }), { minLength: 10, maxLength: 25 }),
      (steps, queries) => {
        const store = new ResourceStore();
        const ref = new ReferenceStore();
        let revision = 0;
        for (const step of steps) {
          revision += step.gap;
          apply(store, ref, resolve(WIDE, step.spec, ref), revision);
        }
        const owners = [...new Set(ref.resources.flatMap((r) => (r.owner === null ? [] : [r.owner.uid])))].sort();
        const snap = store.snapshot();
        for (const { q: spec, limit, hide, maxBytes } of queries) {
          const q = resolveQuery(spec, owners);
          // A predicate that hides some items (by a character of the name), as an access filter would.
          const visible = hide === 0 ? undefined : (r: Resource): boolean => r.id.name.length % 4 !== hide;
          const want = plain(ref.list(q).filter((r) => visible === undefined || visible(r)));
          if (want.length !== ref.list(q).length) filtered++;
          for (const view of [store, snap]) {
            const sizeOf = (r: Resource): number => JSON.stringify(r).length;
            const opts = { limit, visible, ...(maxBytes !== undefined ? { maxBytes, sizeOf } : {}) };
            const pages = readPages((after) => view.listPage(q, { ...opts, after }), limit, maxBytes === undefined);
            if (pages.length > 1) multiPage++;
            deepStrictEqual(plainAll(pages.flat()), want, `listPage ${JSON.stringify(q)} limit ${limit}`);
            if (maxBytes !== undefined) {
              for (const p of pages) {
                const total = p.reduce((n, r) => n + sizeOf(r), 0);
                if (p.length > 1 && total > maxBytes) throw new Error(`a page of ${total} bytes over maxBytes ${maxBytes}`);
              }
            }
          }
          // Starting after any key: exactly the matches with a greater key.
          const all = plainAll(store.list(q));
          if (all.length > 0) {
            const pivot = keyOfId((all[Math.floor(all.length / 2)] as Resource).id);
            for (const after of [pivot, pivot + '\u0000', pivot.slice(0, -1), '', '\uffff', 'zzz']) {
              deepStrictEqual(plainAll(store.listPage(q, { after, limit: 1_000 }).items), all.filter((r) => keyOfId(r.id) > after), `after ${JSON.stringify(after)}`);
            }
          }
        }
        for (const uid of [...owners, 'uid-nobody']) {
          const want = plain(ref.listByOwner(uid));
          for (const limit of [1, 2, 5]) {
            deepStrictEqual(plainAll(readPages((after) => snap.listByOwnerPage(uid, { limit, after }), limit, true).flat()), want, `listByOwnerPage ${uid} limit ${limit}`);
          }
        }
      },
    ),
    { numRuns: 100 },
  );
  t.ok(multiPage > 100, `many queries span several pages (${multiPage})`);
  t.ok(filtered > 20, `the predicate hid items in many queries (${filtered})`);
});

t.test('a paged scan stops after its page: it does not visit the rest of the range', async (t) => {
  const store = new ResourceStore();
  for (let i = 0; i < 2_000; i++) {
    const name = `n${String(i).padStart(5, '0')}`;
    store.write({ id: { type: { group: 'g', groupVersion: 'v1', kind: 'K' }, tenancy: { partition: 'p', namespace: 'n' }, name }, data: { i } }, contextFor(i + 1));
  }
  const q = { group: 'g', kind: 'K', partition: 'p', namespace: 'n' };
  let calls = 0;
  const p = store.listPage(q, { limit: 10, after: keyOfId((store.list(q)[500] as Resource).id), visible: () => (calls++, true) });
  t.equal(p.items.length, 10);
  t.equal(p.items[0]?.id.name, 'n00501');
  t.equal(calls, 11, 'the predicate ran on the page and one more item only');
  t.ok(p.nextAfter !== undefined);
  const last = store.listPage(q, { limit: 10, after: keyOfId((store.list(q)[1_995] as Resource).id) });
  t.equal(last.items.length, 4);
  t.equal(last.nextAfter, undefined, 'the last page says nothing more remains');
});
