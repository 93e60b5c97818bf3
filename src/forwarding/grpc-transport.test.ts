/**
 * The cluster port's part in failover: which broken Raft streams are reported as a lost
 * connection (one closed under the peer, not one the peer ended), and that a peer we hear
 * from again gets our messages at once instead of after our retry backoff.
 */
import * as grpc from '@grpc/grpc-js';
import t, { type Test } from 'tap';
import { silentLogger, type NodeId, type Term } from '../base/index.js';
import type { Message } from '../raft/index.js';
import { addClusterService } from './cluster-service.js';
import { encodeMessage } from './codec.js';
import { ClientPool, type RaftBatchMsg } from './grpc-defs.js';
import { GrpcTransport } from './grpc-transport.js';

const n = (s: string): NodeId => s as NodeId;
const CLUSTER = 'c1';

function heartbeat(from: string, to: string): Message {
  return { type: 'heartbeat', from: n(from), to: n(to), term: 2 as Term, commit: 0 as never, readSeq: 0 };
}

async function until(what: string, cond: () => boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

/** A cluster port for node n1 that records what its transport is told. */
async function clusterPort(t: Test): Promise<{ address: string; lost: NodeId[]; delivered: Message[]; stopping: { value: boolean } }> {
  const transport = new GrpcTransport({ self: n('n1'), clusterId: () => CLUSTER, addressOf: () => undefined, pool: new ClientPool(), logger: silentLogger });
  const lost: NodeId[] = [];
  const delivered: Message[] = [];
  transport.onConnectionLost((peer) => lost.push(peer));
  transport.onMessage((m) => delivered.push(m));
  const stopping = { value: false };
  const server = new grpc.Server();
  addClusterService(server, {
    self: n('n1'),
    advertiseAddr: '127.0.0.1:0',
    clusterId: () => CLUSTER,
    coordinator: () => undefined,
    transport: () => transport,
    bootstrapExpect: 0,
    logger: silentLogger,
    stopping: () => stopping.value,
  });
  const port = await new Promise<number>((resolve, reject) => server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))));
  t.teardown(() => {
    server.forceShutdown();
    void transport.close();
  });
  return { address: `127.0.0.1:${port}`, lost, delivered, stopping };
}

t.test('a Raft stream that breaks before its peer said goodbye is reported; one the peer ended is not', async (t) => {
  const port = await clusterPort(t);
  const pool = new ClientPool();
  t.teardown(() => pool.close());
  const batch: RaftBatchMsg = { clusterId: CLUSTER, from: 'n2', to: 'n1', messages: [encodeMessage(heartbeat('n2', 'n1'))] };

  // The peer's own transport ends its stream when it closes (shutdown) or the address changes.
  const sender = new GrpcTransport({ self: n('n2'), clusterId: () => CLUSTER, addressOf: () => port.address, pool, logger: silentLogger });
  sender.send([heartbeat('n2', 'n1')]);
  await until('the first batch', () => port.delivered.length === 1);
  await sender.close();
  const ended = pool.get(port.address).raft(() => {});
  ended.write({ ...batch, from: 'n3', messages: [encodeMessage(heartbeat('n3', 'n1'))] });
  ended.write({ ...batch, from: 'n3', messages: [] }); // goodbye
  await until('the second batch', () => port.delivered.length === 2);
  await new Promise<void>((resolve) => {
    ended.on('status', () => resolve());
    ended.end();
  });
  t.same(port.lost, [], 'ended by the peer after its goodbye: nothing reported');

  const broken = pool.get(port.address).raft(() => {});
  broken.on('error', () => {});
  broken.write(batch);
  await until('the third batch', () => port.delivered.length === 3);
  broken.cancel(); // closed under the stream, without the peer ending it (RST_STREAM)
  await until('the report', () => port.lost.length > 0);
  t.same(port.lost, ['n2'], 'broken: the peer that sent on it is reported');

  port.stopping.value = true;
  const ours = pool.get(port.address).raft(() => {});
  ours.on('error', () => {});
  ours.write(batch);
  await until('the fourth batch', () => port.delivered.length === 4);
  ours.cancel();
  await new Promise((resolve) => setTimeout(resolve, 100));
  t.same(port.lost, ['n2'], 'while this node shuts down, the streams it breaks are not reported');
});

