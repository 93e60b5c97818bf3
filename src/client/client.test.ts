import * as grpc from '@grpc/grpc-js';
import * as net from 'node:net';
import t, { type Test } from 'tap';
import { cairn } from '../gen/resource.js';
import { CairnClient, CairnClientError, isCairnClientError, isOutcomeUnknown, type Resource } from './index.js';

/**
 * The client's own behaviour against fake nodes that share one in-memory store: conversions,
 * failover, request-id reuse, outcome-unknown reporting, deadlines, cancellation and update().
 * The fakes inject the faults a real cluster produces rarely and at random. The client against
 * real agents (CRUD, concurrent update() on one node and on three, leader loss) is tested in
 * src/server/agent-client.test.ts: `client` may not import `server`.
 */

const pb = cairn.resource.v1;
const TO_OBJECT = { longs: Number, enums: String, defaults: true, arrays: true, objects: true };

interface Codec {
  encode(m: object): { finish(): Uint8Array };
  decode(b: Uint8Array): object;
  toObject(m: object, o: object): object;
}

interface IdMsg {
  type: string;
  tenancy: { partition: string; namespace: string } | null;
  name: string;
  uid: string;
}
interface StoredMsg {
  id: IdMsg;
  owner: IdMsg | null;
  version: string;
  generation: string;
  metadata: Record<string, string>;
  finalizers: string[];
  deletionTimestamp: string;
  dataJson: string;
  status: Record<string, unknown>;
}

/** What a fake node does with the next call of a method. */
type Fault =
  | 'unavailable' // answer UNAVAILABLE with cairn-error-code (the handler decided: nothing applied)
  | 'timeout' // answer DEADLINE_EXCEEDED with cairn-error-code TIMEOUT, without applying
  | 'apply-then-lose' // apply, then fail as a lost connection would (no cairn-error-code)
  | 'hold' // never answer
  | 'cas-conflict'; // someone else wrote first: bump the stored version, then handle normally

/** The store the fake nodes share: the "cluster". Revisions, CAS and request-id dedupe as in API.md. */
class FakeCluster {
  revision = 0;
  readonly store = new Map<string, StoredMsg>();
  readonly dedupe = new Map<string, object>();
  /** The request id of every mutating call that arrived, in order (retries and faulted calls included). */
  readonly requestIds: string[] = [];
  applied = 0;
  /** Paged lists: the items and revision of each list's first page, by list id (dropping one makes its tokens COMPACTED). */
  readonly lists = new Map<number, { revision: number; items: StoredMsg[] }>();
  listSeq = 0;
  /** Called after every List page is answered, with the number of List pages answered so far. */
  afterListPage: ((n: number) => void) | undefined;
  listPages = 0;

  key(id: IdMsg): string {
    return `${id.type}/${id.tenancy?.partition || 'default'}/${id.tenancy?.namespace || 'default'}/${id.name}`;
  }
}

class FakeNode {
  readonly faults: Array<{ method: string; fault: Fault }> = [];
  readonly calls: string[] = [];
  address = '';
  private readonly server = new grpc.Server();

