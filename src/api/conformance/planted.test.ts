import t, { type Test } from 'tap';
import { isDeepStrictEqual } from 'node:util';
import { LocalCluster, testClock } from '../../replica/testing/index.js';
import { registerDemoTypes } from '../demo-types.js';
import { TypeRegistry } from '../registry.js';
import { registryWriteHooks } from '../write-hooks.js';
import { ResourceService } from '../resource-service.js';
import { runningNode } from '../served-node.js';
import { serviceTarget } from './service-target.js';
import { resourceApiConformance } from './suite.js';
import type { ApiResult, ResourceApiTarget } from './target.js';

/**
 * The conformance suite proven on planted bugs (STYLE.md: "A checker is proven by showing it
 * catches a planted bug"). Each bug is planted in a wrapper around the in-process target (no
 * product code is touched); the suite runs against it under a recorder that collects failed
 * assertions instead of reporting them, and must fail in the case that covers the rule.
 */

/** The part of tap's Test the suite uses, recording failures as "case > assertion". */
class Recorder {
  readonly failures: string[] = [];
  private readonly queue: Array<[string, (t: Recorder) => Promise<void>]> = [];

  test(name: string, fn: (t: Recorder) => Promise<void>): Promise<void> {
    this.queue.push([name, fn]);
    return Promise.resolve();
  }

  async run(): Promise<void> {
    for (const [name, fn] of this.queue.splice(0)) {
      const sub = new Recorder();
      try {
        await fn(sub);
        await sub.run();
      } catch (e) {
        sub.failures.push(`threw: ${e instanceof Error ? e.message : String(e)}`);
      }
      for (const f of sub.failures) this.failures.push(`${name} > ${f}`);
    }
  }

  private check(pass: boolean, msg: string | undefined): boolean {
    if (!pass) this.failures.push(msg ?? '(unnamed assertion)');
    return pass;
  }

  ok(v: unknown, msg?: string): boolean {
    return this.check(Boolean(v), msg);
  }
  equal(a: unknown, b: unknown, msg?: string): boolean {
    return this.check(a === b, msg);
  }
  not(a: unknown, b: unknown, msg?: string): boolean {
    return this.check(a !== b, msg);
  }
  same(a: unknown, b: unknown, msg?: string): boolean {
    const norm = (v: unknown): unknown => (v === undefined ? undefined : (JSON.parse(JSON.stringify(v)) as unknown));
    return this.check(isDeepStrictEqual(norm(a), norm(b)), msg);
  }
  match(a: unknown, re: RegExp, msg?: string): boolean {
    return this.check(typeof a === 'string' && re.test(a), msg);
  }
  fail(msg?: string): boolean {
    return this.check(false, msg);
  }
  comment(): void {}
}

async function runSuite(api: ResourceApiTarget): Promise<string[]> {
  const rec = new Recorder();
  resourceApiConformance(rec as unknown as Test, api);
  await rec.run();
  return rec.failures;
}

async function freshTarget(): Promise<{ api: ResourceApiTarget; close: () => Promise<void> }> {
  const registry = new TypeRegistry();
  registerDemoTypes(registry);
  const cluster = new LocalCluster({ seed: 7, tickMs: 10, writeHooks: registryWriteHooks(registry) });
  await cluster.bootstrap(['n1']);
  const node = await cluster.waitForLeader();
  const svc = new ResourceService(runningNode({ coordinator: node.coordinator }), registry, testClock);
  return { api: serviceTarget('in-process', svc), close: () => cluster.close() };
}

const mapOk = <T>(r: ApiResult<T>, f: (v: T) => T): ApiResult<T> => (r.ok ? { ok: true, value: f(r.value) } : r);

interface PlantedBug {
  readonly name: string;
  /** The case (a prefix of its name) that must catch it. */
  readonly caughtBy: string;
  readonly plant: (api: ResourceApiTarget) => ResourceApiTarget;
}

