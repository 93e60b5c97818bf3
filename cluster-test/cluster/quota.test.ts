/**
 * Issue 16, item 4, in real processes: a 3-node TLS cluster with a small data quota
 * (--quota-bytes 4 MiB) filled by 8 concurrent writers of 16-64 KiB resources, through every
 * node (followers forward).
 *
 * - every writer ends on a 507 NO_SPACE, and no node holds more data than the quota;
 * - the NO_SPACE alarm rises on all three nodes (GET /v1/agent/self, the metric
 *   `cairn_alarm_active{alarm="NO_SPACE"}`, and `cairn info` prints it first);
 * - a growing write is refused on every node, with the documented details; reads work; a
 *   shrinking write works;
 * - deletes bring the alarm down on all three nodes, after which growing writes work again;
 * - every acknowledged write that was not deleted is stored on every node with the version and
 *   data it was acknowledged with, every deleted one is gone;
 * - no node's resident memory (VmRSS from /proc/<pid>/status, sampled every 200 ms throughout)
 *   exceeds RSS_BOUND_MIB.
 *
 * Nothing sleeps to let things settle: every wait polls with a deadline.
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import t from 'tap';
import { ARTIST, CAIRN_BIN, Cluster, REPO_ROOT, field, get, list, put, request, retryable, sleep, until, type Ack, type ClusterNode, type HttpResult } from './harness.js';

const MIB = 1024 * 1024;
const QUOTA = 4 * MIB;
const WRITERS = 8;
/**
 * Resident memory no node may exceed. Measured peaks in this test: 132-165 MiB per node (Node 20,
 * x64, TLS, 3 runs): a node's baseline plus 4 MiB of data in every copy it keeps (store, watch
 * window, de-duplication window, log) and the garbage collector's slack. 300 MiB leaves room
 * for a loaded machine and still catches a node that keeps what the quota should have stopped.
 */
const RSS_BOUND_MIB = 300;

interface Refusal {
  readonly via: string;
  readonly result: HttpResult;
}

/** Resident set size of a process, in MiB, from /proc/<pid>/status (undefined if it is gone). */
function rssMib(pid: number): number | undefined {
  try {
    const m = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) / 1024 : undefined;
  } catch {
    return undefined;
  }
}

/** A data payload of `bytes` characters (the Artist schema takes any string as `name`). */
function payload(tag: string, bytes: number): { name: string } {
  return { name: `${tag}:`.padEnd(bytes, 'x') };
}

/** Writes under one key until acknowledged or definitely refused; retries unknown outcomes on the next node. */
async function writeOnce(nodes: readonly ClusterNode[], start: number, name: string, data: unknown, deadlineMs = 30_000): Promise<{ ack?: Ack; refused?: Refusal; unknown?: string }> {
  const sentAt = performance.now();
  const key = `${name}.key`;
  let last = '';
  for (let attempt = 0; performance.now() - sentAt < deadlineMs; attempt++) {
    const node = nodes[(start + attempt) % nodes.length] as ClusterNode;
    const r = await put(node, { name, key, data }, 12_000);
    if (r.status === 200) {
      return { ack: { name, key, version: String(field(r.body, 'version')), data: field(r.body, 'data'), via: node.id, at: performance.now(), sentAt, attempts: attempt + 1 } };
    }
    if (!retryable(r)) return { refused: { via: node.id, result: r } };
    last = `${node.id}: ${r.status} ${r.error ?? ''}`;
    await sleep(Math.min(50 * (attempt + 1), 250));
  }
  return { unknown: last };
}

function errorOf(r: HttpResult): Record<string, unknown> {
  const e = field(r.body, 'error');
  return typeof e === 'object' && e !== null ? (e as Record<string, unknown>) : {};
}

/** `cairn info` against a node, as an operator runs it. */
function cairnInfo(node: ClusterNode, tokenFile: string): Promise<{ code: number | null; out: string; err: string }> {
  const caFile = node.tlsFiles?.caFile;
  if (caFile === undefined) throw new Error(`${node.id} has no TLS files`);
  return new Promise((resolve, reject) => {
    // As the harness starts nodes: without tap's loaders (NODE_OPTIONS, TAP*), which cannot load
    // the extensionless ES module bin/cairn, and without CAIRN_* settings.
    const env: Record<string, string> = {};
    for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !/^(CAIRN_|NODE_OPTIONS$|NODE_V8_COVERAGE$|TAP|_TAPJS)/.test(k)) env[k] = v;
    const child = spawn('env', ['-u', 'NODE_OPTIONS', process.execPath, CAIRN_BIN, 'info', '--endpoint', node.url, '--tls-ca-file', caFile, '--token-file', tokenFile], { cwd: REPO_ROOT, env });
    let out = '';
    let err = '';
    child.stdout.on('data', (b: Buffer) => (out += b.toString()));
    child.stderr.on('data', (b: Buffer) => (err += b.toString()));
    child.once('error', reject);
    child.once('exit', (code) => resolve({ code, out, err }));
  });
}

