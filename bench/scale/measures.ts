/**
 * `make bench-scale`'s measures on a running cluster (bench/systems.ts's CairnSystem and
 * EtcdSystem): the load, each node's memory, a snapshot, a follower's restart and a fresh 4th
 * member's catch-up. Every wait polls with a deadline (bench/procs.ts `until`).
 */
import { execFile } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { CairnClient } from '../../src/client/index.js';
import { EtcdKv } from '../etcd-client.js';
import { metricValue } from '../fanout/proc.js';
import { CAIRN_NAMESPACE, CAIRN_TYPE, etcdKey, keyName, makeValue } from '../kv-data.js';
import { freePorts, now, rssMiB, ServerProcess, until } from '../procs.js';
import { CAIRN_BIN, cairnAgentEnv, REPO_ROOT, type CairnSystem, type EtcdSystem } from '../systems.js';
import type { CatchUpPath, NodeMemory } from './report.js';

export type ScaleCluster = { readonly kind: 'Cairn'; readonly sys: CairnSystem } | { readonly kind: 'etcd'; readonly sys: EtcdSystem };

const log = (text: string): void => {
  process.stdout.write(`${new Date().toISOString().slice(11, 19)} ${text}\n`);
};

export const loadAvg = (): number[] => os.loadavg().map((v) => Math.round(v * 100) / 100);

// ---- Load ------------------------------------------------------------------------------------

/**
 * Writes keys 0..n-1 (256-byte values) with `inFlight` requests in flight, `batch` keys a
 * request; each request's keys and values are made when it is sent (nothing holds all n). A
 * failed request is tried again up to 3 times, then the load stops with its error. A progress
 * line with the rate and the ETA every `everyMs`.
 */
export async function loadKeys(label: string, n: number, inFlight: number, batch: number, send: (from: number, count: number) => Promise<void>, everyMs = 5_000): Promise<{ ms: number; perSecond: number; requests: number }> {
  let next = 0;
  let done = 0;
  let requests = 0;
  const started = now();
  let lastDone = 0;
  let lastAt = started;
  const timer = setInterval(() => {
    const t = now();
    const rate = ((done - lastDone) * 1000) / (t - lastAt);
    const overall = (done * 1000) / (t - started);
    const eta = overall > 0 ? (n - done) / overall : Number.NaN;
    log(`${label}: loaded ${done.toLocaleString('en-US')}/${n.toLocaleString('en-US')} (${((100 * done) / n).toFixed(0)}%), ${Math.round(rate).toLocaleString('en-US')}/s now, ${Math.round(overall).toLocaleString('en-US')}/s overall, ETA ${Number.isFinite(eta) ? `${Math.ceil(eta)} s` : '?'}`);
    lastDone = done;
    lastAt = t;
  }, everyMs);
  const worker = async (): Promise<void> => {
    while (next < n) {
      const from = next;
      const count = Math.min(batch, n - from);
      next += count;
      for (let attempt = 1; ; attempt++) {
        try {
          await send(from, count);
          break;
        } catch (e) {
          if (attempt >= 3) throw new Error(`${label}: keys ${from}..${from + count - 1} failed ${attempt} times: ${e instanceof Error ? e.message : String(e)}`);
        }
      }
      requests++;
      done += count;
    }
  };
  try {
    await Promise.all(Array.from({ length: Math.min(inFlight, Math.ceil(n / batch)) }, worker));
  } finally {
    clearInterval(timer);
  }
  const ms = now() - started;
  return { ms, perSecond: (n * 1000) / ms, requests };
}

/** The load's sender for one system, to its leader: Cairn one Write per key; etcd one Put, or one Txn of several. */
export function sender(c: ScaleCluster, leader: number): { send: (from: number, count: number) => Promise<void>; close: () => void } {
  if (c.kind === 'Cairn') {
    const client = new CairnClient({ endpoints: [c.sys.grpcAddrs[leader] as string], timeoutMs: 30_000 });
    return {
      send: async (from, count) => {
        for (let k = from; k < from + count; k++) {
          await client.write({ type: CAIRN_TYPE, name: keyName(k), tenancy: { namespace: CAIRN_NAMESPACE } }, { data: { title: makeValue(0, k) } }, { requestId: `scale-${k}-${from}` });
        }
      },
      close: () => client.close(),
    };
  }
  const kv = new EtcdKv(c.sys.clientAddrs[leader] as string, 30_000);
  return {
    send: async (from, count) => {
      if (count === 1) {
        await kv.put(Buffer.from(etcdKey(from)), Buffer.from(makeValue(0, from)));
        return;
      }
      const pairs = Array.from({ length: count }, (_, j) => ({ key: Buffer.from(etcdKey(from + j)), value: Buffer.from(makeValue(0, from + j)) }));
      await kv.putMany(pairs);
    },
    close: () => kv.close(),
  };
}

