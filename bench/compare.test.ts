/**
 * The side-by-side benchmark's own pieces, without etcd or Cairn processes: the load
 * generator's counting (window, conflicts, key ownership) and failover timing against an
 * in-memory fake system, the hand-written etcd proto's wire encoding, the table and the chart.
 */
import t from 'tap';
import { renderChart } from './chart.js';
import protobuf from 'protobufjs';
import { fileURLToPath } from 'node:url';
import { decodeEtcdWatchResponse, encodeEtcdWatchResponse, etcdMessageSizes, etcdWatchCreateRequest, prefixRangeEnd } from './etcd-client.js';
import { fanoutRows, fanoutTable, fanoutTargetMet } from './fanout/cluster-report.js';
import type { FanoutMeasurement } from './fanout/measure.js';
import { percentiles } from './fanout/stats.js';
import type { NodesRss, WatchFanoutOutcome, WatchFanoutResult } from './watch-hook.js';
import { formatColumns } from './report.js';
import { makeValue, VALUE_BYTES, type FsyncCounter, type KvOps, type KvSystem, type NodeHealth } from './systems.js';
import { failoverTrial, runPhase, type PhaseSpec } from './workload.js';

/** A 3-node in-memory "cluster": versions per key, answers on the next turn of the event loop. */
class FakeSystem implements KvSystem {
  readonly name = 'etcd' as const;
  readonly version = 'fake';
  readonly nodeNames = ['a', 'b', 'c'];
  readonly versions = new Map<number, number>();
  /** Keys each node's ops were asked about. */
  readonly touched: Set<number>[] = [new Set(), new Set(), new Set()];
  leader = 0;
  /** While false, writes fail (as with no leader). */
  acking = true;
  /** How long after a kill writes are acknowledged again. */
  outageMs = 300;
  kills = 0;
  restarts = 0;
  /** Failover probe keys with a write in flight, and every key written while one was. */
  readonly probesInFlight = new Set<number>();
  readonly probeKeyClashes: number[] = [];
  probeKeysUsed = new Set<number>();
  /** Probes wait for a leader until their deadline (as on a real cluster) instead of failing at once. */
  holdProbes = false;

  ops(i: number): KvOps {
    const turn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));
    return {
      read: async (k) => {
        await turn();
        this.touched[i]?.add(k);
        return this.versions.get(k) ?? 0;
      },
      cas: async (k, v, value) => {
        await turn();
        if (value.length !== VALUE_BYTES) throw new Error(`value of ${value.length} bytes`);
        if ((this.versions.get(k) ?? 0) !== v) return false;
        this.versions.set(k, (v as number) + 1);
        return true;
      },
      put: async (k) => {
        await turn();
        if (!this.acking) throw new Error('no leader');
        this.versions.set(k, (this.versions.get(k) ?? 0) + 1);
      },
      probe: async (n, value, timeoutMs) => {
        if (this.probesInFlight.has(n)) this.probeKeyClashes.push(n);
        this.probesInFlight.add(n);
        this.probeKeysUsed.add(n);
        try {
          await turn();
          const deadline = Date.now() + timeoutMs;
          while (this.holdProbes && !this.acking && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 5));
          if (value.length !== VALUE_BYTES) throw new Error(`value of ${value.length} bytes`);
          if (!this.acking) throw new Error('no leader');
        } finally {
          this.probesInFlight.delete(n);
        }
      },
    };
  }

  async health(i: number): Promise<NodeHealth> {
    return { name: this.nodeNames[i] ?? '?', up: true, isLeader: i === this.leader, leader: this.nodeNames[this.leader] ?? '', applied: 1, last: 1, note: '' };
  }
  async waitHealthy(): Promise<number> {
    return this.leader;
  }
  pid(): number | undefined {
    return undefined;
  }
  async kill9(i: number): Promise<void> {
    this.kills++;
    this.acking = false;
    this.leader = (i + 1) % 3;
    setTimeout(() => {
      this.acking = true;
    }, this.outageMs).unref();
  }
  restart(): void {
    this.restarts++;
  }
  /** The faults of the SIGSTOP and drop trials, and their undoing, in order. */
  readonly faultLog: string[] = [];
  private outage(i: number): void {
    this.acking = false;
    this.leader = (i + 1) % 3;
    setTimeout(() => {
      this.acking = true;
    }, this.outageMs).unref();
  }
  pause(i: number): void {
    this.faultLog.push(`pause ${i}`);
    this.outage(i);
  }
  resume(i: number): void {
    this.faultLog.push(`resume ${i}`);
  }
  cutOff(i: number): void {
    this.faultLog.push(`cut ${i}`);
    this.outage(i);
  }
  reconnect(): void {
    this.faultLog.push('reconnect');
  }
  resetClients(): void {}
  async stop(): Promise<void> {}
  messageSizes(): Record<string, number> {
    return {};
  }
  async fsyncs(): Promise<FsyncCounter | undefined> {
    return undefined;
  }
  /** Leader changes each node has seen (its metric); `electionsDuringPhase` adds to them while a phase runs. */
  seenChanges = [0, 0, 0];
  electionsDuringPhase = 0;
  async leaderChanges(i: number): Promise<number | undefined> {
    const now = this.seenChanges[i] ?? 0;
    if (this.electionsDuringPhase > 0) this.seenChanges[i] = now + this.electionsDuringPhase;
    return now;
  }
}

