/**
 * The cluster port's part in failover: which broken Raft streams are reported as a lost
 * connection (one closed under the peer, not one the peer ended), and that a peer we hear
 * from again gets our messages at once instead of after our retry backoff.
 */
import * as grpc from '@grpc/grpc-js';
import t, { type Test } from 'tap';
import { silentLogger, type NodeId, type Term } from '../base/index.js';
import type { Entry, Message } from '../raft/index.js';
import { addClusterService } from './cluster-service.js';
import { encodeMessage } from './codec.js';
import { ClientPool, clusterServiceDefinition, type RaftAckMsg, type RaftBatchMsg } from './grpc-defs.js';
import { GrpcTransport } from './grpc-transport.js';

const n = (s: string): NodeId => s as NodeId;
const CLUSTER = 'c1';

function heartbeat(from: string, to: string, readSeq = 0): Message {
  return { type: 'heartbeat', from: n(from), to: n(to), term: 2 as Term, commit: 0 as never, readSeq };
}

async function until(what: string, cond: () => boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

/** A cluster port for node n1 that records what its transport is told. */
async function clusterPort(t: Test): Promise<{ address: string; lost: NodeId[]; delivered: Message[]; stopping: { value: boolean }; transport: GrpcTransport }> {
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
  return { address: `127.0.0.1:${port}`, lost, delivered, stopping, transport };
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

/**
 * Counts check phases (setImmediate turns) from now until `done()` is true, polling at each one:
 * how many turns of the loop a hop took.
 */
function immediatesUntil(done: () => boolean, limit = 1000): Promise<number> {
  return new Promise((resolve, reject) => {
    let turns = 0;
    const step = (): void => {
      if (done()) return resolve(turns);
      if (++turns > limit) return reject(new Error(`not done after ${limit} setImmediate turns`));
      setImmediate(step);
    };
    setImmediate(step);
  });
}

t.test('a sent batch is on the wire before a setImmediate queued at send time runs: the peer has it one loop turn later', async (t) => {
  const port = await clusterPort(t);
  const pool = new ClientPool();
  t.teardown(() => pool.close());
  const sender = new GrpcTransport({ self: n('n2'), clusterId: () => CLUSTER, addressOf: () => port.address, pool, logger: silentLogger });
  t.teardown(() => sender.close());
  // Open the stream and connection first: the first batch also pays for the connection set-up.
  sender.send([heartbeat('n2', 'n1')]);
  await until('the first batch', () => port.delivered.length === 1);
  // Let the stream settle (the first write's completion), then measure a few hops.
  await new Promise((resolve) => setTimeout(resolve, 20));
  const turns: number[] = [];
  for (let i = 0; i < 5; i++) {
    const before = port.delivered.length;
    sender.send([heartbeat('n2', 'n1'), heartbeat('n2', 'n1', 7)]);
    turns.push(await immediatesUntil(() => port.delivered.length >= before + 2));
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  // Written at send: HTTP/2 flushes its socket in this iteration's check phase (a native
  // immediate that runs before the JS ones), the peer reads it in the next poll phase. A
  // transport that defers its write by a setImmediate needs one more turn for the HTTP/2 flush.
  t.ok(
    turns.every((x) => x <= 1),
    `each batch reached the peer's handler within one setImmediate turn (turns: ${turns.join(', ')})`,
  );
});

t.test('each send writes one batch per peer at once, before send returns', async (t) => {
  const pool = new FakePool();
  const addresses = new Map([
    ['n2', 'n2:7500'],
    ['n3', 'n3:7500'],
  ]);
  const transport = new GrpcTransport({ self: n('n1'), clusterId: () => CLUSTER, addressOf: (id) => addresses.get(id), pool: pool as unknown as ClientPool, logger: silentLogger });
  t.teardown(() => transport.close());
  transport.send([heartbeat('n1', 'n2'), heartbeat('n1', 'n3'), heartbeat('n1', 'n2', 5)]);
  t.equal(pool.streams.length, 2, 'one stream per peer');
  t.same(
    pool.streams.map((s) => s.written.map((b) => [b.to, b.messages.length])),
    [[['n2', 2]], [['n3', 1]]],
    "one write per peer, holding that peer's messages in order, done before send returned",
  );
  transport.send([heartbeat('n1', 'n2')]);
  t.equal(pool.streams[0]?.written.length, 2, 'the next send is the next write');
});

/** An append carrying `bytes` of entry data (about that many bytes on the wire). */
function bigAppend(from: string, to: string, index: number, bytes: number): Message {
  const entry: Entry = { index: index as never, term: 2 as Term, data: new Uint8Array(bytes).fill(index % 251) };
  return { type: 'app', from: n(from), to: n(to), term: 2 as Term, index: (index - 1) as never, logTerm: 2 as Term, commit: 0 as never, entries: [entry] };
}

/** A pool whose one stream takes `accept` writes and then reports backpressure until drained. */
class StallingPool {
  written: RaftBatchMsg[] = [];
  accept: number;
  private drain: (() => void) | undefined;
  constructor(accept: number) {
    this.accept = accept;
  }
  get(): unknown {
    return {
      raft: () => ({
        write: (b: RaftBatchMsg) => {
          this.written.push(b);
          return this.written.length < this.accept;
        },
        on: () => undefined,
        once: (event: string, f: () => void) => {
          if (event === 'drain') this.drain = f;
        },
        end: () => undefined,
      }),
    };
  }
  /** The stream drains and takes `more` writes before it stalls again. */
  drained(more: number): void {
    this.accept = this.written.length + more;
    const f = this.drain;
    this.drain = undefined;
    f?.();
  }
}

t.test('a peer that stops reading: its queue stays within maxQueueBytes (oldest dropped), and drains in batches of at most maxBatchBytes', async (t) => {
  const pool = new StallingPool(2);
  const maxQueueBytes = 64 * 1024;
  const maxBatchBytes = 16 * 1024;
  const transport = new GrpcTransport({ self: n('n1'), clusterId: () => CLUSTER, addressOf: () => 'n2:7500', pool: pool as unknown as ClientPool, logger: silentLogger, maxQueueBytes, maxBatchBytes });
  t.teardown(() => transport.close());
  let peak = 0;
  for (let i = 1; i <= 500; i++) {
    transport.send([bigAppend('n1', 'n2', i, 1000)]);
    peak = Math.max(peak, transport.queuedBytes());
  }
  t.equal(pool.written.length, 2, 'writes stop once the stream reports backpressure');
  t.ok(peak <= maxQueueBytes, `the queue never held more than maxQueueBytes (peak ${peak})`);
  t.ok(transport.droppedMessages >= 500 - 2 - Math.floor(maxQueueBytes / 1000), `the oldest were dropped (${transport.droppedMessages})`);
  pool.drained(1000);
  t.equal(transport.queuedBytes(), 0, 'on drain, everything queued is written');
  const after = pool.written.slice(2);
  t.ok(after.length >= 4, `as several batches (${after.length})`);
  for (const b of after) t.ok(b.messages.reduce((x, m) => x + m.length, 0) <= maxBatchBytes, 'each within maxBatchBytes');
  t.equal(after.reduce((x, b) => x + b.messages.length, 0) + 2 + transport.droppedMessages, 500, 'every message written or counted as dropped');
});

t.test('over real gRPC, a peer that never reads does not make the sender grow: it queues at most maxQueueBytes', async (t) => {
  // A cluster port whose Raft handler pauses its stream and never reads: HTTP/2 flow control
  // stops the sender's writes, grpc-js reports backpressure, and the transport queues and drops.
  const server = new grpc.Server();
  server.addService(clusterServiceDefinition, {
    raft: (call: grpc.ServerReadableStream<RaftBatchMsg, RaftAckMsg>) => call.pause(),
    forward: () => undefined,
    hello: () => undefined,
  });
  const port = await new Promise<number>((resolve, reject) => server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))));
  t.teardown(() => server.forceShutdown());
  const pool = new ClientPool();
  t.teardown(() => pool.close());
  const maxQueueBytes = 256 * 1024;
  const transport = new GrpcTransport({ self: n('n2'), clusterId: () => CLUSTER, addressOf: () => `127.0.0.1:${port}`, pool, logger: silentLogger, maxQueueBytes });
  t.teardown(() => transport.close());
  let peak = 0;
  let index = 1;
  // 64 MiB offered in 16 KiB appends, a few per turn: far more than the windows and buffers.
  const deadline = Date.now() + 20_000;
  while (index <= 4096 && Date.now() < deadline) {
    transport.send([bigAppend('n2', 'n1', index++, 16 * 1024), bigAppend('n2', 'n1', index++, 16 * 1024)]);
    peak = Math.max(peak, transport.queuedBytes());
    await new Promise((resolve) => setImmediate(resolve));
  }
  t.equal(index, 4097, 'all offered');
  t.ok(peak <= maxQueueBytes, `the queue never held more than maxQueueBytes (peak ${peak})`);
  t.ok(transport.droppedMessages > 3000, `most were dropped, not buffered (${transport.droppedMessages} of 4096)`);
  t.ok(transport.sentMessages < 1000, `only what the windows and grpc-js's buffer took was handed to gRPC (${transport.sentMessages})`);
});

t.test('a received batch is handed to the driver in one go: every message before any microtask runs', async (t) => {
  const port = await clusterPort(t);
  // The driver steps each message and schedules one Ready by queueMicrotask: if the batch came
  // in pieces, a Ready would run between them.
  const seen: { readSeq: number; microtaskRan: boolean }[] = [];
  let ran = { value: true };
  port.transport.onMessage((m) => {
    if (ran.value) {
      const flag = { value: false };
      ran = flag;
      queueMicrotask(() => (flag.value = true));
    }
    seen.push({ readSeq: m.type === 'heartbeat' ? m.readSeq : -1, microtaskRan: ran.value });
  });
  const pool = new ClientPool();
  t.teardown(() => pool.close());
  const sender = new GrpcTransport({ self: n('n2'), clusterId: () => CLUSTER, addressOf: () => port.address, pool, logger: silentLogger });
  t.teardown(() => sender.close());
  sender.send([1, 2, 3, 4].map((k) => heartbeat('n2', 'n1', k)));
  await until('the batch', () => seen.length === 4);
  t.same(
    seen,
    [1, 2, 3, 4].map((k) => ({ readSeq: k, microtaskRan: false })),
    'all four delivered, in order, in one synchronous run',
  );
});