t.test('a 3-node cluster filled to its quota by 8 writers: the alarm rises everywhere, deletes bring it down, nothing acknowledged is lost, memory stays bounded', async (t) => {
  const cluster = await Cluster.start(t, { size: 3, flags: ['--quota-bytes', String(QUOTA)] });
  const nodes = cluster.running();

  // Memory, sampled throughout.
  const maxRss = new Map<string, number>();
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      for (const n of nodes) {
        const pid = n.pid;
        const rss = pid === undefined ? undefined : rssMib(pid);
        if (rss !== undefined) maxRss.set(n.id, Math.max(maxRss.get(n.id) ?? 0, rss));
      }
      await sleep(200);
    }
  })();
  t.teardown(() => {
    sampling = false;
  });

  // ---- Fill: 8 writers, each until its first 507 --------------------------------------------
  const acks: Ack[] = [];
  const refusals: Refusal[] = [];
  const unknown: string[] = [];
  const unexpected: string[] = [];
  const started = performance.now();
  await Promise.all(
    Array.from({ length: WRITERS }, async (_, w) => {
      for (let seq = 1; seq <= 400; seq++) {
        const name = `q-${w}-${seq}`;
        const bytes = 16 * 1024 + ((w * 7919 + seq * 104_729) % (48 * 1024));
        const out = await writeOnce(nodes, w + seq, name, payload(name, bytes));
        if (out.ack) acks.push(out.ack);
        else if (out.unknown !== undefined) unknown.push(`${name}: ${out.unknown}`);
        else if (out.refused) {
          if (out.refused.result.status === 507) {
            refusals.push(out.refused);
            return;
          }
          unexpected.push(`${name} via ${out.refused.via}: ${out.refused.result.status} ${JSON.stringify(out.refused.result.body).slice(0, 300)}`);
          return;
        }
      }
      unexpected.push(`writer ${w} wrote 400 resources without a 507`);
    }),
  );
  const ackedBytes = acks.reduce((n, a) => n + JSON.stringify(a.data).length, 0);
  t.comment(`fill: ${acks.length} writes acknowledged (${(ackedBytes / MIB).toFixed(2)} MiB of data) in ${((performance.now() - started) / 1000).toFixed(1)} s, ${refusals.length} refused with 507, ${unknown.length} with an unknown outcome`);
  t.same(unexpected, [], 'no writer met anything but 200, 507 or a retryable answer');
  t.equal(refusals.length, WRITERS, 'every writer ended on a 507');
  t.ok(ackedBytes <= QUOTA, `the acknowledged data (${ackedBytes} bytes) fits in the quota`);
  t.ok(ackedBytes > QUOTA / 2, 'and fills a good part of it (the quota, not something else, stopped the writers)');
  for (const r of refusals) {
    const e = errorOf(r.result);
    t.equal(e['code'], 'NO_SPACE', `the 507 via ${r.via} is NO_SPACE`);
    t.equal(e['quota_bytes'], QUOTA, 'with quota_bytes');
    t.ok(typeof e['data_bytes'] === 'number' && typeof e['needed'] === 'number', `with data_bytes ${String(e['data_bytes'])} and needed ${String(e['needed'])}`);
  }
  t.ok(new Set(refusals.map((r) => r.via)).size >= 2, `507s came through several nodes (${[...new Set(refusals.map((r) => r.via))].join(', ')}): followers forward, the leader's state machine decides`);

  // ---- The alarm on all three ------------------------------------------------------------------
  for (const n of nodes) {
    const self = await until(
      `the NO_SPACE alarm on ${n.id}`,
      15_000,
      async () => {
        const r = await request(`${n.url}/v1/agent/self`);
        const alarms = field(r.body, 'alarms');
        return Array.isArray(alarms) && alarms.includes('NO_SPACE') ? r.body : undefined;
      },
      () => '',
      100,
    );
    t.equal(field(self, 'quota_bytes'), QUOTA, `${n.id}: agent/self shows the quota`);
    const data = field(self, 'data_bytes') as number;
    t.ok(data <= QUOTA && data > QUOTA / 2, `${n.id}: agent/self shows ${data} bytes of data, within the quota`);
    const metrics = await request(`${n.url}/metrics`);
    t.match(String(metrics.body), /^cairn_alarm_active\{alarm="NO_SPACE"\} 1$/m, `${n.id}: cairn_alarm_active{alarm="NO_SPACE"} 1`);
    t.match(String(metrics.body), new RegExp(`^cairn_quota_bytes ${QUOTA}$`, 'm'), `${n.id}: cairn_quota_bytes`);
    const grow = await put(n, { name: `grow-${n.id}`, key: `grow-${n.id}.key`, data: payload('grow', 1024) });
    t.equal(grow.status, 507, `${n.id}: a growing write is refused (507)`);
    t.equal(errorOf(grow)['code'], 'NO_SPACE');
    t.equal(errorOf(grow)['alarm'], true, 'because the alarm is raised');
  }
  const info = await cairnInfo(nodes[1] as ClusterNode, cluster.tokenFile);
  t.equal(info.code, 0, `cairn info exits 0 (${info.err.trim()})`);
  t.match(info.out, /^ALARM NO_SPACE: /, 'cairn info prints the alarm first');
  t.match(info.out, /^quota: +4\.0 MiB \(4194304 bytes\)$/m);

  // ---- Reads work; a shrinking write works ------------------------------------------------------
  for (const n of nodes) {
    for (const a of acks.slice(0, 5)) {
      const r = await get(n, ARTIST, a.name);
      t.equal(r.status, 200, `${n.id}: read ${a.name} under the alarm`);
      t.equal(field(r.body, 'version'), a.version);
    }
  }
  const shrinkTarget = acks[0] as Ack;
  const shrunk = await writeOnce(nodes, 0, shrinkTarget.name, payload(shrinkTarget.name, 15 * 1024));
  t.ok(shrunk.ack !== undefined, `a shrinking write of ${shrinkTarget.name} works under the alarm (${shrunk.refused ? JSON.stringify(shrunk.refused.result.body) : ''})`);
  if (shrunk.ack) acks[0] = shrunk.ack;

  // ---- Deletes bring it down ------------------------------------------------------------------
  // The alarm clears at 90% of the quota: deleting a quarter of the data is plenty.
  const deleted = new Set<string>();
  let freed = 0;
  for (let i = acks.length - 1; i > 0 && freed < QUOTA / 4; i--) {
    const a = acks[i] as Ack;
    const n = nodes[i % nodes.length] as ClusterNode;
    const r = await until(`delete ${a.name}`, 30_000, async () => {
      const d = await request(`${n.url}/v1/resource/${ARTIST}/${a.name}`, { method: 'DELETE', timeoutMs: 12_000 });
      return d.status === 0 || d.status >= 500 ? undefined : d;
    });
    t.equal(r.status, 200, `delete ${a.name} via ${n.id} works under the alarm`);
    deleted.add(a.name);
    freed += JSON.stringify(a.data).length;
  }
  t.comment(`deleted ${deleted.size} resources (about ${(freed / MIB).toFixed(2)} MiB)`);
  for (const n of nodes) {
    await until(
      `the NO_SPACE alarm to clear on ${n.id}`,
      15_000,
      async () => {
        const r = await request(`${n.url}/v1/agent/self`);
        const alarms = field(r.body, 'alarms');
        return Array.isArray(alarms) && alarms.length === 0 ? true : undefined;
      },
      () => '',
      100,
    );
    t.pass(`${n.id}: the alarm is down`);
    const metrics = await request(`${n.url}/metrics`);
    t.match(String(metrics.body), /^cairn_alarm_active\{alarm="NO_SPACE"\} 0$/m, `${n.id}: cairn_alarm_active 0`);
  }
  const after = await writeOnce(nodes, 2, 'after-clear', payload('after', 32 * 1024));
  t.ok(after.ack !== undefined, 'growing writes work again');
  if (after.ack) acks.push(after.ack);

  // ---- Nothing acknowledged is lost --------------------------------------------------------------
  for (const n of nodes) {
    const stored = await list(n, ARTIST);
    const lost: string[] = [];
    const wrong: string[] = [];
    for (const a of acks) {
      if (deleted.has(a.name)) continue;
      const s = stored.get(a.name);
      if (s === undefined) lost.push(a.name);
      else if (s.version !== a.version || JSON.stringify(s.data) !== JSON.stringify(a.data)) wrong.push(`${a.name}: acknowledged version ${a.version}, stored ${s.version}`);
    }
    t.same(lost, [], `${n.id}: every acknowledged write (${acks.length - deleted.size} not deleted) is stored`);
    t.same(wrong, [], `${n.id}: each with the version and data it was acknowledged with`);
    t.same([...deleted].filter((d) => stored.has(d)), [], `${n.id}: every deleted one is gone`);
    t.same([...stored.keys()].filter((k) => k.startsWith('grow-')), [], `${n.id}: no refused write was stored`);
  }

  sampling = false;
  await sampler;
  for (const n of nodes) {
    const rss = maxRss.get(n.id);
    t.ok(rss !== undefined, `${n.id}: memory was sampled`);
    t.ok((rss ?? Infinity) < RSS_BOUND_MIB, `${n.id}: peak resident memory ${rss?.toFixed(0) ?? '?'} MiB < ${RSS_BOUND_MIB} MiB`);
  }
});