const timing = { warmupMs: 50, durationMs: 300 };

t.test('uncontended CAS: every round applies, each client keeps to its own keys, all on the leader', async (t) => {
  const sys = new FakeSystem();
  sys.leader = 1;
  const spec: PhaseSpec = { id: 'cas-leader-16', kind: 'cas', clients: 16, target: 'leader', keys: 1000 };
  const r = await runPhase(sys, spec, 1, timing);
  t.ok(r.ops > 50, `ops counted in the window (${r.ops})`);
  t.equal(r.conflicts, 0, 'no conflicts between clients that own disjoint keys');
  t.equal(r.errors, 0);
  t.equal(r.attempts, r.ops);
  t.equal(r.latency.count, r.attempts, 'one latency per round');
  t.equal(r.writeLatency?.count, r.attempts, 'and one write latency per round');
  t.ok(r.latency.p50Ms <= r.latency.p99Ms && r.latency.p99Ms <= r.latency.p999Ms && r.latency.p999Ms <= r.latency.maxMs, 'percentiles ordered');
  t.ok(Math.abs(r.seconds - 0.3) < 0.1, `window length ${r.seconds} s`);
  t.ok(Math.abs(r.opsPerSec - r.ops / r.seconds) < 1e-9);
  t.equal(r.leader, 'b');
  t.equal(sys.touched[0]?.size, 0, 'no request went to a follower');
  t.equal(sys.touched[2]?.size, 0, 'no request went to a follower');
  // Client w owns keys w, w+16, ... and goes round them.
  t.ok((sys.touched[1]?.size ?? 0) > 16, 'the clients went round their own keys');
});

t.test('leader changes during a phase are counted (a needless election shows), none when there were none', async (t) => {
  const quiet = await runPhase(new FakeSystem(), { id: 'put-leader-4', kind: 'put', clients: 4, target: 'leader', keys: 1000 }, 0, timing);
  t.equal(quiet.leaderChanges, 0);
  const sys = new FakeSystem();
  sys.electionsDuringPhase = 2;
  const r = await runPhase(sys, { id: 'put-leader-4', kind: 'put', clients: 4, target: 'leader', keys: 1000 }, 0, timing);
  t.equal(r.leaderChanges, 2, 'the most any node saw between the start and the end of the phase');
});