t.test("a second stream under a peer's name that breaks is not that peer's loss while the peer's own stream runs", async (t) => {
  const port = await clusterPort(t);
  const pool = new ClientPool();
  t.teardown(() => pool.close());
  const batch: RaftBatchMsg = { clusterId: CLUSTER, from: 'n2', to: 'n1', messages: [encodeMessage(heartbeat('n2', 'n1'))] };
  const own = pool.get(port.address).raft(() => {});
  own.on('error', () => {});
  own.write(batch);
  await until('the own stream', () => port.delivered.length === 1);
  // Another stream claiming to be n2 (anything that reaches the port can), broken at once.
  const other = pool.get(port.address).raft(() => {});
  other.on('error', () => {});
  other.write(batch);
  await until('the other stream', () => port.delivered.length === 2);
  other.cancel();
  // A stream from n3 broken after it: its report shows the other's break was handled.
  const probe = pool.get(port.address).raft(() => {});
  probe.on('error', () => {});
  probe.write({ ...batch, from: 'n3', messages: [encodeMessage(heartbeat('n3', 'n1'))] });
  await until('the probe stream', () => port.delivered.length === 3);
  probe.cancel();
  await until('the probe report', () => port.lost.includes(n('n3')));
  t.same(port.lost, ['n3'], "n2's second stream broke, but n2's own stream still runs: n2 is not reported");
  own.cancel();
  await until('the own stream report', () => port.lost.includes(n('n2')));
  t.same(port.lost, ['n3', 'n2'], 'its last stream broken: n2 is reported');
});

/** A pool whose streams record their writes and can be failed by the test. */
class FakePool {
  readonly streams: { written: RaftBatchMsg[]; fail: (err: Partial<grpc.ServiceError>) => void }[] = [];
  get(): unknown {
    return {
      raft: (cb: (err: grpc.ServiceError | null) => void) => {
        const s = { written: [] as RaftBatchMsg[], fail: (err: Partial<grpc.ServiceError>) => cb(err as grpc.ServiceError) };
        this.streams.push(s);
        return {
          write: (b: RaftBatchMsg) => (s.written.push(b), true),
          on: () => undefined,
          once: () => undefined,
          end: () => undefined,
        };
      },
    };
  }
}

t.test('after a failed stream, messages to the peer are dropped until the retry time, unless we hear from it', async (t) => {
  const pool = new FakePool();
  const transport = new GrpcTransport({ self: n('n1'), clusterId: () => CLUSTER, addressOf: () => 'n2:7500', pool: pool as unknown as ClientPool, logger: silentLogger });
  t.teardown(() => transport.close());
  transport.onMessage(() => {});
  // Fail streams until the retry backoff is long (50 ms doubling: the fifth failure waits 800 ms).
  for (let i = 1; i <= 5; i++) {
    await until(`stream ${i}`, () => {
      if (pool.streams.length < i) transport.send([heartbeat('n1', 'n2')]);
      return pool.streams.length === i;
    });
    pool.streams[i - 1]?.fail({ code: grpc.status.UNAVAILABLE, details: 'Connection dropped' });
  }
  const dropped = transport.droppedMessages;
  transport.send([heartbeat('n1', 'n2')]);
  await until('the drop', () => transport.droppedMessages > dropped);
  t.equal(pool.streams.length, 5, 'within the backoff nothing is sent');

  transport.deliver(heartbeat('n2', 'n1')); // the peer is up again (it restarted, say)
  transport.send([{ type: 'vote-resp', from: n('n1'), to: n('n2'), term: 3 as Term, reject: false }]);
  await until('a new stream', () => pool.streams.length === 6, 500);
  t.equal(pool.streams[5]?.written.length, 1, 'the answer went out at once on a new stream');
});
