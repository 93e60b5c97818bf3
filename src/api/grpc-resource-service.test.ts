import * as grpc from '@grpc/grpc-js';
import t, { type Test } from 'tap';
import { CairnError, ErrorCode, type Logger, type Revision } from '../base/index.js';
import { cairn } from '../gen/resource.js';
import type { Coordinator } from '../replica/index.js';
import { LocalCluster, testClock } from '../replica/testing/index.js';
import { registerDemoTypes } from './demo-types.js';
import { grpcErrorOf } from './errors.js';
import { addResourceGrpcService, encodedResource } from './grpc-resource-service.js';
import { TypeRegistry } from './registry.js';
import { registryWriteHooks } from './write-hooks.js';
import { ResourceService } from './resource-service.js';
import { runningNode } from './served-node.js';
import { ResourceStore } from '../store/index.js';

/**
 * The public gRPC API over a real single-node replica (driver, Raft, FSM, store) in process:
 * every operation, every error code of API.md's table as a gRPC status plus the
 * cairn-error-code / cairn-error-details-json trailers, and input that must not crash it.
 * (`api` may not import `server`, so this wires ResourceService the way the agent does; the
 * agent's own wiring is exercised by src/server/agent-client.test.ts.)
 */

const pb = cairn.resource.v1;
const TO_OBJECT = { longs: Number, enums: String, defaults: true, arrays: true, objects: true };

interface Codec {
  encode(m: object): { finish(): Uint8Array };
  decode(b: Uint8Array): object;
  toObject(m: object, o: object): object;
}

interface Answer {
  res: Record<string, unknown> | undefined;
  err: grpc.ServiceError | undefined;
  headers: grpc.Metadata | undefined;
}

interface ResourceOut {
  id: { type: string; tenancy: { partition: string; namespace: string }; name: string; uid: string };
  owner: { uid: string } | null;
  version: string;
  generation: string;
  metadata: Record<string, string>;
  finalizers: string[];
  deletionTimestamp: string;
  dataJson: string;
  status: Record<string, { observedGeneration: string; conditions: Array<{ type: string; state: string }>; updatedAt: string }>;
}

const METHODS: Record<string, { req: Codec; res: Codec }> = {
  Read: { req: pb.ReadRequest as unknown as Codec, res: pb.ReadResponse as unknown as Codec },
  Write: { req: pb.WriteRequest as unknown as Codec, res: pb.WriteResponse as unknown as Codec },
  WriteStatus: { req: pb.WriteStatusRequest as unknown as Codec, res: pb.WriteStatusResponse as unknown as Codec },
  Delete: { req: pb.DeleteRequest as unknown as Codec, res: pb.DeleteResponse as unknown as Codec },
  List: { req: pb.ListRequest as unknown as Codec, res: pb.ListResponse as unknown as Codec },
  ListByOwner: { req: pb.ListByOwnerRequest as unknown as Codec, res: pb.ListByOwnerResponse as unknown as Codec },
};

function bind(server: grpc.Server): Promise<string> {
  return new Promise((resolve, reject) => {
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, port) => (err ? reject(err) : resolve(`127.0.0.1:${port}`)));
  });
}

/** A raw client: the request is a message object, or raw bytes sent as they are. */
function caller(address: string): { call(method: string, req: object | Buffer, opts?: { deadlineMs?: number; metadata?: grpc.Metadata }): Promise<Answer>; close(): void } {
  const client = new grpc.Client(address, grpc.credentials.createInsecure());
  return {
    call(method, req, opts = {}) {
      const m = METHODS[method];
      if (!m) throw new Error(`no method ${method}`);
      return new Promise((resolve) => {
        let headers: grpc.Metadata | undefined;
        const serialize = (x: object | Buffer): Buffer => (Buffer.isBuffer(x) ? x : Buffer.from(m.req.encode(x).finish()));
        const deserialize = (b: Buffer): Record<string, unknown> => m.res.toObject(m.res.decode(b), TO_OBJECT) as Record<string, unknown>;
        const c = client.makeUnaryRequest(
          `/cairn.resource.v1.ResourceService/${method}`,
          serialize,
          deserialize,
          req,
          opts.metadata ?? new grpc.Metadata(),
          { deadline: Date.now() + (opts.deadlineMs ?? 10_000) },
          (err, res) => resolve({ res: res ?? undefined, err: err ?? undefined, headers }),
        );
        c.on('metadata', (md) => (headers = md));
      });
    },
    close: () => client.close(),
  };
}