t.test('spread: client w talks to node w mod 3', async (t) => {
  const sys = new FakeSystem();
  const r = await runPhase(sys, { id: 'cas-spread-3', kind: 'cas', clients: 3, target: 'spread', keys: 1000 }, 0, timing);
  t.ok(r.ops > 0);
  for (let i = 0; i < 3; i++) {
    const keys = [...(sys.touched[i] ?? [])];
    t.ok(keys.length > 0, `node ${i} was used`);
    t.ok(
      keys.every((k) => k % 3 === i),
      `node ${i} only saw keys of client ${i}`,
    );
  }
});

t.test('contended CAS: conflicts are counted and only applied rounds count as throughput', async (t) => {
  const sys = new FakeSystem();
  const r = await runPhase(sys, { id: 'cas-contended-64', kind: 'cas-contended', clients: 64, target: 'leader', keys: 2 }, 0, timing);
  t.ok(r.conflicts > 0, `conflicts on 2 keys with 64 clients (${r.conflicts})`);
  t.equal(r.ops + r.conflicts, r.attempts);
  t.ok(r.conflictRate > 0.5 && r.conflictRate < 1, `conflict rate ${r.conflictRate}`);
  const applied = [...sys.versions.values()].reduce((a, b) => a + b, 0);
  t.ok(r.ops <= applied, 'no more applied rounds counted than the store saw');
});

t.test('errors are counted with samples, not thrown', async (t) => {
  const sys = new FakeSystem();
  sys.acking = false;
  const r = await runPhase(sys, { id: 'put-leader-4', kind: 'put', clients: 4, target: 'leader', keys: 1000 }, 0, timing);
  t.equal(r.ops, 0);
  t.ok(r.errors > 0);
  t.ok((r.errorSamples['no leader'] ?? 0) > 0, 'the error message is kept');
});

t.test('failover: the time from the kill to the first acknowledged write sent after it', async (t) => {
  const sys = new FakeSystem();
  sys.outageMs = 400;
  const trial = await failoverTrial(sys, { probeEveryMs: 10, probeTimeoutMs: 1000, giveUpMs: 5000 });
  t.equal(sys.kills, 1);
  t.equal(sys.restarts, 1, 'the killed node is restarted');
  t.equal(trial.killed, 'a');
  t.equal(trial.newLeader, 'b');
  t.ok(trial.ms >= 400 && trial.ms < 400 + 200, `measured ${trial.ms.toFixed(0)} ms for a 400 ms outage`);
  t.ok(trial.probesFailed > 0 && trial.probesSent > trial.probesFailed, `${trial.probesSent} probes, ${trial.probesFailed} failed`);
});

t.test('failover probes held during the outage never share a key (on one key they would contend when the leader is back)', async (t) => {
  const sys = new FakeSystem();
  sys.outageMs = 400;
  sys.holdProbes = true;
  const trial = await failoverTrial(sys, { probeEveryMs: 10, probeTimeoutMs: 1000, giveUpMs: 5000 });
  t.ok(trial.probesSent > 40, `${trial.probesSent} probes sent after the kill, most held until the outage ended`);
  t.same(sys.probeKeyClashes, [], 'no key had two probe writes in flight');
  t.ok(sys.probeKeysUsed.size > 40, `${sys.probeKeysUsed.size} probe keys used`);
});

t.test('failover gives up when no write is acknowledged', async (t) => {
  const sys = new FakeSystem();
  sys.outageMs = 60_000;
  await t.rejects(failoverTrial(sys, { probeEveryMs: 10, probeTimeoutMs: 100, giveUpMs: 200 }), /no write acknowledged within 200 ms/);
});

