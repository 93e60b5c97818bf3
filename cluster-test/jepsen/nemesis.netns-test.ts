// The nemeses on real namespaces (root only; `make cluster-test-selftest`, named *.netns-test.ts
// so make test skips it): each partition shape drops exactly the intended directed pairs and the
// heal restores them all, proven with UDP datagrams between the namespaces (TCP needs both
// directions, so it could not tell a one-way cut from a two-way one); the membership nemesis
// removes a node and the heal makes it a voter again (kept running, and wiped); a transfer storm
// moves leadership.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { Hosts } from './hosts.js';
import { netnsSkip as skip } from './netns-testing.js';
import { Nemesis } from './nemesis.js';
import { configuration, findLeader } from './operator.js';
import { bridgeCuts, halvesCuts, onewayCuts, reachability, ringCuts } from './partitions.js';
import type { Fault } from './schedule.js';

const results = mkdtempSync(path.join(os.tmpdir(), 'cairn-jepsen-nemesis-'));
t.teardown(() => rmSync(results, { recursive: true, force: true }));

/** Port of the probe inside each namespace (each namespace has its own ports: no clash). */
const PROBE_PORT = 7600;

/**
 * Which node's datagrams reach which: a UDP listener in every namespace, all bound before any
 * sends; then every node sends 5 datagrams to every other node; got[a][b]: b received from a.
 */
async function probe(hosts: Hosts): Promise<boolean[][]> {
  const ips = hosts.hosts.map((h) => h.ip);
  const received = await Promise.all(
    hosts.hosts.map(
      (h) =>
        new Promise<{ child: ReturnType<typeof spawn>; out: Promise<string[]> }>((resolveReady, reject) => {
          const peers = ips.filter((ip) => ip !== h.ip);
          const script = [
            `const s = require('dgram').createSocket('udp4'); const got = new Set();`,
            `s.on('message', (m, r) => got.add(r.address)); s.on('error', () => {});`,
            `s.bind(${PROBE_PORT}, '${h.ip}', () => console.log('ready'));`,
            `process.stdin.once('data', async () => {`,
            `  for (let i = 0; i < 5; i++) { for (const p of ${JSON.stringify(peers)}) s.send('x', ${PROBE_PORT}, p, () => {}); await new Promise((r) => setTimeout(r, 50)); }`,
            `  setTimeout(() => { console.log(JSON.stringify([...got])); process.exit(0); }, 700);`,
            `});`,
          ].join('\n');
          const child = spawn('ip', ['netns', 'exec', h.ns, 'env', '-u', 'NODE_OPTIONS', process.execPath, '-e', script], { stdio: ['pipe', 'pipe', 'inherit'] });
          let text = '';
          let readyOnce = false;
          const out = new Promise<string[]>((resolve, rejectOut) => {
            child.once('exit', (code) => {
              const last = text.trim().split('\n').pop() ?? '';
              if (code !== 0) rejectOut(new Error(`probe in ${h.ns} exited ${String(code)}: ${text}`));
              else resolve(JSON.parse(last) as string[]);
            });
          });
          out.catch(reject);
          child.stdout.on('data', (d: Buffer) => {
            text += d.toString();
            if (!readyOnce && text.includes('ready')) {
              readyOnce = true;
              resolveReady({ child, out });
            }
          });
        }),
    ),
  );
  for (const r of received) r.child.stdin?.write('go\n');
  const got = await Promise.all(received.map((r) => r.out));
  return ips.map((from) => got.map((sources, to) => ips[to] === from || sources.includes(from)));
}

const show = (m: boolean[][]): string => m.map((row, a) => row.map((ok, b) => (a === b ? '.' : ok ? '+' : '-')).join('')).join(' ');

