import * as grpc from '@grpc/grpc-js';
import t, { type Test } from 'tap';
import { cairn } from '../gen/resource.js';
import { CairnClient, CairnClientError, isCairnClientError, isOutcomeUnknown } from './index.js';
import { retryAfterOf } from './wire.js';

/**
 * The client and access control, against fake nodes: the token goes on every call and every
 * watch stream; UNAUTHENTICATED, PERMISSION_DENIED and NO_SPACE are final, typed and not
 * retried (on this node or another); RATE_LIMITED is retried on the same node after the wait
 * it asked for, within the deadline; a token is never put in an error message.
 */

const pb = cairn.resource.v1;

interface Codec {
  encode(m: object): { finish(): Uint8Array };
}

const SECRET = `cairn_01jd7q3abcdefghjkmnpqrstvw_${'0123456789abcdef'.repeat(4)}`;

/** How the fake answers one call: ok, or a Cairn error (with optional retry-after metadata). */
type Answer = 'ok' | { readonly code: string; readonly grpc: grpc.status; readonly message?: string; readonly retryAfterS?: string; readonly details?: Record<string, unknown> };

interface Seen {
  readonly method: string;
  readonly authorization: string | undefined;
}

class FakeNode {
  readonly seen: Seen[] = [];
  /** Answers for the next calls, in order; when empty, 'ok'. */
  readonly script: Answer[] = [];
  address = '';
  private readonly server = new grpc.Server();

  static async start(t: Test): Promise<FakeNode> {
    const node = new FakeNode();
    const raw = (name: string, responseStream: boolean): grpc.MethodDefinition<Buffer, Buffer> => ({
      path: `/cairn.resource.v1.ResourceService/${name}`,
      requestStream: false,
      responseStream,
      requestSerialize: (b: Buffer) => b,
      requestDeserialize: (b: Buffer) => b,
      responseSerialize: (b: Buffer) => b,
      responseDeserialize: (b: Buffer) => b,
    });
    const resource = {
      id: { type: 'demo.v1.Artist', tenancy: { partition: 'default', namespace: 'default' }, name: 'korn', uid: 'u1' },
      version: '3',
      generation: 'g',
      dataJson: '{"name":"Korn"}',
    };
    const ok: Record<string, () => Buffer> = {
      Read: () => Buffer.from((pb.ReadResponse as unknown as Codec).encode({ resource, revision: '3' }).finish()),
      Write: () => Buffer.from((pb.WriteResponse as unknown as Codec).encode({ resource }).finish()),
      List: () => Buffer.from((pb.ListResponse as unknown as Codec).encode({ resources: [resource], revision: '3' }).finish()),
    };
    const unary = (name: string) => (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => {
      const answer = node.record(name, call.metadata);
      if (answer === 'ok') cb(null, (ok[name] as () => Buffer)());
      else cb(node.error(answer));
    };
    node.server.addService(
      { read: raw('Read', false), write: raw('Write', false), list: raw('List', false), watchList: raw('WatchList', true) },
      {
        read: unary('Read'),
        write: unary('Write'),
        list: unary('List'),
        watchList: (call: grpc.ServerWritableStream<Buffer, Buffer>) => {
          const answer = node.record('WatchList', call.metadata);
          if (answer !== 'ok') {
            setImmediate(() => call.emit('error', node.error(answer)));
            return;
          }
          call.write(Buffer.from((pb.WatchEvent as unknown as Codec).encode({ watch: 0, revision: '3', change: resource }).finish()));
          call.write(Buffer.from((pb.WatchEvent as unknown as Codec).encode({ watch: 0, revision: '3', tail: {} }).finish()));
        },
      },
    );
    const port = await new Promise<number>((resolve, reject) => node.server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))));
    node.address = `127.0.0.1:${port}`;
    t.teardown(() => node.server.forceShutdown());
    return node;
  }

  private record(method: string, metadata: grpc.Metadata): Answer {
    const auth = metadata.get('authorization')[0];
    this.seen.push({ method, authorization: typeof auth === 'string' ? auth : undefined });
    return this.script.shift() ?? 'ok';
  }

  private error(a: Exclude<Answer, 'ok'>): Partial<grpc.StatusObject> {
    const metadata = new grpc.Metadata();
    metadata.set('cairn-error-code', a.code);
    metadata.set('cairn-error-details-json', JSON.stringify(a.details ?? {}));
    if (a.retryAfterS !== undefined) metadata.set('retry-after', a.retryAfterS);
    return { code: a.grpc, details: a.message ?? `${a.code} from the fake`, metadata };
  }
}

