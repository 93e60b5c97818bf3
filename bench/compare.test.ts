/**
 * The side-by-side benchmark's own pieces, without etcd or Cairn processes: the load
 * generator's counting (window, conflicts, key ownership) and failover timing against an
 * in-memory fake system, the hand-written etcd proto's wire encoding, the table and the chart.
 */
import t from 'tap';
import { renderChart } from './chart.js';
import { etcdMessageSizes } from './etcd-client.js';
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
  resetClients(): void {}
  async stop(): Promise<void> {}
  messageSizes(): Record<string, number> {
    return {};
  }
  async fsyncs(): Promise<FsyncCounter | undefined> {
    return undefined;
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