t.test('failover by SIGSTOP and by dropped traffic: measured the same way, and the fault is undone after the trial', async (t) => {
  for (const [fault, undo] of [['sigstop', 'resume 0'], ['drop', 'reconnect']] as const) {
    const sys = new FakeSystem();
    sys.outageMs = 300;
    const trial = await failoverTrial(sys, { probeEveryMs: 10, probeTimeoutMs: 1000, giveUpMs: 5000 }, fault);
    t.equal(trial.fault, fault);
    t.same(sys.faultLog, [fault === 'sigstop' ? 'pause 0' : 'cut 0', undo], `${fault}: one fault, undone once`);
    t.equal(sys.kills + sys.restarts, 0, `${fault}: nothing killed or restarted`);
    t.equal(trial.newLeader, 'b', `${fault}: the survivors' leader, seen before the fault is undone`);
    // The upper bound only catches a trial that waited for something else (a loaded machine
    // delays the probes' turns by tens of milliseconds).
    t.ok(trial.ms >= 300 && trial.ms < 300 + 1000, `${fault}: measured ${trial.ms.toFixed(0)} ms for a 300 ms outage`);
  }
});

t.test('a failed SIGSTOP or drop trial still undoes its fault (no stopped process or drop rule outlives it)', async (t) => {
  for (const [fault, undo] of [['sigstop', 'resume 0'], ['drop', 'reconnect']] as const) {
    const sys = new FakeSystem();
    sys.outageMs = 60_000;
    await t.rejects(failoverTrial(sys, { probeEveryMs: 10, probeTimeoutMs: 100, giveUpMs: 200 }, fault), /no write acknowledged within 200 ms/);
    t.same(sys.faultLog.at(-1), undo, `${fault}: undone after the failure`);
  }
});

t.test('values are 256 bytes and differ per writer and write', async (t) => {
  t.equal(makeValue(0, 0).length, 256);
  t.equal(makeValue(255, 123456).length, 256);
  t.not(makeValue(1, 2), makeValue(2, 1));
});

t.test("the hand-written etcd proto encodes etcd's field numbers", async (t) => {
  const key = Buffer.from('k');
  const value = Buffer.alloc(256, 0x76);
  const s = etcdMessageSizes(key, value);
  // RangeRequest{key: "k"}: field 1, length-delimited: 0a 01 6b.
  t.equal(s.rangeRequest, 3);
  // TxnRequest{compare: [{target MOD (2), key "k", mod_revision 12345678}], success: [{request_put: {key "k", value: 256 bytes}}]}
  //   Compare: 10 02 (target MOD) 1a 01 6b (key) 30 ce c2 f1 05 (mod_revision: field 6, varint) = 10 bytes -> compare: 0a 0a + 10 = 12
  //   PutRequest: 0a 01 6b 12 80 02 + 256 = 262 -> RequestOp.request_put (field 2): 12 86 02 + 262 = 265 -> success: 12 89 02 + 265 = 268
  t.equal(s.txnRequest, 12 + 268);
});

t.test('formatColumns aligns a Markdown table', async (t) => {
  const out = formatColumns(['a', 'bb'], [['x', '1'], ['yyy', '22']], [false, true]);
  t.equal(out, ['| a   | bb |', '|-----|---:|', '| x   |  1 |', '| yyy | 22 |'].join('\n'));
});

t.test('the chart has both panels, one line per series, and skips missing points', async (t) => {
  const svg = renderChart({
    title: 'test',
    clients: [1, 16, 64, 256],
    throughput: [
      { label: 'A', color: '#000', dashed: false, points: [[1, 100], [16, 800], [64, 1200], [256, 1300]] },
      { label: 'B', color: '#f00', dashed: true, points: [[1, 50], [16, Number.NaN]] },
    ],
    p99: [{ label: 'A', color: '#000', dashed: false, points: [[1, 2], [16, 20], [64, 200], [256, 900]] }],
  });
  t.match(svg, /^<svg [^>]*xmlns="http:\/\/www.w3.org\/2000\/svg"/);
  t.match(svg, /throughput/);
  t.match(svg, /p99 latency/);
  t.equal((svg.match(/<path /g) ?? []).length, 3, 'two throughput lines and one p99 line');
  t.notMatch(svg, /NaN/);
  t.match(svg, /stroke-dasharray/);
});