  constructor(private readonly cluster: FakeCluster) {
    const def: Record<string, grpc.MethodDefinition<object, object>> = {};
    const impl: grpc.UntypedServiceImplementation = {};
    const add = (name: string, req: unknown, res: unknown, handle: (r: Record<string, unknown>) => object): void => {
      const rq = req as Codec;
      const rs = res as Codec;
      def[name] = {
        path: `/cairn.resource.v1.ResourceService/${name}`,
        requestStream: false,
        responseStream: false,
        requestSerialize: (m: object) => Buffer.from(rq.encode(m).finish()),
        requestDeserialize: (b: Buffer) => rq.toObject(rq.decode(b), TO_OBJECT),
        responseSerialize: (m: object) => Buffer.from(rs.encode(m).finish()),
        responseDeserialize: (b: Buffer) => rs.toObject(rs.decode(b), TO_OBJECT),
      };
      impl[name] = ((call: grpc.ServerUnaryCall<Record<string, unknown>, object>, callback: grpc.sendUnaryData<object>) => {
        this.calls.push(name);
        if (typeof call.request['requestId'] === 'string') this.cluster.requestIds.push(call.request['requestId']);
        const i = this.faults.findIndex((f) => f.method === name);
        const fault = i >= 0 ? this.faults.splice(i, 1)[0]?.fault : undefined;
        if (fault === 'hold') return;
        if (fault === 'unavailable') return callback(cairnError(grpc.status.UNAVAILABLE, 'UNAVAILABLE', 'no leader is known to this fake'));
        if (fault === 'timeout') return callback(cairnError(grpc.status.DEADLINE_EXCEEDED, 'TIMEOUT', 'not confirmed in time; the write may or may not have been applied'));
        if (fault === 'cas-conflict') this.bumpAll();
        let out: object;
        try {
          out = handle(call.request);
        } catch (e) {
          return callback(e as grpc.ServerErrorResponse);
        }
        if (fault === 'apply-then-lose') return callback({ code: grpc.status.UNAVAILABLE, details: 'Connection dropped' });
        callback(null, out);
      }) as grpc.UntypedHandleCall;
    };
    add('Read', pb.ReadRequest, pb.ReadResponse, (r) => this.read(r));
    add('Write', pb.WriteRequest, pb.WriteResponse, (r) => this.mutate(r, () => this.write(r)));
    add('Delete', pb.DeleteRequest, pb.DeleteResponse, (r) => this.mutate(r, () => this.delete(r)));
    add('List', pb.ListRequest, pb.ListResponse, (r) => {
      const out = this.list(r);
      this.cluster.afterListPage?.(++this.cluster.listPages);
      return out;
    });
    add('ListByOwner', pb.ListByOwnerRequest, pb.ListByOwnerResponse, (r) => ({
      resources: [...this.cluster.store.values()].filter((s) => s.owner?.uid === r['ownerUid']),
      revision: String(this.cluster.revision),
    }));
    this.server.addService(def, impl);
  }

  async start(): Promise<this> {
    this.address = await new Promise<string>((resolve, reject) =>
      this.server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, port) => (err ? reject(err) : resolve(`127.0.0.1:${port}`))),
    );
    return this;
  }

  stop(): void {
    this.server.forceShutdown();
  }

  private bumpAll(): void {
    for (const s of this.cluster.store.values()) s.version = String(++this.cluster.revision);
  }

  private mutate(r: Record<string, unknown>, apply: () => object): object {
    const rid = r['requestId'] as string;
    const seen = this.cluster.dedupe.get(rid);
    if (seen) return seen;
    const out = apply();
    this.cluster.applied++;
    if (rid !== '') this.cluster.dedupe.set(rid, out);
    return out;
  }

  /** A paged list as the server pages one: the first page fixes the items and the revision; tokens name the list and the offset. */
  private list(r: Record<string, unknown>): object {
    const limit = (r['limit'] as number) || 1000;
    const cont = r['continue'] as string;
    let id: number;
    let offset = 0;
    if (cont === '') {
      id = ++this.cluster.listSeq;
      this.cluster.lists.set(id, { revision: this.cluster.revision, items: [...this.cluster.store.values()].map((x) => ({ ...x })) });
    } else {
      [id, offset] = cont.split(':').map(Number) as [number, number];
    }
    const l = this.cluster.lists.get(id);
    if (!l) throw cairnError(grpc.status.OUT_OF_RANGE, 'COMPACTED', `list ${id} is no longer held`, { revision: '1' });
    const more = offset + limit < l.items.length;
    return { resources: l.items.slice(offset, offset + limit), revision: String(l.revision), continue: more ? `${id}:${offset + limit}` : '' };
  }

  private read(r: Record<string, unknown>): object {
    const id = r['id'] as IdMsg;
    const s = this.cluster.store.get(this.cluster.key(id));
    if (!s || (id.uid !== '' && id.uid !== s.id.uid)) throw cairnError(grpc.status.NOT_FOUND, 'NOT_FOUND', `${id.type} ${id.name} not found`);
    return { resource: s, revision: String(this.cluster.revision), lastLeaderContactMs: 3 };
  }

  private write(r: Record<string, unknown>): object {
    const id = r['id'] as IdMsg;
    const key = this.cluster.key(id);
    const cur = this.cluster.store.get(key);
    const version = r['version'] as string;
    if (version !== '' && version !== (cur?.version ?? '0')) {
      throw cairnError(grpc.status.ABORTED, 'CAS_FAILED', `expected version ${version}, stored ${cur?.version ?? 'none'}`, { stored_version: cur?.version ?? '0' });
    }
    const metadata = r['metadata'] as { entries: Record<string, string> } | null;
    const finalizers = r['finalizers'] as { items: string[] } | null;
    const rev = ++this.cluster.revision;
    const next: StoredMsg = {
      id: { type: id.type, tenancy: { partition: 'default', namespace: 'default' }, name: id.name, uid: cur?.id.uid ?? `uid-${rev}` },
      owner: (r['owner'] as IdMsg | null) ?? cur?.owner ?? null,
      version: String(rev),
      generation: `gen-${rev}`,
      metadata: metadata ? metadata.entries : (cur?.metadata ?? {}),
      finalizers: finalizers ? finalizers.items : (cur?.finalizers ?? []),
      deletionTimestamp: cur?.deletionTimestamp ?? '',
      dataJson: r['dataJson'] as string,
      status: cur?.status ?? {},
    };
    this.cluster.store.set(key, next);
    return { resource: next };
  }

  private delete(r: Record<string, unknown>): object {
    const key = this.cluster.key(r['id'] as IdMsg);
    const cur = this.cluster.store.get(key);
    if (!cur) return { deleted: false };
    this.cluster.store.delete(key);
    this.cluster.revision++;
    return { deleted: true, resource: cur };
  }
}