function resource(a: Answer): ResourceOut {
  if (a.err) throw new Error(`expected success, got ${a.err.code} ${a.err.details}`);
  return a.res?.['resource'] as ResourceOut;
}

function errorOf(a: Answer): { grpc: number; code: string | undefined; details: Record<string, unknown>; message: string } {
  if (!a.err) throw new Error(`expected an error, got ${JSON.stringify(a.res)}`);
  const code = a.err.metadata.get('cairn-error-code')[0];
  const raw = a.err.metadata.get('cairn-error-details-json')[0];
  return { grpc: a.err.code, code: typeof code === 'string' ? code : undefined, details: typeof raw === 'string' ? (JSON.parse(raw) as Record<string, unknown>) : {}, message: a.err.details };
}

const id = (name: string, type = 'demo.v1.Artist', extra: Record<string, unknown> = {}): Record<string, unknown> => ({ type, tenancy: { partition: '', namespace: '' }, name, ...extra });

interface Harness {
  rpc: ReturnType<typeof caller>;
  logged: Array<{ obj: object; msg: string }>;
  setCoordinator(c: Coordinator | undefined): void;
}

async function harness(t: Test): Promise<Harness> {
  const registry = new TypeRegistry();
  registerDemoTypes(registry);
  const cluster = new LocalCluster({ writeHooks: registryWriteHooks(registry) });
  await cluster.bootstrap(['n1']);
  const leader = await cluster.waitForLeader();
  registry.register({
    group: 'test',
    groupVersion: 'v1',
    kind: 'Secret',
    scope: 'namespace',
    schema: { type: 'object' },
    access: (_verb, _res, token) => token === 'open-sesame',
  });
  registry.register({
    group: 'test',
    groupVersion: 'v1',
    kind: 'Buggy',
    scope: 'namespace',
    schema: { type: 'object' },
    mutate: () => {
      throw new Error('planted bug in a mutate hook');
    },
  });
  let coordinator: Coordinator | undefined = leader.coordinator;
  // A node that stops running (set to undefined) refuses as a stopped node does.
  const node = {
    coordinator: (): Promise<Coordinator> => (coordinator ? Promise.resolve(coordinator) : Promise.reject(new CairnError(ErrorCode.UNAVAILABLE, 'node n1 is stopped'))),
    coordinatorNow: (): Coordinator | undefined => coordinator,
  };
  const svc = new ResourceService(node, registry, testClock);
  const logged: Array<{ obj: object; msg: string }> = [];
  const logger: Logger = { debug: () => {}, info: () => {}, warn: () => {}, error: (obj, msg) => logged.push({ obj, msg }) };
  const server = new grpc.Server();
  addResourceGrpcService(server, svc, { logger });
  const address = await bind(server);
  const rpc = caller(address);
  t.teardown(async () => {
    rpc.close();
    server.forceShutdown();
    await cluster.close();
  });
  return { rpc, logged, setCoordinator: (c) => (coordinator = c) };
}