const ref = { type: 'demo.v1.Artist', name: 'korn' };

t.test('the token goes on every call and on the watch stream, as authorization: Bearer', async (t) => {
  const node = await FakeNode.start(t);
  const client = new CairnClient({ endpoints: [node.address], token: SECRET, timeoutMs: 5_000 });
  t.teardown(() => client.close());
  await client.read(ref);
  await client.write(ref, { data: { name: 'Korn' } });
  await client.list('demo.v1.Artist');
  const w = client.watch({ type: 'demo.v1.Artist' });
  for await (const e of w) if (e.type === 'tail') break;
  t.same(
    node.seen.map((s) => s.method),
    ['Read', 'Write', 'List', 'WatchList'],
  );
  for (const s of node.seen) t.equal(s.authorization, `Bearer ${SECRET}`, s.method);

  const anonymous = new CairnClient({ endpoints: [node.address], timeoutMs: 5_000 });
  t.teardown(() => anonymous.close());
  await anonymous.read(ref);
  t.equal(node.seen.at(-1)?.authorization, undefined, 'no token: no authorization metadata');
});

t.test('a token that cannot be a header value is refused up front, without showing it', async (t) => {
  for (const bad of ['', 'has space', 'line\nbreak', 'ümlaut', 'x'.repeat(4097)]) {
    let err: unknown;
    try {
      new CairnClient({ endpoints: ['127.0.0.1:1'], token: bad }).close();
    } catch (e) {
      err = e;
    }
    t.ok(isCairnClientError(err, 'INVALID_ARGUMENT'), JSON.stringify(bad.slice(0, 20)));
    if (bad.length > 3) t.notOk((err as Error).message.includes(bad), 'the value is not in the message');
  }
});

t.test('UNAUTHENTICATED, PERMISSION_DENIED and NO_SPACE are final: typed, not retried on this node or the next', async (t) => {
  const a = await FakeNode.start(t);
  const b = await FakeNode.start(t);
  const client = new CairnClient({ endpoints: [a.address, b.address], endpointOrder: 'listed', token: SECRET, timeoutMs: 5_000 });
  t.teardown(() => client.close());
  const cases: Array<[string, grpc.status, () => Promise<unknown>]> = [
    ['UNAUTHENTICATED', grpc.status.UNAUTHENTICATED, () => client.read(ref)],
    ['PERMISSION_DENIED', grpc.status.PERMISSION_DENIED, () => client.write(ref, { data: { name: 'K' } })],
    ['NO_SPACE', grpc.status.RESOURCE_EXHAUSTED, () => client.write(ref, { data: { name: 'K' } })],
  ];
  for (const [code, status, call] of cases) {
    const before = a.seen.length + b.seen.length;
    a.script.push({ code, grpc: status, message: `token lacks "write" on demo.v1.Artist in default/default` });
    const err = await call().then(
      () => undefined,
      (e: unknown) => e,
    );
    t.ok(isCairnClientError(err, code as CairnClientError['code']), `${code}: ${String(err)}`);
    t.equal(a.seen.length + b.seen.length - before, 1, `${code}: one attempt, no retry, no failover`);
    t.notOk(isOutcomeUnknown(err), `${code}: a refused write is known not to have happened`);
    t.match((err as Error).message, /token lacks "write" on demo\.v1\.Artist/, 'the server message (the missing grant) is kept');
  }
  t.equal(b.seen.length, 0, 'the second node was never tried');
});

