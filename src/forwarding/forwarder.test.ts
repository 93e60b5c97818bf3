/**
 * The forwarder's deadlines on the shared sweep (docs/performance.md "CPU per request"): a call
 * carries no gRPC deadline (no timer per call on either side), and the sweep cancels it once its
 * time is up, answering TIMEOUT (the outcome is unknown: it may have reached the leader).
 */
import * as grpc from '@grpc/grpc-js';
import t, { type Test } from 'tap';
import { CairnError, DeadlineSweep, ErrorCode, type Clock, type NodeId, type Timers } from '../base/index.js';
import { clusterServiceDefinition, ClientPool, type ForwardRequestMsg, type ForwardResponseMsg } from './grpc-defs.js';
import { GrpcForwarder } from './forwarder.js';

async function until(what: string, cond: () => boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

/** A clock moved by hand and timers that never fire on their own: the test runs the sweep. */
const hand = { now: 0 };
const clock: Clock = { nowMs: () => hand.now, monotonicMs: () => hand.now };
const timers: Timers = { setInterval: () => 1, clearInterval: () => {}, setTimeout: () => 1, clearTimeout: () => {}, yield: () => Promise.resolve() };

/** A leader whose Forward holds every call unanswered until told, recording what it saw. */
async function leader(t: Test): Promise<{ address: string; calls: Array<{ deadline: grpc.Deadline; cancelled: boolean; answer: (r: ForwardResponseMsg) => void }> }> {
  const calls: Array<{ deadline: grpc.Deadline; cancelled: boolean; answer: (r: ForwardResponseMsg) => void }> = [];
  const server = new grpc.Server();
  server.addService(clusterServiceDefinition, {
    raft: () => {},
    hello: () => {},
    forward: (call: grpc.ServerUnaryCall<ForwardRequestMsg, ForwardResponseMsg>, cb: grpc.sendUnaryData<ForwardResponseMsg>) => {
      const c = { deadline: call.getDeadline(), cancelled: false, answer: (r: ForwardResponseMsg) => cb(null, r) };
      call.on('cancelled', () => (c.cancelled = true));
      calls.push(c);
    },
  });
  const port = await new Promise<number>((resolve, reject) => server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))));
  t.teardown(() => server.forceShutdown());
  return { address: `127.0.0.1:${port}`, calls };
}

t.test('a forwarded call past its deadline is cancelled by the sweep and answers TIMEOUT', async (t) => {
  const l = await leader(t);
  const pool = new ClientPool();
  t.teardown(() => pool.close());
  const sweep = new DeadlineSweep(clock, timers, { sweepMs: 10 });
  const fwd = new GrpcForwarder({ self: 'n2' as NodeId, clusterId: () => 'c1', addressOf: () => l.address, pool, deadlines: { sweep, clock } });
  hand.now = 1_000;
  const outcome = fwd.forward('n1' as NodeId, { kind: 'envelope', envelope: new Uint8Array([0x10, 0xc0]) }, 500).then(
    () => 'resolved',
    (e: unknown) => e,
  );
  await until('the leader to receive the call', () => l.calls.length === 1);
  t.equal(l.calls[0]?.deadline, Infinity, 'no gRPC deadline travelled (no timer per call on the leader)');
  t.equal(sweep.size, 1, 'the deadline waits in the sweep');
  hand.now = 1_499;
  sweep.sweep();
  t.equal(sweep.size, 1, 'not yet at 499 ms of 500');
  hand.now = 1_500;
  sweep.sweep();
  const e = await outcome;
  t.ok(e instanceof CairnError && e.code === ErrorCode.TIMEOUT, `TIMEOUT, got ${String(e)}`);
  t.match((e as Error).message, /no answer within 500 ms; the operation may or may not have been applied/);
  await until('the leader to see the cancel', () => l.calls[0]?.cancelled === true);
  t.pass('the leader saw the call cancelled');
});

t.test('an answered call cancels its deadline', async (t) => {
  const l = await leader(t);
  const pool = new ClientPool();
  t.teardown(() => pool.close());
  const sweep = new DeadlineSweep(clock, timers, { sweepMs: 10 });
  const fwd = new GrpcForwarder({ self: 'n2' as NodeId, clusterId: () => 'c1', addressOf: () => l.address, pool, deadlines: { sweep, clock } });
  const outcome = fwd.forward('n1' as NodeId, { kind: 'transfer', to: 'n3' as NodeId }, 500);
  await until('the leader to receive the call', () => l.calls.length === 1);
  l.calls[0]?.answer({ result: new Uint8Array(0) } as ForwardResponseMsg);
  t.equal(await outcome, undefined, 'resolved with the leader answer');
  t.equal(sweep.size, 0, 'nothing left pending in the sweep');
});