t.test('Write, Read, List, WriteStatus, Delete round-trip over gRPC', async (t) => {
  const { rpc } = await harness(t);
  const created = resource(await rpc.call('Write', { id: id('korn'), dataJson: '{"name":"Korn","genre":"metal"}', version: '0', metadata: { entries: { team: 'a' } } }));
  t.equal(created.id.type, 'demo.v1.Artist');
  t.same(created.id.tenancy, { partition: 'default', namespace: 'default' }, 'empty tenancy fields default');
  t.match(created.id.uid, /^[0-9A-Z]{26}$/, 'the server assigned a ULID');
  t.same(JSON.parse(created.dataJson), { name: 'Korn', genre: 'metal' });
  t.same(created.metadata, { team: 'a' });
  t.equal(created.deletionTimestamp, '');
  t.equal(created.owner, null);

  const read = await rpc.call('Read', { id: id('korn') });
  t.same(resource(read), created, 'a linearizable read returns what was written');
  t.equal(read.res?.['revision'], created.version, 'revision in the message');
  t.equal(read.res?.['lastLeaderContactMs'], 0, 'last leader contact is 0 on the leader');
  t.equal(read.headers?.get('cairn-revision')[0], created.version, 'revision in the response metadata');
  t.equal(read.headers?.get('cairn-last-contact-ms')[0], '0', 'last contact in the response metadata');

  const stale = await rpc.call('Read', { id: id('korn'), consistency: pb.Consistency.CONSISTENCY_STALE });
  t.same(resource(stale), created, 'a stale read on the leader sees it too');
  t.equal(stale.headers?.get('cairn-revision')[0], created.version);

  // Metadata absent keeps it; present (even empty) replaces it.
  const kept = resource(await rpc.call('Write', { id: id('korn'), dataJson: '{"name":"Korn","genre":"rock"}' }));
  t.same(kept.metadata, { team: 'a' }, 'absent metadata keeps the stored metadata');
  t.not(kept.generation, created.generation, 'a data change makes a new generation');
  const cleared = resource(await rpc.call('Write', { id: id('korn'), dataJson: '{"name":"Korn","genre":"rock"}', metadata: { entries: {} }, version: kept.version }));
  t.same(cleared.metadata, {}, 'an empty StringMap clears the metadata (CAS on the current version)');

  const album = resource(await rpc.call('Write', { id: id('issues', 'demo.v1.Album'), dataJson: '{"title":"Issues","year":1999}', owner: { ...id('korn'), uid: created.id.uid } }));
  t.equal(album.owner?.uid, created.id.uid, 'owner is set on create');
  t.equal(album.dataJson, '{"title":"Issues","year":1999}', 'integers stay integers (data travels as JSON text)');

  const listed = await rpc.call('List', { type: 'demo.Artist', tenancy: { partition: '', namespace: '*' } });
  t.same(
    (listed.res?.['resources'] as ResourceOut[]).map((r) => r.id.name),
    ['korn'],
    'List without a group version, across namespaces',
  );
  t.equal(listed.headers?.get('cairn-revision')[0], listed.res?.['revision'], 'List sends its revision as metadata too');
  const byPrefix = await rpc.call('List', { type: 'demo.v1.Artist', namePrefix: 'x' });
  t.same(byPrefix.res?.['resources'], [], 'name_prefix filters');
  const owned = await rpc.call('ListByOwner', { ownerUid: created.id.uid });
  t.same(
    (owned.res?.['resources'] as ResourceOut[]).map((r) => r.id.name),
    ['issues'],
    'ListByOwner finds the album',
  );

  const withStatus = resource(
    await rpc.call('WriteStatus', {
      id: { ...id('korn'), uid: created.id.uid },
      key: 'demo.v1.artist-controller',
      observedGeneration: cleared.generation,
      conditions: [{ type: 'Accepted', state: 'TRUE', reason: 'Ok' }],
    }),
  );
  t.equal(withStatus.generation, cleared.generation, 'a status write keeps the generation');
  t.not(withStatus.version, cleared.version, 'and makes a new version');
  t.same(withStatus.status['demo.v1.artist-controller']?.conditions, [{ type: 'Accepted', state: 'TRUE', reason: 'Ok', message: '' }]);
  t.match(withStatus.status['demo.v1.artist-controller']?.updatedAt, /^\d{4}-\d\d-\d\dT/);

  // The stored status may be passed back unchanged through Write.
  const passedBack = resource(await rpc.call('Write', { id: id('korn'), dataJson: '{"name":"Korn","genre":"jazz"}', status: withStatus.status, version: withStatus.version }));
  t.same(passedBack.status, withStatus.status, 'status passed back unchanged is accepted');

  const staleDelete = errorOf(await rpc.call('Delete', { id: id('korn'), version: created.version }));
  t.same([staleDelete.grpc, staleDelete.code], [grpc.status.ABORTED, 'CAS_FAILED'], 'Delete with a stale version is CAS_FAILED / ABORTED');
  const del = await rpc.call('Delete', { id: id('korn'), version: passedBack.version });
  t.equal(del.res?.['deleted'], true);
  t.equal((del.res?.['resource'] as ResourceOut).id.name, 'korn', 'Delete returns the last stored state');
  t.equal(errorOf(await rpc.call('Read', { id: id('issues', 'demo.v1.Album') })).code, 'NOT_FOUND', 'deleting the owner deleted the album');
  const again = await rpc.call('Delete', { id: id('korn') });
  t.same([again.res?.['deleted'], again.res?.['resource']], [false, null], 'deleting what does not exist succeeds with deleted = false');
});