function cairnError(code: grpc.status, cairnCode: string, message: string, details: Record<string, unknown> = {}): grpc.ServerErrorResponse {
  const metadata = new grpc.Metadata();
  metadata.set('cairn-error-code', cairnCode);
  metadata.set('cairn-error-details-json', JSON.stringify(details));
  return Object.assign(new Error(message), { code, details: message, metadata });
}

/** A port nothing listens on. */
async function deadAddress(): Promise<string> {
  const port = await new Promise<number>((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const p = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(p));
    });
  });
  return `127.0.0.1:${port}`;
}

async function setup(t: Test, n: number): Promise<{ cluster: FakeCluster; nodes: FakeNode[] }> {
  const cluster = new FakeCluster();
  const nodes = await Promise.all(Array.from({ length: n }, () => new FakeNode(cluster).start()));
  t.teardown(() => nodes.forEach((x) => x.stop()));
  return { cluster, nodes };
}

/** A client whose first choice is endpoints[0] (the client starts on a random endpoint). */
function clientFor(t: Test, endpoints: string[], timeoutMs = 5000): CairnClient {
  for (;;) {
    const c = new CairnClient({ endpoints, timeoutMs });
    if (c.endpoint === endpoints[0]) {
      t.teardown(() => c.close());
      return c;
    }
    c.close();
  }
}

async function rejection(p: Promise<unknown>): Promise<CairnClientError> {
  try {
    await p;
  } catch (e) {
    if (e instanceof CairnClientError) return e;
    throw e;
  }
  throw new Error('expected the call to fail');
}

const korn = { type: 'demo.v1.Artist', name: 'korn' };
interface Counter {
  name: string;
  members: number;
}

t.test('options are validated up front, naming the option', async (t) => {
  t.throws(() => new CairnClient({ endpoints: [] }), { code: 'INVALID_ARGUMENT', message: /endpoints/ });
  t.throws(() => new CairnClient({ endpoints: ['localhost'] }), { code: 'INVALID_ARGUMENT', message: /endpoints: "localhost" is not a host:port/ });
  t.throws(() => new CairnClient({ endpoints: ['h:99999'] }), { code: 'INVALID_ARGUMENT' });
  t.throws(() => new CairnClient({ endpoints: ['h:1'], timeoutMs: 0 }), { code: 'INVALID_ARGUMENT', message: /timeoutMs/ });
  const c = new CairnClient({ endpoints: ['[::1]:7500', 'node-2.example:7500'] });
  t.teardown(() => c.close());
  const e = await rejection(c.update(korn, () => undefined, { maxAttempts: 0 }));
  t.match(e, { code: 'INVALID_ARGUMENT', message: /maxAttempts/ });
  const bad = await rejection(c.read(korn, { consistency: 'eventual' as 'stale' }));
  t.match(bad, { code: 'INVALID_ARGUMENT', message: /consistency/ });
});