t.test("etcd Watch: the create request watches the prefix, live changes only", async (t) => {
  t.same([...prefixRangeEnd(Buffer.from('/bench/key-'))], [...Buffer.from('/bench/key.')], "'-' + 1 is '.'");
  t.same([...prefixRangeEnd(Uint8Array.from([0x61, 0xff]))], [0x62], 'a trailing 0xff is dropped and the byte before it raised');
  t.same([...prefixRangeEnd(Uint8Array.from([0xff]))], [0], 'all 0xff: to the end of the keyspace');
  const proto = fileURLToPath(new URL('../../bench/etcd/rpc.proto', import.meta.url));
  const WatchRequest = new protobuf.Root().loadSync(proto, { keepCase: true }).lookupType('etcdserverpb.WatchRequest');
  const req = WatchRequest.toObject(WatchRequest.decode(etcdWatchCreateRequest(Buffer.from('/bench/key-'))), { bytes: String, longs: Number });
  t.same(req, { create_request: { key: Buffer.from('/bench/key-').toString('base64'), range_end: Buffer.from('/bench/key.').toString('base64') } }, 'no start_revision, no prev_kv');
});

t.test('etcd Watch: the response reader finds created, canceled and every event\'s revision', async (t) => {
  const header = { cluster_id: 2 ** 52 + 7, member_id: 12345, revision: 99, raft_term: 3 };
  const kv = (rev: number): object => ({ key: Buffer.from(`/bench/key-00000${rev}`), create_revision: 2, mod_revision: rev, version: rev - 1, value: Buffer.alloc(256, 0x76) });
  const created = decodeEtcdWatchResponse(encodeEtcdWatchResponse({ header, watch_id: 0, created: true }));
  t.same([created.created, created.canceled, created.changes], [true, false, []]);
  // Three queued changes in one response, one a delete with its previous value: fields before and after kv are skipped.
  const buf = encodeEtcdWatchResponse({ header, watch_id: 7, events: [{ type: 0, kv: kv(5) }, { type: 1, kv: kv(6), prev_kv: kv(5) }, { kv: kv(300) }] });
  const m = decodeEtcdWatchResponse(buf);
  t.same(m.changes, [5, 6, 300]);
  t.equal(m.bytes, buf.length + 5, 'message plus the gRPC prefix');
  t.notOk(m.created);
  const canceled = decodeEtcdWatchResponse(encodeEtcdWatchResponse({ header, watch_id: 7, canceled: true, compact_revision: 40, cancel_reason: 'compacted' }));
  t.same([canceled.canceled, canceled.changes], [true, []]);
  t.throws(() => decodeEtcdWatchResponse(buf.subarray(0, buf.length - 10)), /runs past the end/, 'a truncated message is an error, not a wrong answer');
});

function fanoutResult(watchers: number, o: { held: boolean; p99Ms: number; delivered?: number }): WatchFanoutResult {
  const lat = percentiles(Float64Array.from([5, o.p99Ms]));
  const mem: NodesRss = { rssMiB: [40, 300, 45] };
  const detail: FanoutMeasurement<NodesRss> = {
    watchers,
    connectMs: 1000,
    memory: { before: mem, connected: mem, underLoad: mem },
    window: { ms: 10_000, writesSent: 2000, writesAcked: 2000 },
    targetRatePerSec: 200,
    achievedRatePerSec: 200,
    rateHeld: true,
    writer: { scheduled: 2400, sent: 2400, failed: 0, firstError: undefined, maxInFlight: 3, cpuPercent: 10, ackLatencyMs: lat },
    measuredWrites: 2000,
    deliveredFraction: o.delivered ?? 1,
    latencyFromAckMs: lat,
    latencyFromSendMs: lat,
    undeliveredOlderThanMs: 5000,
    drainMs: 10,
    drained: true,
    serverCpuPercent: 50,
    serverCpuWaitPercent: 5,
    serversCpuPercent: [20, 50, 10],
    serverEventsPerSec: 200 * watchers,
    receivedEventsPerSec: 200 * watchers,
    loadGenerator: { cpuPercent: 30, cpuWaitPercent: 2, eventLoopUtilization: 0.3, rssBytes: 1, heapUsedBytes: 1 },
    watcherTotals: { messages: 1, bytes: 1, changes: 1, changeBytes: 1, bookmarks: 0, orderViolations: 0, ended: {} },
    meanEventBytes: 380,
    deliveredBytesPerChange: 380 * watchers,
    keepsUp: o.held,
    verdict: o.held ? 'keeps up' : 'falls behind',
    closeMs: 100,
  };
  return {
    watchers,
    servingNode: 'n2',
    servingIndex: 1,
    leader: 'n1',
    targetWritesPerSec: 200,
    writesPerSec: 200,
    writeRateHeld: true,
    rateHeld: o.held,
    deliveredFraction: o.delivered ?? 1,
    deliveryP50Ms: 5,
    deliveryP99Ms: o.p99Ms,
    undeliveredOlderThanMs: 5000,
    serverRssMiB: mem.rssMiB,
    serverCpuPct: [20, 50, 10],
    loadgenCpuPct: { watchers: 30, writer: 10, watchersElu: 0.3 },
    verdict: detail.verdict,
    detail,
  };
}