t.test('finalizers: absent keeps them, an empty list removes them and completes a pending delete', async (t) => {
  const { rpc } = await harness(t);
  const r = resource(await rpc.call('Write', { id: id('tool'), dataJson: '{"name":"Tool"}', finalizers: { items: ['demo/keep'] } }));
  t.same(r.finalizers, ['demo/keep']);
  const kept = resource(await rpc.call('Write', { id: id('tool'), dataJson: '{"name":"Tool","genre":"metal"}' }));
  t.same(kept.finalizers, ['demo/keep'], 'absent finalizers keep the stored ones');
  const del = await rpc.call('Delete', { id: id('tool') });
  t.not((del.res?.['resource'] as ResourceOut).deletionTimestamp, '', 'a delete held back by a finalizer sets deletion_timestamp');
  t.ok(resource(await rpc.call('Read', { id: id('tool') })), 'and the resource is still there');
  await rpc.call('Write', { id: id('tool'), dataJson: '{"name":"Tool","genre":"metal"}', finalizers: { items: [] } });
  t.equal(errorOf(await rpc.call('Read', { id: id('tool') })).code, 'NOT_FOUND', 'removing the last finalizer completed the delete');
});

t.test('a retried request_id is applied once and answers with the first result', async (t) => {
  const { rpc } = await harness(t);
  const first = resource(await rpc.call('Write', { id: id('muse'), dataJson: '{"name":"Muse"}', requestId: 'req-muse-1' }));
  const retry = resource(await rpc.call('Write', { id: id('muse'), dataJson: '{"name":"Muse","genre":"rock"}', requestId: 'req-muse-1' }));
  t.same(retry, first, 'the retry returned the first result');
  t.equal(resource(await rpc.call('Read', { id: id('muse') })).version, first.version, 'and did not write again');
  const bad = errorOf(await rpc.call('Write', { id: id('muse'), dataJson: '{"name":"Muse"}', requestId: 'has spaces' }));
  t.same([bad.grpc, bad.code], [grpc.status.INVALID_ARGUMENT, 'INVALID_ARGUMENT'], 'a request id must be printable ASCII without spaces');
});