const BUGS: readonly PlantedBug[] = [
  {
    name: 'a read ignores the uid',
    caughtBy: 'Read: by name, by uid',
    plant: (api) => ({ ...api, read: (type, n, q) => api.read(type, n, { ...(q.partition !== undefined ? { partition: q.partition } : {}), ...(q.namespace !== undefined ? { namespace: q.namespace } : {}) }) }),
  },
  {
    name: 'a write ignores the expected version',
    caughtBy: 'Write: compare-and-swap',
    plant: (api) => ({ ...api, write: (type, n, ten, b) => api.write(type, n, ten, b.version === '0' ? b : { ...b, version: '' }) }),
  },
  {
    name: 'a delete ignores the expected version',
    caughtBy: 'Delete: compare-and-swap',
    plant: (api) => ({ ...api, delete: (type, n, q) => api.delete(type, n, { ...q, version: '' }) }),
  },
  {
    name: 'a list returns its results in reverse order',
    caughtBy: 'List: every combination',
    plant: (api) => ({ ...api, list: async (type, q) => mapOk(await api.list(type, q), (v) => ({ ...v, resources: [...v.resources].reverse() })) }),
  },
  {
    name: 'a list with a name prefix drops its last match',
    caughtBy: 'List: every combination',
    plant: (api) => ({ ...api, list: async (type, q) => mapOk(await api.list(type, q), (v) => (q.name_prefix ? { ...v, resources: v.resources.slice(0, -1) } : v)) }),
  },
  {
    name: 'a list reports a revision from before the last write',
    caughtBy: 'List: every combination',
    plant: (api) => ({ ...api, list: async (type, q) => mapOk(await api.list(type, q), (v) => ({ ...v, revision: String(Math.max(1, Number(v.revision) - 1)) })) }),
  },
  {
    name: 'a status write drops the other keys',
    caughtBy: 'WriteStatus',
    plant: (api) => ({ ...api, writeStatus: async (type, n, key, ten, b) => mapOk(await api.writeStatus(type, n, key, ten, b), (v) => ({ ...v, status: Object.fromEntries(Object.entries(v.status).filter(([k]) => k === key)) })) }),
  },
  {
    name: 'a status write changes the generation',
    caughtBy: 'Generation',
    plant: (api) => ({ ...api, writeStatus: async (type, n, key, ten, b) => mapOk(await api.writeStatus(type, n, key, ten, b), (v) => ({ ...v, generation: `${v.generation}x` })) }),
  },
  {
    name: 'CAS_FAILED is reported as INVALID_ARGUMENT',
    caughtBy: 'Write: create only',
    plant: (api) => ({
      ...api,
      write: async (type, n, ten, b) => {
        const r = await api.write(type, n, ten, b);
        return !r.ok && r.error.code === 'CAS_FAILED' ? { ok: false, error: { ...r.error, code: 'INVALID_ARGUMENT', httpStatus: 400 } } : r;
      },
    }),
  },
  {
    name: 'a cascading delete leaves the grandchildren',
    caughtBy: 'Owners: deleting an owner',
    plant: (api) => ({
      ...api,
      read: async (type, n, q) => {
        const r = await api.read(type, n, q);
        // Pretend g1 survived its owner's deletion.
        return !r.ok && n === 'g1' && q.namespace === 'casc' ? { ok: true, value: { id: { type, tenancy: { partition: 'default', namespace: 'casc' }, name: n, uid: 'x' }, owner: null, version: '1', generation: 'g', metadata: {}, finalizers: [], deletion_timestamp: null, data: {}, status: {} } } : r;
      },
    }),
  },
];

const base = await freshTarget();
const baseline = await runSuite(base.api);
await base.close();

t.test('baseline: the suite on the unplanted target', async (t) => {
  // The real bugs the suite finds today (reported to the lead) show up here too; a planted bug
  // must add failures beyond these.
  t.comment(`${baseline.length} failed assertions without a planted bug${baseline.length > 0 ? `:\n${baseline.join('\n')}` : ''}`);
  t.ok(baseline.every((f) => !BUGS.some((b) => f.startsWith(b.caughtBy))), 'no case that proves a planted bug fails without it');
});

for (const bug of BUGS) {
  t.test(`planted: ${bug.name}`, async (t) => {
    const target = await freshTarget();
    try {
      const failures = (await runSuite(bug.plant(target.api))).filter((f) => !baseline.includes(f));
      const caught = failures.filter((f) => f.startsWith(bug.caughtBy));
      t.ok(caught.length > 0, `caught by "${bug.caughtBy}" (${caught.length} failed assertions, e.g. ${JSON.stringify(caught[0] ?? failures[0] ?? 'none')})`);
    } finally {
      await target.close();
    }
  });
}