const outcome = (results: WatchFanoutResult[]): WatchFanoutOutcome => ({ counts: results.map((r) => r.watchers), settings: {}, results });

t.test('fan-out rows: the 10,000-watcher target is met only when every event came at the rate and p99 <= 250 ms', async (t) => {
  t.equal(fanoutTargetMet(fanoutResult(10_000, { held: true, p99Ms: 250 })), true);
  t.equal(fanoutTargetMet(fanoutResult(10_000, { held: true, p99Ms: 251 })), false, 'p99 over 250 ms');
  t.equal(fanoutTargetMet(fanoutResult(10_000, { held: false, p99Ms: 100 })), false, 'not every event to every watcher');
  t.equal(fanoutTargetMet(undefined), undefined);
  const met = (c: WatchFanoutOutcome | undefined, e: WatchFanoutOutcome | undefined): string | undefined => fanoutRows(c, e)[2]?.[10];
  t.equal(met(outcome([fanoutResult(10_000, { held: true, p99Ms: 120 })]), undefined), 'met');
  t.equal(met(outcome([fanoutResult(10_000, { held: false, p99Ms: Number.POSITIVE_INFINITY, delivered: 0.2 })]), undefined), 'NOT met');
  t.equal(met(undefined, undefined), 'not run');
  t.equal(met(outcome([fanoutResult(1_000, { held: true, p99Ms: 20 })]), undefined), 'not run', 'a run of other counts (--watchers) did not measure the target');
  const rows = fanoutRows(outcome([fanoutResult(100, { held: true, p99Ms: 20 }), fanoutResult(1_000, { held: false, p99Ms: Number.POSITIVE_INFINITY, delivered: 0.27 })]), undefined);
  t.equal(rows.length, 3, 'one row per count');
  t.equal(rows[0]?.[1], '200/200 w/s, held');
  t.equal(rows[1]?.[1], '200/200 w/s, NOT held (27% dlvd)');
  t.equal(rows[1]?.[4], '5.00 / >5 s / -', 'a percentile on undelivered events says how old they were at least');
  t.equal(rows[0]?.[7], "40%/80%, RSS 300 MiB", "load generator / servers CPU, and the serving node's RSS");
  t.equal(rows[0]?.[10], '', 'targets only on the 10,000 row');
  t.equal(rows[2]?.[1], 'not run');
  const table = fanoutTable([{ name: 'Cairn', outcome: outcome([fanoutResult(100, { held: true, p99Ms: 20 })]) }, { name: 'etcd', outcome: undefined }]);
  t.match(table, /\| Cairn +\| +100 on n2 \|/);
  t.match(table, /20,000 \/ 20,000 \/ 20,000/, 'events/s: sent by the node, received, needed');
  t.notMatch(table, /etcd/, 'a system that did not run the phase has no rows');
});
