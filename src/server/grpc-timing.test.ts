/**
 * requestTimer on a real gRPC server over loopback, with a hand-moved clock: the public API's
 * unary calls are timed from arrival to status (errors too); streams and other services not.
 */
import * as grpc from '@grpc/grpc-js';
import t from 'tap';
import { requestTimer } from './grpc-timing.js';

const raw = { requestSerialize: (b: Buffer) => b, requestDeserialize: (b: Buffer) => b, responseSerialize: (b: Buffer) => b, responseDeserialize: (b: Buffer) => b };
const def = {
  Read: { path: '/cairn.resource.v1.ResourceService/Read', requestStream: false, responseStream: false, ...raw },
  WatchList: { path: '/cairn.resource.v1.ResourceService/WatchList', requestStream: false, responseStream: true, ...raw },
  Hello: { path: '/cairn.cluster.v1.Cluster/Hello', requestStream: false, responseStream: false, ...raw },
} satisfies grpc.ServiceDefinition;

t.test('unary calls of the resource API are timed from arrival to status; streams and the cluster service are not', async (t) => {
  const clock = { ms: 0 };
  const seen: [string, number][] = [];
  const server = new grpc.Server({ interceptors: [requestTimer((m, s) => seen.push([m, s]), () => clock.ms)] });
  server.addService(def, {
    Read: (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => {
      clock.ms += 5;
      if (call.request.toString() === 'fail') cb({ code: grpc.status.NOT_FOUND, details: 'no such thing' });
      else cb(null, Buffer.from('ok'));
    },
    WatchList: (call: grpc.ServerWritableStream<Buffer, Buffer>) => {
      clock.ms += 100;
      call.write(Buffer.from('event'));
      call.end();
    },
    Hello: (_call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => {
      clock.ms += 100;
      cb(null, Buffer.from('hi'));
    },
  });
  const port = await new Promise<number>((resolve, reject) => server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))));
  t.teardown(() => server.forceShutdown());
  const Client = grpc.makeGenericClientConstructor(def, 'Test');
  const client = new Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure()) as unknown as Record<string, (...a: unknown[]) => unknown>;
  t.teardown(() => (client as unknown as grpc.Client).close());
  const unary = (name: string, body: string): Promise<string> =>
    new Promise((resolve) => {
      (client[name] as (req: Buffer, cb: (e: grpc.ServiceError | null, r?: Buffer) => void) => void).call(client, Buffer.from(body), (e, r) => resolve(e ? `error ${e.code}` : (r?.toString() ?? '')));
    });
  t.equal(await unary('Read', 'x'), 'ok');
  t.equal(await unary('Read', 'fail'), `error ${grpc.status.NOT_FOUND}`);
  t.equal(await unary('Hello', 'x'), 'hi');
  await new Promise<void>((resolve, reject) => {
    const s = (client['WatchList'] as (req: Buffer) => grpc.ClientReadableStream<Buffer>).call(client, Buffer.from('w'));
    s.on('data', () => {});
    s.on('end', resolve);
    s.on('error', reject);
  });
  t.same(seen, [
    ['Read', 0.005],
    ['Read', 0.005],
  ], 'both Read calls, the failed one too; neither the stream nor the cluster service');
});