t.test('each partition shape drops exactly its directed pairs; the heal restores every pair', { skip }, async (t) => {
  for (const n of [5, 3]) {
    const hosts = await Hosts.create({ nodes: n, dir: path.join(results, `shapes${n}`) });
    t.teardown(() => hosts.closeSync());
    const nemesis = new Nemesis(hosts, () => 0);
    const all = reachability(n, []);
    t.same(show(await probe(hosts)), show(all), `${n} nodes: before any fault every pair is reachable`);
    const order = n === 5 ? [2, 4, 0, 3, 1] : [1, 2, 0];
    const cases: { fault: Fault; cuts: ReturnType<typeof ringCuts> }[] = [
      { fault: { nemesis: 'ring', order }, cuts: ringCuts(n, order) },
      { fault: { nemesis: 'bridge', order }, cuts: bridgeCuts(n, order) },
      { fault: { nemesis: 'oneway', target: { kind: 'node', node: 1 }, direction: 'in', peer: 'all' }, cuts: onewayCuts(n, 1, 'in', [...Array(n).keys()].filter((i) => i !== 1)) },
      { fault: { nemesis: 'oneway', target: { kind: 'node', node: 0 }, direction: 'out', peer: 1 }, cuts: onewayCuts(n, 0, 'out', [2]) },
      { fault: { nemesis: 'partition', mode: 'halves', side: [0] }, cuts: halvesCuts(n, [0]) },
    ];
    for (const c of cases) {
      const applied = await nemesis.start(c.fault);
      const want = reachability(n, c.cuts);
      t.ok(c.cuts.length > 0, `${c.fault.nemesis} cuts something`);
      t.same(show(await probe(hosts)), show(want), `${n} nodes, ${c.fault.nemesis}: ${applied.note}`);
      await nemesis.heal(applied);
      t.same(show(await probe(hosts)), show(all), `${n} nodes, ${c.fault.nemesis} healed: every pair again`);
    }
    hosts.closeSync();
  }
});

t.test('membership: a removed node is back as a voter after the heal (kept running, and wiped); a storm moves leadership', { skip }, async (t) => {
  const hosts = await Hosts.create({ nodes: 3, dir: path.join(results, 'membership') });
  t.teardown(() => hosts.closeSync());
  hosts.startAll();
  const nemesis = new Nemesis(hosts, () => 0);
  /** The voters as the leader lists them, once a leader answers (after a removed leader steps down, an election). */
  const voters = async (): Promise<string> => {
    const deadline = Date.now() + 30_000;
    for (;;) {
      const servers = await configuration(hosts);
      if (servers !== undefined) return servers.filter((s) => s.suffrage === 'voter').map((s) => s.id).sort().join(',');
      if (Date.now() > deadline) throw new Error('no leader answered for 30 s');
      await new Promise((r) => setTimeout(r, 200));
    }
  };
  const deadline = Date.now() + 60_000;
  while ((await voters().catch(() => '')) !== 'n1,n2,n3') {
    if (Date.now() > deadline) throw new Error('the cluster never formed');
    await new Promise((r) => setTimeout(r, 200));
  }

  const leader = await findLeader(hosts);
  const kept = await nemesis.start({ nemesis: 'membership', target: { kind: 'leader' }, mode: 'running' });
  t.equal(kept.hosts[0], leader?.id, `the leader ${String(leader?.id)} was removed: ${kept.note}`);
  // The removal is committed, but the node answering may be a leader elected just after it that
  // has not applied it yet (a new leader learns the commit index with its first entry): poll.
  let whileRemoved = await voters();
  for (const until = Date.now() + 30_000; whileRemoved.split(',').includes(kept.hosts[0] ?? '?') && Date.now() < until; ) {
    await new Promise((r) => setTimeout(r, 200));
    whileRemoved = await voters();
  }
  t.equal(whileRemoved.split(',').length, 2, `two voters while removed: ${whileRemoved}`);
  t.notOk(whileRemoved.includes(kept.hosts[0] ?? '?'), 'the removed node is not one of them');
  t.ok(hosts.hosts.find((h) => h.id === kept.hosts[0])?.running(), 'it keeps running');
  await nemesis.heal(kept);
  t.equal(await voters(), 'n1,n2,n3', 'added back as a voter');

  const wiped = await nemesis.start({ nemesis: 'membership', target: { kind: 'node', node: 1 }, mode: 'wiped' });
  const n2 = hosts.hosts[1];
  t.equal(await voters(), 'n1,n3', `n2 removed: ${wiped.note}`);
  t.notOk(n2?.running() === true || existsSync(n2?.dataDir ?? ''), 'n2 stopped and its data dir gone');
  await nemesis.heal(wiped);
  t.equal(await voters(), 'n1,n2,n3', 'n2 joined again from an empty data dir and is a voter');

  const storm = await nemesis.start({ nemesis: 'transfer', steps: [300, 400, 500, 300, 400, 500].map((afterMs, i) => ({ afterMs, pick: i % 2 })) });
  await new Promise((r) => setTimeout(r, 3500));
  await nemesis.heal(storm);
  t.match(storm.note, /^\d+ transfers requested, [1-9]\d* accepted/, storm.note);
  t.ok((/leaders seen (.*)$/.exec(storm.note)?.[1] ?? '').split(' -> ').length >= 2, 'leadership moved');
  await nemesis.healAll();
  t.equal(await voters(), 'n1,n2,n3', 'healAll leaves the full membership');
});