t.test('RATE_LIMITED: retried on the same node after the retry-after it asked for', async (t) => {
  const a = await FakeNode.start(t);
  const b = await FakeNode.start(t);
  const client = new CairnClient({ endpoints: [a.address, b.address], endpointOrder: 'listed', token: SECRET, timeoutMs: 5_000 });
  t.teardown(() => client.close());
  a.script.push({ code: 'RATE_LIMITED', grpc: grpc.status.RESOURCE_EXHAUSTED, details: { retry_after_ms: 200 } });
  const started = Date.now();
  const written = await client.write(ref, { data: { name: 'Korn' } });
  const elapsed = Date.now() - started;
  t.equal(written.version, '3');
  t.same(
    a.seen.map((s) => s.method),
    ['Write', 'Write'],
    'the write was sent again to the same node',
  );
  t.equal(b.seen.length, 0, 'not moved to another node to dodge the limit');
  t.ok(elapsed >= 190, `waited the 200 ms asked for (${elapsed} ms)`);

  // retry-after in seconds (metadata) that the deadline cannot wait out: fail at once, typed.
  a.script.push({ code: 'RATE_LIMITED', grpc: grpc.status.RESOURCE_EXHAUSTED, retryAfterS: '30' });
  const t0 = Date.now();
  // A 10 s deadline and a 5 s bound: "at once" vs "waited out the deadline" with room for a
  // loaded machine (a 2 s deadline and a 1 s bound left too little).
  const err = await client.read(ref, { timeoutMs: 10_000 }).then(
    () => undefined,
    (e: unknown) => e,
  );
  t.ok(isCairnClientError(err, 'RATE_LIMITED'), String(err));
  t.ok(Date.now() - t0 < 5_000, `gave up without waiting out the 10 s deadline (${Date.now() - t0} ms)`);
  t.match((err as Error).message, /asked to wait 30000 ms, past the deadline/);
});

t.test('a watch refused with PERMISSION_DENIED ends with that error; RATE_LIMITED is waited out and resumed', async (t) => {
  const node = await FakeNode.start(t);
  const client = new CairnClient({ endpoints: [node.address], token: SECRET, timeoutMs: 5_000 });
  t.teardown(() => client.close());
  node.script.push({ code: 'PERMISSION_DENIED', grpc: grpc.status.PERMISSION_DENIED, message: 'token lacks "watch" on demo.v1.Artist in default/default' });
  const denied = client.watch({ type: 'demo.v1.Artist' }, { reconnectBaseMs: 10 });
  const err = await (async () => {
    try {
      for await (const e of denied) void e;
    } catch (e) {
      return e;
    }
    return undefined;
  })();
  t.ok(isCairnClientError(err, 'PERMISSION_DENIED'), String(err));
  t.equal(node.seen.filter((s) => s.method === 'WatchList').length, 1, 'not retried');

  node.script.push({ code: 'RATE_LIMITED', grpc: grpc.status.RESOURCE_EXHAUSTED, details: { retry_after_ms: 100 } });
  const limited = client.watch({ type: 'demo.v1.Artist' }, { reconnectBaseMs: 10 });
  const types: string[] = [];
  for await (const e of limited) {
    types.push(e.type);
    if (e.type === 'tail') break;
  }
  t.same(types, ['change', 'tail']);
  t.equal(node.seen.filter((s) => s.method === 'WatchList').length, 3, 'the refused stream, then the one that served');
  t.equal(limited.stats.lostBy['RATE_LIMITED'], 1);
});

t.test('retryAfterOf: the retry_after_ms detail, else retry-after seconds; capped; junk ignored', async (t) => {
  const md = (v?: string): grpc.Metadata => {
    const m = new grpc.Metadata();
    if (v !== undefined) m.set('retry-after', v);
    return m;
  };
  t.equal(retryAfterOf(md(), { retry_after_ms: 250 }), 250);
  t.equal(retryAfterOf(md('2'), { retry_after_ms: '250' }), 250, 'the detail wins');
  t.equal(retryAfterOf(md('2'), {}), 2_000);
  t.equal(retryAfterOf(md('3600'), {}), 60_000, 'capped at a minute');
  t.equal(retryAfterOf(md('soon'), {}), undefined);
  t.equal(retryAfterOf(md('-1'), { retry_after_ms: -5 }), undefined);
  t.equal(retryAfterOf(undefined, {}), undefined);
});