t.test('every error code maps to its gRPC status, with the Cairn code and details in trailers', async (t) => {
  const { rpc, logged, setCoordinator } = await harness(t);
  const korn = resource(await rpc.call('Write', { id: id('korn'), dataJson: '{"name":"Korn"}', version: '0' }));
  const cases: Array<[string, Promise<Answer>, number, string]> = [
    ['create-only of an existing name', rpc.call('Write', { id: id('korn'), dataJson: '{"name":"Korn"}', version: '0' }), grpc.status.ABORTED, 'CAS_FAILED'],
    ['CAS on a stale version', rpc.call('Write', { id: id('korn'), dataJson: '{"name":"K"}', version: '1' }), grpc.status.ABORTED, 'CAS_FAILED'],
    ['read of a missing name', rpc.call('Read', { id: id('nobody') }), grpc.status.NOT_FOUND, 'NOT_FOUND'],
    ['read with another uid', rpc.call('Read', { id: id('korn', 'demo.v1.Artist', { uid: '01ARZ3NDEKTSV4RRFFQ69G5FAV' }) }), grpc.status.NOT_FOUND, 'NOT_FOUND'],
    ['read with another group version', rpc.call('Read', { id: id('korn', 'demo.v2.Artist') }), grpc.status.INVALID_ARGUMENT, 'GROUP_VERSION_MISMATCH'],
    ['write naming another uid', rpc.call('Write', { id: id('korn', 'demo.v1.Artist', { uid: '01ARZ3NDEKTSV4RRFFQ69G5FAV' }), dataJson: '{"name":"K"}' }), grpc.status.FAILED_PRECONDITION, 'UID_MISMATCH'],
    ['data against the schema', rpc.call('Write', { id: id('x'), dataJson: '{"name":"X","genre":"polka"}' }), grpc.status.INVALID_ARGUMENT, 'INVALID_ARGUMENT'],
    ['a float where the schema wants an integer', rpc.call('Write', { id: id('a', 'demo.v1.Album'), dataJson: '{"title":"A","year":1999.5}' }), grpc.status.INVALID_ARGUMENT, 'INVALID_ARGUMENT'],
    ['data_json that is not JSON', rpc.call('Write', { id: id('x'), dataJson: '{"name":' }), grpc.status.INVALID_ARGUMENT, 'INVALID_ARGUMENT'],
    ['data_json missing', rpc.call('Write', { id: id('x') }), grpc.status.INVALID_ARGUMENT, 'INVALID_ARGUMENT'],
    ['id missing', rpc.call('Read', {}), grpc.status.INVALID_ARGUMENT, 'INVALID_ARGUMENT'],
    ['a bad name', rpc.call('Read', { id: id('Not A Label') }), grpc.status.INVALID_ARGUMENT, 'INVALID_ARGUMENT'],
    ['an unknown type', rpc.call('Read', { id: id('x', 'nope.v1.Thing') }), grpc.status.INVALID_ARGUMENT, 'INVALID_ARGUMENT'],
    ['a namespace on a cluster-scoped type', rpc.call('Read', { id: { type: 'demo.v1.Executive', tenancy: { namespace: 'ns' }, name: 'x' } }), grpc.status.INVALID_ARGUMENT, 'INVALID_ARGUMENT'],
    ['a version that is not decimal', rpc.call('Delete', { id: id('korn'), version: 'abc' }), grpc.status.INVALID_ARGUMENT, 'INVALID_ARGUMENT'],
    ['a status write without uid', rpc.call('WriteStatus', { id: id('korn'), key: 'c', observedGeneration: korn.generation }), grpc.status.INVALID_ARGUMENT, 'INVALID_ARGUMENT'],
    ['a condition state that does not exist', rpc.call('WriteStatus', { id: { ...id('korn'), uid: korn.id.uid }, key: 'c', observedGeneration: korn.generation, conditions: [{ type: 'A', state: 'MAYBE' }] }), grpc.status.INVALID_ARGUMENT, 'INVALID_ARGUMENT'],
    ['ListByOwner without an owner', rpc.call('ListByOwner', {}), grpc.status.INVALID_ARGUMENT, 'INVALID_ARGUMENT'],
    ['data_json over 1 MiB', rpc.call('Write', { id: id('big'), dataJson: JSON.stringify({ name: 'x'.repeat(1024 * 1024) }) }), grpc.status.RESOURCE_EXHAUSTED, 'TOO_LARGE'],
    ['a type whose access hook refuses (no token)', rpc.call('Read', { id: id('s', 'test.v1.Secret') }), grpc.status.PERMISSION_DENIED, 'PERMISSION_DENIED'],
  ];
  for (const [what, p, grpcCode, code] of cases) {
    const e = errorOf(await p);
    t.same([grpc.status[e.grpc], e.code], [grpc.status[grpcCode], code], what);
    t.ok(e.message.length > 0, `${what}: the status message says why`);
  }
  const mismatch = errorOf(await rpc.call('Read', { id: id('korn', 'demo.v2.Artist') }));
  t.same(mismatch.details, { stored_type: 'demo.v1.Artist', requested_type: 'demo.v2.Artist' }, 'GROUP_VERSION_MISMATCH carries the stored and requested types in cairn-error-details-json, snake_case');
  const cas = errorOf(await rpc.call('Write', { id: id('korn'), dataJson: '{"name":"K"}', version: '99999' }));
  t.same([cas.code, cas.details], ['CAS_FAILED', { expected: '99999', actual: korn.version }], 'CAS_FAILED: expected and actual as decimal strings');
  const created = errorOf(await rpc.call('Write', { id: id('korn'), dataJson: '{"name":"K"}', version: '0' }));
  t.same(created.details, { expected: '0', actual: korn.version }, 'create-only on an existing resource: expected "0"');
  const schema = errorOf(await rpc.call('Write', { id: id('x'), dataJson: '{"name":"X","genre":"polka"}' }));
  t.ok(Array.isArray(schema.details['schema_errors']), 'schema errors are in the details');

  const withToken = new grpc.Metadata();
  withToken.set('authorization', 'Bearer open-sesame');
  t.equal(errorOf(await rpc.call('Read', { id: id('s', 'test.v1.Secret') }, { metadata: withToken })).code, 'NOT_FOUND', 'the bearer token reaches the access hook');

  const bug = errorOf(await rpc.call('Write', { id: id('b', 'test.v1.Buggy'), dataJson: '{}' }));
  t.same([bug.grpc, bug.code], [grpc.status.INTERNAL, 'INTERNAL'], 'a bug in a hook is INTERNAL');
  t.match(logged, [{ obj: { method: 'Write', err: 'planted bug in a mutate hook' } }], 'and is logged');

  setCoordinator(undefined);
  const stopped = errorOf(await rpc.call('Read', { id: id('korn') }));
  t.same([stopped.grpc, stopped.code], [grpc.status.UNAVAILABLE, 'UNAVAILABLE'], 'a node that does not run (stopped, or not started within the deadline) is UNAVAILABLE');
});