// ---- Memory ----------------------------------------------------------------------------------

/** Each node's RSS (/proc VmRSS) and, for Cairn, its used V8 heap (/metrics). */
export async function nodeMemory(c: ScaleCluster): Promise<NodeMemory> {
  const n = c.sys.nodeNames.length;
  const rssBytes = Array.from({ length: n }, (_, i) => (rssMiB(c.sys.pid(i)) ?? Number.NaN) * 2 ** 20);
  const heapBytes = await Promise.all(
    Array.from({ length: n }, async (_, i) => {
      if (c.kind !== 'Cairn') return Number.NaN;
      const text = await c.sys.metricsText(i);
      return (text === undefined ? undefined : metricValue(text, 'cairn_process_nodejs_heap_size_used_bytes')) ?? Number.NaN;
    }),
  );
  return { rssBytes, heapBytes };
}

/** etcd: its db file's size (etcd_mvcc_db_total_size_in_bytes); Cairn: cairn_store_data_bytes; on the leader. */
export async function dataBytes(c: ScaleCluster, leader: number): Promise<number> {
  const text = await c.sys.metricsText(leader);
  const name = c.kind === 'Cairn' ? 'cairn_store_data_bytes' : 'etcd_mvcc_db_total_size_in_bytes';
  return (text === undefined ? undefined : metricValue(text, name)) ?? Number.NaN;
}

// ---- Snapshot --------------------------------------------------------------------------------

function run(cmd: string, args: readonly string[], timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(cmd, args, { timeout: timeoutMs, env: { ...process.env, ETCDCTL_API: '3' }, maxBuffer: 16 * 2 ** 20 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`${cmd} ${args.join(' ')}: ${err.message}; ${stderr.trim()}`));
      else resolve(stdout);
    });
  });
}

/** A GET whose body is streamed to `file`; rejects on a status other than 200. */
function download(url: string, file: string, timeoutMs: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { timeout: timeoutMs }, (res) => {
      if (res.statusCode !== 200) {
        res.resume();
        reject(new Error(`GET ${url}: HTTP ${String(res.statusCode)}`));
        return;
      }
      pipeline(res, createWriteStream(file)).then(resolve, reject);
    });
    req.on('timeout', () => req.destroy(new Error(`GET ${url}: no answer in ${timeoutMs} ms`)));
    req.on('error', reject);
  });
}

/** Saves a snapshot from the leader into `dir`: Cairn GET /v1/snapshot, etcd `etcdctl snapshot save`. */
export async function saveSnapshot(c: ScaleCluster, leader: number, dir: string): Promise<{ ms: number; bytes: number; how: string }> {
  const file = path.join(dir, `${c.kind}-snapshot.bin`);
  const started = now();
  let how: string;
  if (c.kind === 'Cairn') {
    await download(`http://${c.sys.httpAddrs[leader] as string}/v1/snapshot`, file, 600_000);
    how = 'GET /v1/snapshot';
  } else {
    await run('etcdctl', ['--endpoints', c.sys.clientAddrs[leader] as string, 'snapshot', 'save', file], 600_000);
    how = 'etcdctl snapshot save';
  }
  const ms = now() - started;
  return { ms, bytes: (await stat(file)).size, how };
}

// ---- Restart ---------------------------------------------------------------------------------

async function httpStatus(url: string, timeoutMs: number): Promise<{ status: number; body: string } | undefined> {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
    return { status: res.status, body: await res.text() };
  } catch {
    return undefined;
  }
}

/** Node i ready: Cairn /readyz answers 200; etcd /health answers 200 with "health":"true". */
async function ready(c: ScaleCluster, i: number): Promise<boolean> {
  if (c.kind === 'Cairn') return (await httpStatus(`http://${c.sys.httpAddrs[i] as string}/readyz`, 1000))?.status === 200;
  const r = await httpStatus(`http://${c.sys.clientAddrs[i] as string}/health`, 1000);
  return r?.status === 200 && /"health"\s*:\s*"true"/.test(r.body);
}