t.test('requests and answers convert between messages and the JSON shape', async (t) => {
  const { cluster, nodes } = await setup(t, 1);
  const c = clientFor(t, [(nodes[0] as FakeNode).address]);
  const w = await c.write<Counter>(korn, { data: { name: 'Korn', members: 5 }, metadata: { team: 'a' }, finalizers: ['demo/x'] });
  t.same(w.data, { name: 'Korn', members: 5 });
  t.same([w.metadata, w.finalizers, w.deletion_timestamp, w.owner], [{ team: 'a' }, ['demo/x'], null, null]);
  t.same(w.id.tenancy, { partition: 'default', namespace: 'default' });
  const kept = await c.write(korn, { data: { name: 'Korn' } });
  t.same([kept.metadata, kept.finalizers], [{ team: 'a' }, ['demo/x']], 'absent metadata and finalizers are sent as absent');
  const cleared = await c.write(korn, { data: { name: 'Korn' }, metadata: {}, finalizers: [] });
  t.same([cleared.metadata, cleared.finalizers], [{}, []], 'empty ones are sent as present');
  const r = await c.read<Counter>(korn, { consistency: 'stale' });
  t.same([r.revision, r.lastLeaderContactMs], [String(cluster.revision), 3]);
  const l = await c.list('demo.v1.Artist');
  t.same(l.resources.map((x) => x.id.name), ['korn']);
  const d = await c.delete(korn);
  t.same([d.deleted, d.resource?.id.name], [true, 'korn']);
  t.same(await c.delete(korn), { deleted: false, resource: null });
  t.equal(new Set(cluster.requestIds).size, cluster.requestIds.length, 'every write had its own request id');
  t.ok(cluster.requestIds.every((id) => /^[0-9A-Z]{26}$/.test(id)), 'request ids are ULIDs');
});

t.test('errors decode to typed codes with their details', async (t) => {
  const { nodes } = await setup(t, 1);
  const c = clientFor(t, [(nodes[0] as FakeNode).address]);
  const nf = await rejection(c.read(korn));
  t.match(nf, { code: 'NOT_FOUND', grpcCode: grpc.status.NOT_FOUND, outcomeUnknown: false });
  t.ok(isCairnClientError(nf, 'NOT_FOUND'));
  await c.write(korn, { data: { name: 'Korn' } });
  const cas = await rejection(c.write(korn, { data: { name: 'Korn' }, version: '999' }));
  t.match(cas, { code: 'CAS_FAILED', grpcCode: grpc.status.ABORTED, details: { stored_version: '1' } });
  t.notOk(isOutcomeUnknown(cas), 'a refused write is a plain failure');
});

t.test('an unreachable endpoint is skipped and the client sticks to the one that answers', async (t) => {
  const { nodes } = await setup(t, 1);
  const dead = await deadAddress();
  const live = (nodes[0] as FakeNode).address;
  const c = clientFor(t, [dead, live]);
  const w = await c.write(korn, { data: { name: 'Korn' } });
  t.equal(w.id.name, 'korn', 'the write went through the live endpoint');
  t.equal(c.endpoint, live, 'and the client stays there');
  await c.read(korn);
  t.equal((nodes[0] as FakeNode).calls.length, 2, 'both calls reached the live node');
});

t.test('UNAVAILABLE from a node fails over; when every node says so until the deadline, the error is UNAVAILABLE and not outcome-unknown', async (t) => {
  const { nodes } = await setup(t, 2);
  const [a, b] = nodes as [FakeNode, FakeNode];
  const c = clientFor(t, [a.address, b.address], 1000);
  a.faults.push({ method: 'Write', fault: 'unavailable' });
  await c.write(korn, { data: { name: 'Korn' } });
  t.same([a.calls, b.calls], [['Write'], ['Write']], 'refused by a, served by b');
  for (let i = 0; i < 100; i++) for (const n of nodes) n.faults.push({ method: 'Write', fault: 'unavailable' });
  const started = Date.now();
  const e = await rejection(c.write(korn, { data: { name: 'K' } }));
  t.match(e, { code: 'UNAVAILABLE', outcomeUnknown: false });
  t.notOk(isOutcomeUnknown(e), 'nothing was applied, and the error says so');
  t.ok(Date.now() - started >= 900, 'it kept trying until the deadline');
  t.ok(a.calls.length + b.calls.length > 4, 'with several attempts');
});