t.test('bytes that do not decode, unknown fields and unknown enum values are INVALID_ARGUMENT', async (t) => {
  const { rpc } = await harness(t);
  const garbage = errorOf(await rpc.call('Read', Buffer.from([0x0a, 0xff, 0xff, 0xff, 0x0f])));
  t.same([garbage.grpc, garbage.code], [grpc.status.INVALID_ARGUMENT, 'INVALID_ARGUMENT'], 'a truncated message');
  // id (field 1) holding a ResourceId whose type (field 1) is the invalid UTF-8 sequence c3 28.
  const badUtf8 = Buffer.from([0x0a, 0x05, 0x0a, 0x03, 0xc3, 0x28, 0x41]);
  t.equal(errorOf(await rpc.call('Read', badUtf8)).code, 'INVALID_ARGUMENT', 'a string that is not UTF-8');
  const known = Buffer.from((pb.ReadRequest as unknown as Codec).encode({ id: id('korn') }).finish());
  const unknownTop = errorOf(await rpc.call('Read', Buffer.concat([known, Buffer.from([0x78, 0x01])])));
  t.equal(unknownTop.code, 'INVALID_ARGUMENT', 'an unknown top-level field (number 15)');
  t.match(unknownTop.message, /unknown field \(number 15\)/);
  // id (field 1) holding a ResourceId with an extra field 9: tag 0x4a, length 1, "x".
  const nested = Buffer.concat([Buffer.from([0x0a, 0x0c]), Buffer.from([0x0a, 0x07]), Buffer.from('demo.v1'), Buffer.from([0x4a, 0x01, 0x78])]);
  const unknownNested = errorOf(await rpc.call('Read', nested));
  t.match(unknownNested.message, /ReadRequest\.id has an unknown field \(number 9\)/, 'an unknown field inside a nested message, with its path');
  const enumValue = errorOf(await rpc.call('Read', { id: id('korn'), consistency: 7 }));
  t.same([enumValue.grpc, enumValue.code], [grpc.status.INVALID_ARGUMENT, 'INVALID_ARGUMENT'], 'an unknown consistency value');
  t.match(enumValue.message, /consistency 7 is not a known value/);
  t.ok(resource(await rpc.call('Write', { id: id('still-up'), dataJson: '{"name":"Up"}' })), 'the service still answers');
});