/** SIGTERM follower i, start it again, and time from the start until it is ready (polled every 20 ms, up to 5 minutes). */
export async function restartFollower(c: ScaleCluster, i: number): Promise<{ node: string; stopMs: number; ms: number; how: string }> {
  const t0 = now();
  await c.sys.term(i);
  const stopMs = now() - t0;
  c.sys.resetClients();
  const started = now();
  c.sys.restart(i);
  await until(`${c.sys.nodeNames[i] as string} ready after its restart`, 300_000, async () => ((await ready(c, i)) ? true : undefined), () => '', 20);
  return { node: c.sys.nodeNames[i] as string, stopMs, ms: now() - started, how: c.kind === 'Cairn' ? 'GET /readyz 200' : 'GET /health 200, health true' };
}

// ---- A new member ----------------------------------------------------------------------------

interface AgentSelf {
  readonly applied_index: number;
  readonly last_index: number;
  readonly snapshot_index: number;
}

async function agentSelf(httpAddr: string): Promise<AgentSelf | undefined> {
  const r = await httpStatus(`http://${httpAddr}/v1/agent/self`, 1000);
  return r?.status === 200 ? (JSON.parse(r.body) as AgentSelf) : undefined;
}

/** The sum of every series of a counter in Prometheus text (any labels); undefined if it has none. */
export function counterSum(text: string, name: string): number | undefined {
  let sum: number | undefined;
  for (const line of text.split('\n')) {
    if (!line.startsWith(name) || (line[name.length] !== '{' && line[name.length] !== ' ')) continue;
    const v = Number(line.slice(line.lastIndexOf(' ') + 1));
    if (Number.isFinite(v)) sum = (sum ?? 0) + v;
  }
  return sum;
}

/**
 * Adds a fresh, empty 4th member and times it from its start until it has applied the leader's
 * last index as it was right after the add. Cairn: the leader must hold a snapshot first (so the
 * member goes through InstallSnapshot: --snapshot-entries, default 10,000), POST
 * /v1/operator/raft/peers, then `cairn agent --join`; the path is "snapshot" when the new node's
 * snapshot_index is above 0 once caught up. etcd: `etcdctl member add`, then etcd with
 * --initial-cluster-state existing; "snapshot" when its etcd_network_snapshot_receive_success
 * counter moved, "log" when it has no series, "unknown" when /metrics did not answer. The member is stopped (SIGTERM) at the end.
 */
export async function addMember(c: ScaleCluster, leader: number, dir: string): Promise<{ ms: number; targetIndex: number; path: CatchUpPath; note: string }> {
  if (c.kind === 'Cairn') return addCairnMember(c.sys, leader, dir);
  return addEtcdMember(c.sys, leader, dir);
}

async function addCairnMember(sys: CairnSystem, leader: number, dir: string): Promise<{ ms: number; targetIndex: number; path: CatchUpPath; note: string }> {
  const leaderHttp = sys.httpAddrs[leader] as string;
  let leaderSnap = 0;
  try {
    leaderSnap = await until('the Cairn leader to hold a snapshot (snapshot_index > 0)', 30_000, async () => {
      const s = await agentSelf(leaderHttp);
      return s !== undefined && s.snapshot_index > 0 ? s.snapshot_index : undefined;
    });
  } catch {
    leaderSnap = 0; // measured anyway; the path says what happened
  }
  const [grpcPort, httpPort] = await freePorts(2);
  const grpcAddr = `127.0.0.1:${grpcPort as number}`;
  const httpAddr = `127.0.0.1:${httpPort as number}`;
  const res = await fetch(`http://${leaderHttp}/v1/operator/raft/peers`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ id: 'n4', address: grpcAddr }), signal: AbortSignal.timeout(30_000) });
  if (res.status !== 200) throw new Error(`POST /v1/operator/raft/peers: HTTP ${res.status} ${await res.text()}`);
  await res.text();
  const target = (await agentSelf(leaderHttp))?.last_index ?? Number.NaN;
  const proc = new ServerProcess(
    'n4',
    process.execPath,
    [CAIRN_BIN, 'agent', '--node-id', 'n4', '--data-dir', path.join(dir, 'n4'), '--grpc-addr', grpcAddr, '--http-addr', httpAddr, '--demo-types', '--join', sys.grpcAddrs.join(','), '--log-level', 'info'],
    path.join(dir, 'n4.log'),
    cairnAgentEnv(),
    REPO_ROOT,
  );
  const started = now();
  proc.start();
  try {
    let last: AgentSelf | undefined;
    await until(`n4 to apply index ${target}`, 600_000, async () => {
      proc.assertAlive();
      last = await agentSelf(httpAddr);
      return last !== undefined && last.applied_index >= target ? true : undefined;
    }, () => JSON.stringify(last ?? null), 20);
    const ms = now() - started;
    const snap = last?.snapshot_index ?? 0;
    return { ms, targetIndex: target, path: snap > 0 ? 'snapshot' : 'log', note: `leader snapshot_index ${leaderSnap}; n4 snapshot_index ${snap}, applied ${last?.applied_index ?? '?'}` };
  } finally {
    await proc.term(20_000);
  }
}