t.test('a write whose answer is lost is retried on another node with the same request id and applied once', async (t) => {
  const { cluster, nodes } = await setup(t, 2);
  const [a, b] = nodes as [FakeNode, FakeNode];
  const c = clientFor(t, [a.address, b.address]);
  a.faults.push({ method: 'Write', fault: 'apply-then-lose' });
  const w = await c.write<Counter>(korn, { data: { name: 'Korn', members: 1 } });
  t.same(w.data, { name: 'Korn', members: 1 });
  t.equal(cluster.requestIds.length, 2, 'the write was sent twice');
  t.equal(cluster.requestIds[0], cluster.requestIds[1], 'with the same request id');
  t.equal(cluster.applied, 1, 'and applied once');

  b.faults.push({ method: 'Write', fault: 'timeout' });
  const again = await c.write(korn, { data: { name: 'Korn', members: 2 } });
  t.equal(again.version, String(cluster.revision), 'a server TIMEOUT is retried too');
  t.equal(cluster.requestIds.at(-1), cluster.requestIds.at(-2), 'with the same request id');

  const own = await c.write(korn, { data: { name: 'Korn', members: 3 } }, { requestId: 'my-key-1' });
  const repeat = await c.write(korn, { data: { name: 'Korn', members: 4 } }, { requestId: 'my-key-1' });
  t.same(repeat, own, "a caller's own request id is sent as given");
});

t.test('a write that never gets a definite answer is TIMEOUT with an unknown outcome; a read is not', async (t) => {
  const { nodes } = await setup(t, 2);
  const c = clientFor(
    t,
    nodes.map((n) => n.address),
    800,
  );
  for (let i = 0; i < 100; i++) for (const n of nodes) n.faults.push({ method: 'Write', fault: 'apply-then-lose' }, { method: 'Read', fault: 'apply-then-lose' });
  const w = await rejection(c.write(korn, { data: { name: 'Korn' } }));
  t.match(w, { code: 'TIMEOUT', outcomeUnknown: true, message: /may or may not have been applied/ });
  t.ok(isOutcomeUnknown(w));
  const r = await rejection(c.read(korn));
  t.match(r, { code: 'UNAVAILABLE', outcomeUnknown: false }, 'a read that kept losing its connection is UNAVAILABLE');
});

t.test('deadlines: a node that never answers makes the call TIMEOUT at its timeoutMs', async (t) => {
  const { nodes } = await setup(t, 1);
  const n = nodes[0] as FakeNode;
  const c = clientFor(t, [n.address], 10_000);
  n.faults.push({ method: 'Write', fault: 'hold' }, { method: 'Read', fault: 'hold' });
  let started = Date.now();
  const w = await rejection(c.write(korn, { data: { name: 'Korn' } }, { timeoutMs: 300 }));
  const took = Date.now() - started;
  t.match(w, { code: 'TIMEOUT', outcomeUnknown: true });
  t.ok(took >= 290 && took < 2000, `the per-call timeoutMs bounded it (${took} ms)`);
  started = Date.now();
  const r = await rejection(c.read(korn, { timeoutMs: 300 }));
  t.match(r, { code: 'TIMEOUT', outcomeUnknown: false });
  t.ok(isOutcomeUnknown(r), 'isOutcomeUnknown is true for any TIMEOUT');
});