t.test('a write that cannot commit before the deadline is TIMEOUT / DEADLINE_EXCEEDED from the server', async (t) => {
  const registry = new TypeRegistry();
  registerDemoTypes(registry);
  const cluster = new LocalCluster({ seed: 5, writeHooks: registryWriteHooks(registry) });
  await cluster.bootstrap(['n1', 'n2', 'n3']);
  const leader = await cluster.waitForLeader();
  const server = new grpc.Server();
  addResourceGrpcService(server, new ResourceService(runningNode({ coordinator: leader.coordinator }), registry, testClock));
  const rpc = caller(await bind(server));
  t.teardown(async () => {
    rpc.close();
    server.forceShutdown();
    await cluster.close();
  });
  for (const n of [...cluster.nodes.values()]) if (n.id !== leader.id) await cluster.crash(n.id);
  const a = await rpc.call('Write', { id: id('lost'), dataJson: '{"name":"Lost"}' }, { deadlineMs: 1500 });
  const e = errorOf(a);
  t.same([e.grpc, e.code], [grpc.status.DEADLINE_EXCEEDED, 'TIMEOUT'], 'the server answered TIMEOUT (with its code) before the caller gave up');
  t.match(e.message, /may or may not/, 'and says the outcome is unknown');
});

t.test('error details in trailers are ASCII JSON, bounded in size', async (t) => {
  const md = grpcErrorOf(new CairnError(ErrorCode.INVALID_ARGUMENT, 'naïve', { note: 'café ☕', control: '\u007f' })).metadata;
  const raw = md.get('cairn-error-details-json')[0] as string;
  t.match(raw, /^[\x20-\x7e]*$/, 'only printable ASCII');
  t.same(JSON.parse(raw), { note: 'café ☕', control: '\u007f' }, 'and parses back to the same details');
  const big = grpcErrorOf(new CairnError(ErrorCode.INVALID_ARGUMENT, 'x', { blob: 'x'.repeat(20_000) })).metadata;
  t.same(JSON.parse(big.get('cairn-error-details-json')[0] as string), { truncated: true }, 'oversized details are replaced');
  const internal = grpcErrorOf(new CairnError(ErrorCode.NOT_LEADER, 'not the leader', { leader: 'n2' }));
  t.same([internal.code, internal.metadata.get('cairn-error-code')[0]], [grpc.status.UNAVAILABLE, 'UNAVAILABLE'], 'internal codes surface as their public code');
});