async function addEtcdMember(sys: EtcdSystem, leader: number, dir: string): Promise<{ ms: number; targetIndex: number; path: CatchUpPath; note: string }> {
  const [clientPort, peerPort] = await freePorts(2);
  const clientUrl = `http://127.0.0.1:${clientPort as number}`;
  const peerUrl = `http://127.0.0.1:${peerPort as number}`;
  // etcd refuses a member add ("unhealthy cluster") until every member has been connected to the
  // leader for 5 s (--strict-reconfig-check): right after a restart, so it is tried again.
  let lastErr = '';
  const out = await until('etcdctl member add e4', 60_000, async () => {
    try {
      return await run('etcdctl', ['--endpoints', sys.clientAddrs[leader] as string, 'member', 'add', 'e4', `--peer-urls=${peerUrl}`], 30_000);
    } catch (e) {
      lastErr = e instanceof Error ? e.message.split('\n')[0] ?? '' : String(e);
      if (!/unhealthy cluster/.test(lastErr + String(e))) throw e;
      return undefined;
    }
  }, () => lastErr, 500);
  const initialCluster = /ETCD_INITIAL_CLUSTER="([^"]+)"/.exec(out)?.[1];
  if (initialCluster === undefined) throw new Error(`etcdctl member add printed no ETCD_INITIAL_CLUSTER: ${out}`);
  const leaderKv = new EtcdKv(sys.clientAddrs[leader] as string, 10_000);
  const target = (await leaderKv.status(5_000)).raftIndex;
  leaderKv.close();
  const proc = new ServerProcess(
    'e4',
    'etcd',
    ['--name', 'e4', '--data-dir', path.join(dir, 'e4'), '--listen-client-urls', clientUrl, '--advertise-client-urls', clientUrl, '--listen-peer-urls', peerUrl, '--initial-advertise-peer-urls', peerUrl, '--initial-cluster', initialCluster, '--initial-cluster-state', 'existing', '--logger', 'zap', '--log-outputs', 'stderr', '--log-level', 'warn'],
    path.join(dir, 'e4.log'),
  );
  const started = now();
  proc.start();
  const kv = new EtcdKv(`127.0.0.1:${clientPort as number}`, 10_000);
  try {
    let applied = 0;
    await until(`e4 to apply index ${target}`, 600_000, async () => {
      proc.assertAlive();
      try {
        applied = (await kv.status(1000)).raftAppliedIndex;
      } catch {
        return undefined;
      }
      return applied >= target ? true : undefined;
    }, () => `applied ${applied}`, 20);
    const ms = now() - started;
    const metrics = await httpStatus(`${clientUrl}/metrics`, 2000);
    const text = metrics?.status === 200 ? metrics.body : '';
    const received = counterSum(text, 'etcd_network_snapshot_receive_success');
    // The counter is a vector: it has no series at all until the first snapshot is received.
    const path: CatchUpPath = text === '' ? 'unknown' : (received ?? 0) > 0 ? 'snapshot' : 'log';
    return { ms, targetIndex: target, path, note: `e4 etcd_network_snapshot_receive_success ${received ?? 'has no series (none received)'}, applied ${applied}` };
  } finally {
    kv.close();
    await proc.term(20_000);
  }
}