t.test('a node that holds every call (stopped, hung, cut off: its connection stays open) is left after attemptTimeoutMs, and the client stays on the next', async (t) => {
  const { cluster, nodes } = await setup(t, 2);
  const [a, b] = nodes as [FakeNode, FakeNode];
  const c = new CairnClient({ endpoints: [a.address, b.address], endpointOrder: 'listed', timeoutMs: 10_000, attemptTimeoutMs: 300 });
  t.teardown(() => c.close());
  a.faults.push({ method: 'Write', fault: 'hold' });
  const started = Date.now();
  const w = await c.write(korn, { data: { name: 'Korn' } });
  const took = Date.now() - started;
  t.equal(w.id.name, 'korn', 'the write was served by the next node');
  t.ok(took >= 290 && took < 5000, `after one attempt's timeout, not the call's 10 s deadline (${took} ms)`);
  t.same([a.calls, b.calls], [['Write'], ['Write']], 'held by a, then sent to b');
  t.equal(cluster.requestIds[0], cluster.requestIds[1], 'with the same request id (applied at most once)');
  t.equal(c.endpoint, b.address, 'the client moved to b');
  await c.read(korn);
  t.same(a.calls, ['Write'], 'and the next call went to b, not to the silent node');
  t.throws(() => new CairnClient({ endpoints: [a.address], attemptTimeoutMs: 0 }), /attemptTimeoutMs must be a positive number/);
});

t.test('cancellation: before sending is a plain CANCELLED; a write cancelled in flight has an unknown outcome', async (t) => {
  const { cluster, nodes } = await setup(t, 1);
  const n = nodes[0] as FakeNode;
  const c = clientFor(t, [n.address]);
  const pre = await rejection(c.write(korn, { data: { name: 'Korn' } }, { signal: AbortSignal.abort() }));
  t.match(pre, { code: 'CANCELLED', outcomeUnknown: false });
  t.equal(cluster.requestIds.length, 0, 'nothing was sent');
  n.faults.push({ method: 'Write', fault: 'hold' }, { method: 'Read', fault: 'hold' });
  const ac = new AbortController();
  const p = c.write(korn, { data: { name: 'Korn' } }, { signal: ac.signal });
  await waitFor(() => n.calls.length === 1, 'the write to arrive');
  ac.abort();
  const inflight = await rejection(p);
  t.match(inflight, { code: 'CANCELLED', outcomeUnknown: true });
  const ac2 = new AbortController();
  const pr = c.read(korn, { signal: ac2.signal });
  await waitFor(() => n.calls.length === 2, 'the read to arrive');
  ac2.abort();
  t.match(await rejection(pr), { code: 'CANCELLED', outcomeUnknown: false }, 'a cancelled read has no outcome to be unsure of');
});

t.test('update(): read-modify-write that retries on CAS_FAILED, bounded', async (t) => {
  const { cluster, nodes } = await setup(t, 1);
  const n = nodes[0] as FakeNode;
  const c = clientFor(t, [n.address]);
  let seen: Array<Resource<Counter> | null> = [];
  const inc = (cur: Resource<Counter> | null): { data: Counter } => {
    seen.push(cur);
    return { data: { name: 'Korn', members: (cur?.data.members ?? 0) + 1 } };
  };
  const created = await c.update<Counter>(korn, inc);
  t.same([seen, created?.data.members], [[null], 1], 'an absent resource is passed as null and created');

  seen = [];
  n.faults.push({ method: 'Write', fault: 'cas-conflict' }, { method: 'Write', fault: 'cas-conflict' });
  const updated = await c.update<Counter>(korn, inc);
  t.equal(seen.length, 3, 'two conflicts, three rounds');
  t.equal(updated?.data.members, 2);

  const skipped = await c.update<Counter>(korn, () => undefined);
  t.equal(skipped?.version, updated?.version, 'fn returning undefined writes nothing and returns the current resource');

  const applied = cluster.applied;
  for (let i = 0; i < 3; i++) n.faults.push({ method: 'Write', fault: 'cas-conflict' });
  const e = await rejection(c.update<Counter>(korn, inc, { maxAttempts: 3, baseBackoffMs: 1 }));
  t.match(e, { code: 'CAS_FAILED' }, 'after maxAttempts conflicts the CAS_FAILED is thrown');
  t.equal(cluster.applied, applied, 'and nothing was written');

  const ac = new AbortController();
  for (let i = 0; i < 3; i++) n.faults.push({ method: 'Write', fault: 'cas-conflict' });
  const p = c.update<Counter>(korn, inc, { baseBackoffMs: 5_000, maxBackoffMs: 5_000, signal: ac.signal });
  await waitFor(() => n.faults.length === 2, 'the first conflict');
  ac.abort();
  t.match(await rejection(p), { code: 'CANCELLED' }, 'a signal ends the backoff');
});