t.test('List and ListByOwner page over gRPC: limit, continue, one revision; bad tokens are INVALID_ARGUMENT, lost ones OUT_OF_RANGE / COMPACTED', async (t) => {
  const { rpc } = await harness(t);
  const owner = resource(await rpc.call('Write', { id: id('owner'), dataJson: '{"name":"o"}' }));
  for (let i = 0; i < 5; i++) await rpc.call('Write', { id: id(`al${i}`, 'demo.v1.Album'), dataJson: `{"title":"t${i}"}`, owner: { ...id('owner'), uid: owner.id.uid } });
  const names: string[] = [];
  const revisions = new Set<unknown>();
  let cont = '';
  let pages = 0;
  do {
    const a = await rpc.call('List', { type: 'demo.v1.Album', limit: 2, continue: cont });
    if (a.err) throw new Error(a.err.details);
    names.push(...(a.res?.['resources'] as ResourceOut[]).map((r) => r.id.name));
    revisions.add(a.res?.['revision']);
    t.equal(a.headers?.get('cairn-revision')[0], a.res?.['revision'], 'each page sends its revision as metadata');
    cont = a.res?.['continue'] as string;
    if (pages > 10) throw new Error(`paging does not end: ${JSON.stringify(a.res)}`);
    if (pages === 0) await rpc.call('Write', { id: id('al9', 'demo.v1.Album'), dataJson: '{"title":"later"}' });
    pages++;
  } while (cont !== '');
  t.same(names, ['al0', 'al1', 'al2', 'al3', 'al4'], 'every page, nothing written after the first');
  t.equal(pages, 3);
  t.equal(revisions.size, 1, 'one revision for all pages');

  const byOwner: string[] = [];
  cont = '';
  do {
    const a = await rpc.call('ListByOwner', { ownerUid: owner.id.uid, limit: 3, continue: cont });
    byOwner.push(...(a.res?.['resources'] as ResourceOut[]).map((r) => r.id.name));
    cont = a.res?.['continue'] as string;
    if (byOwner.length > 20) throw new Error(`paging does not end: ${JSON.stringify(a.res)}`);
  } while (cont !== '');
  t.same(byOwner, ['al0', 'al1', 'al2', 'al3', 'al4'], 'ListByOwner pages');

  const first = await rpc.call('List', { type: 'demo.v1.Album', limit: 1 });
  const token = first.res?.['continue'] as string;
  const other = errorOf(await rpc.call('List', { type: 'demo.v1.Artist', limit: 1, continue: token }));
  t.same([other.grpc, other.code], [grpc.status.INVALID_ARGUMENT, 'INVALID_ARGUMENT'], 'a token with another filter');
  const garbled = errorOf(await rpc.call('List', { type: 'demo.v1.Album', continue: 'eyJ2IjoxfQ' }));
  t.same([garbled.grpc, garbled.code], [grpc.status.INVALID_ARGUMENT, 'INVALID_ARGUMENT'], 'a garbled token');
  const decoded = JSON.parse(Buffer.from(token, 'base64url').toString()) as Record<string, unknown>;
  const gone = Buffer.from(JSON.stringify({ ...decoded, r: '3' })).toString('base64url');
  const compacted = errorOf(await rpc.call('List', { type: 'demo.v1.Album', continue: gone }));
  t.same([compacted.grpc, compacted.code], [grpc.status.OUT_OF_RANGE, 'COMPACTED'], 'a revision this node does not hold');
  t.equal(compacted.details['revision'], '3');
});

t.test('a stored version\'s cached encoding owns exactly its bytes: it pins no 8 KiB Buffer-pool slab', (t) => {
  const store = new ResourceStore();
  const kept: Uint8Array[] = [];
  for (let i = 1; i <= 50; i++) {
    const w = store.write(
      { id: { type: { group: 'demo', groupVersion: 'v1', kind: 'Artist' }, tenancy: { partition: 'default', namespace: 'default' }, name: `a${i}` }, data: { name: `artist ${i}` } },
      { revision: i as Revision, time: '2026-11-27T14:00:00.000Z', newUid: `uid-${i}`, newGeneration: `gen-${i}` },
    );
    if (!w.ok) throw new Error(w.error.message);
    t.ok(Object.isFrozen(w.value.resource), 'a stored version is frozen (cached)');
    const b = encodedResource(w.value.resource);
    t.equal(encodedResource(w.value.resource), b, 'encoded once: the second call answers from the cache');
    kept.push(b);
  }
  t.ok(
    kept.every((b) => b.byteOffset === 0 && b.buffer.byteLength === b.byteLength),
    `each cached encoding is its own buffer of its own size (sizes ${kept.slice(0, 3).map((b) => `${b.byteLength}/${b.buffer.byteLength}`).join(', ')}, ...)`,
  );
  t.end();
});
