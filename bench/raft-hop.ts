/**
 * One Raft message hop over the cluster port, between two processes: the round trip of a
 * heartbeat sent by `GrpcTransport.send` in this process, echoed by a child process's transport
 * from its `onMessage` handler (as the driver answers), back to this one. Measures what the
 * transport adds per hop (event-loop turns, HTTP/2 scheduling), not Raft.
 *
 *   make build && node dist/bench/raft-hop.js [--pings N] [--rounds R] [--busy-us U]
 *
 * R rounds (default 5) of N sequential pings (default 2,000, after 200 warm-up pings); prints
 * the p50 / p90 / p99 round trip in µs per round and the median of the round medians.
 * `--busy-us U` keeps both event loops partly busy meanwhile, as a node's driver is: a
 * background task spins U µs about every millisecond (a 1 ms timer between), so a message or
 * completion that arrives during a spin waits for it. Writes nothing to bench/results/.
 */
import * as grpc from '@grpc/grpc-js';
import { fork } from 'node:child_process';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import { silentLogger, type NodeId, type Term } from '../src/base/index.js';
import { addClusterService, ClientPool, GrpcTransport } from '../src/forwarding/index.js';
import type { Message } from '../src/raft/index.js';
import { median, percentileSorted } from './report.js';

const argv = process.argv.slice(2);
const flag = (name: string): string | undefined => {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : undefined;
};
const PINGS = Number(flag('--pings') ?? 2000);
const ROUNDS = Number(flag('--rounds') ?? 5);
const BUSY_US = Number(flag('--busy-us') ?? 0);
const CLUSTER = 'hop';

const heartbeat = (from: string, to: string, readSeq: number): Message => ({ type: 'heartbeat', from: from as NodeId, to: to as NodeId, term: 1 as Term, commit: 0 as never, readSeq });

/** Spins `us` µs about every millisecond (a timer), so a message arriving meanwhile waits up to `us` µs. */
function busyLoop(us: number): void {
  if (us <= 0) return;
  const spin = (): void => {
    const until = performance.now() + us / 1000;
    while (performance.now() < until) {
      // busy, as a driver applying and sending would be
    }
    setTimeout(spin, 1);
  };
  setTimeout(spin, 1);
}

/** A node: its cluster port on a free loopback port and its transport to `peer`. */
async function node(self: string, peerAddress: () => string | undefined): Promise<{ transport: GrpcTransport; address: string; close: () => void }> {
  const pool = new ClientPool();
  const transport = new GrpcTransport({ self: self as NodeId, clusterId: () => CLUSTER, addressOf: () => peerAddress(), pool, logger: silentLogger });
  const server = new grpc.Server();
  addClusterService(server, { self: self as NodeId, advertiseAddr: '127.0.0.1:0', clusterId: () => CLUSTER, coordinator: () => undefined, transport: () => transport, bootstrapExpect: 0, logger: silentLogger });
  const port = await new Promise<number>((resolve, reject) => server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))));
  return {
    transport,
    address: `127.0.0.1:${port}`,
    close: () => {
      void transport.close();
      pool.close();
      server.forceShutdown();
    },
  };
}

async function echo(): Promise<void> {
  let parent: string | undefined;
  const n = await node('n2', () => parent);
  n.transport.onMessage((m) => {
    if (m.type === 'heartbeat') n.transport.send([heartbeat('n2', 'n1', m.readSeq)]);
  });
  process.on('message', (msg: { parent?: string; stop?: boolean }) => {
    if (msg.parent !== undefined) parent = msg.parent;
    if (msg.stop === true) {
      n.close();
      process.exit(0);
    }
  });
  busyLoop(BUSY_US);
  process.send?.({ address: n.address });
}

async function main(): Promise<void> {
  const child = fork(fileURLToPath(import.meta.url), ['--echo', ...argv], { stdio: 'inherit' });
  const childAddress = await new Promise<string>((resolve) => child.once('message', (m: { address: string }) => resolve(m.address)));
  const n = await node('n1', () => childAddress);
  child.send({ parent: n.address });
  let waiting: ((seq: number) => void) | undefined;
  n.transport.onMessage((m) => {
    if (m.type === 'heartbeat') waiting?.(m.readSeq);
  });
  let seq = 0;
  let lost = 0;
  child.once('exit', (code, signal) => {
    process.stderr.write(`the echo process exited (${code ?? signal})\n`);
    process.exit(1);
  });
  // Delivery is best-effort (a stream that fails drops its queue): a ping unanswered for 2 s is
  // counted as lost and the next one sent.
  const ping = async (): Promise<number> => {
    for (;;) {
      const rtt = await new Promise<number | undefined>((resolve) => {
        const mine = ++seq;
        const started = performance.now();
        const timer = setTimeout(() => resolve(undefined), 2000);
        waiting = (got) => {
          if (got !== mine) return;
          clearTimeout(timer);
          resolve((performance.now() - started) * 1000);
        };
        n.transport.send([heartbeat('n1', 'n2', mine)]);
      });
      if (rtt !== undefined) return rtt;
      lost++;
    }
  };
  busyLoop(BUSY_US);
  process.stdout.write(`raft hop round trip, ${new Date().toISOString()}, ${os.cpus().length} CPUs, load average ${os.loadavg()[0]?.toFixed(2)}, busy loops ${BUSY_US} µs\n`);
  for (let i = 0; i < 200; i++) await ping();
  const medians: number[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    const rtt: number[] = [];
    for (let i = 0; i < PINGS; i++) rtt.push(await ping());
    rtt.sort((a, b) => a - b);
    medians.push(median(rtt));
    process.stdout.write(`round ${r + 1}: p50 ${median(rtt).toFixed(0)} µs, p90 ${percentileSorted(rtt, 90).toFixed(0)} µs, p99 ${percentileSorted(rtt, 99).toFixed(0)} µs\n`);
  }
  medians.sort((a, b) => a - b);
  process.stdout.write(`median of round p50s: ${median(medians).toFixed(0)} µs (spread ${(medians[0] ?? 0).toFixed(0)}-${(medians[medians.length - 1] ?? 0).toFixed(0)}); ${lost} pings lost; load average ${os.loadavg()[0]?.toFixed(2)}\n`);
  child.removeAllListeners('exit');
  child.send({ stop: true });
  n.close();
}

if (argv.includes('--echo')) await echo();
else await main();