t.test('20 concurrent update() calls on the fake yield exactly 20 increments', async (t) => {
  const { nodes } = await setup(t, 2);
  const c = clientFor(
    t,
    nodes.map((n) => n.address),
  );
  await c.write(korn, { data: { name: 'Korn', members: 0 } });
  await Promise.all(Array.from({ length: 20 }, () => c.update<Counter>(korn, (cur) => ({ data: { name: 'Korn', members: (cur?.data.members ?? 0) + 1 } }))));
  t.equal((await c.read<Counter>(korn)).resource.data.members, 20);
});

async function waitFor(cond: () => boolean, what: string, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

t.test('list() follows continue tokens: every page, one revision; writes between pages do not show', async (t) => {
  const { cluster, nodes } = await setup(t, 1);
  const c = clientFor(t, [nodes[0]?.address ?? '']);
  for (let i = 0; i < 7; i++) await c.write({ type: 'demo.v1.Artist', name: `a${i}` }, { data: { name: `a${i}` } });
  const revision = String(cluster.revision);
  cluster.afterListPage = (n) => {
    if (n === 1) void c.write({ type: 'demo.v1.Artist', name: 'later' }, { data: { name: 'later' } });
  };
  const r = await c.list('demo.v1.Artist', { limit: 3 });
  t.same(r.resources.map((x) => x.id.name), ['a0', 'a1', 'a2', 'a3', 'a4', 'a5', 'a6']);
  t.equal(r.revision, revision, 'the first page revision');
  t.equal(cluster.listPages, 3, 'three pages of at most 3');
  t.rejects(c.list('demo.v1.Artist', { limit: 0 }), { code: 'INVALID_ARGUMENT' }, 'limit is checked before sending');

  const pages: number[] = [];
  for await (const p of c.listPages('demo.v1.Artist', { limit: 4 })) pages.push(p.resources.length);
  t.same(pages, [4, 4], 'listPages yields each page (8 resources now)');
  const one = await c.listPage('demo.v1.Artist', { limit: 5 });
  t.equal(one.resources.length, 5);
  t.ok(one.continue !== undefined);
  const two = await c.listPage('demo.v1.Artist', { limit: 5, continue: one.continue ?? '' });
  t.same([two.resources.length, two.continue, two.revision], [3, undefined, one.revision], 'listPage with continue reads the rest at the same revision');
});

t.test('list() starts over when the server lost the revision between pages (COMPACTED), bounded; listPages surfaces it', async (t) => {
  const { cluster, nodes } = await setup(t, 1);
  const c = clientFor(t, [nodes[0]?.address ?? '']);
  for (let i = 0; i < 5; i++) await c.write({ type: 'demo.v1.Artist', name: `a${i}` }, { data: { name: `a${i}` } });
  cluster.afterListPage = (n) => {
    if (n === 1) {
      cluster.lists.clear(); // the node restarted after the first page
      void c.write({ type: 'demo.v1.Artist', name: 'a9' }, { data: { name: 'a9' } });
    }
  };
  const r = await c.list('demo.v1.Artist', { limit: 2 });
  t.same(r.resources.map((x) => x.id.name), ['a0', 'a1', 'a2', 'a3', 'a4', 'a9'], 'the restarted list, whole, at its own revision');
  t.equal(r.revision, String(cluster.revision));
  t.equal(cluster.listPages, 4, 'one page answered before the loss (the next was COMPACTED), then three pages of the new list');

  cluster.listPages = 0;
  cluster.afterListPage = () => cluster.lists.clear(); // never holds a revision
  const e = await rejection(c.list('demo.v1.Artist', { limit: 2 }));
  t.equal(e.code, 'COMPACTED', 'after the restarts, COMPACTED');
  t.equal(cluster.listPages, 4, 'four tries (three restarts), each a first page answered and a second one COMPACTED');

  const seen: number[] = [];
  const e2 = await rejection(
    (async () => {
      for await (const p of c.listPages('demo.v1.Artist', { limit: 2 })) seen.push(p.resources.length);
    })(),
  );
  t.equal(e2.code, 'COMPACTED', 'listPages throws: the pages handed out cannot be taken back');
  t.same(seen, [2]);
});
