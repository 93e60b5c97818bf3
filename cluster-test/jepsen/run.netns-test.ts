// A real short run of the fault harness: 3 `cairn agent` processes in network namespaces,
// partitions and kill -9 for ~20 s under the register workload, checked linearizable; and the
// partition nemesis shown to cut traffic between namespaces and the heal to restore it.
//
// Needs root, iproute2 and nftables (setup.sh), so it is named *.netns-test.ts: scripts/run-tests.sh
// (make test) only picks up *.test.js. Run it with `make cluster-test-selftest` or
// `npx tap dist/cluster-test/jepsen/run.netns-test.js` after make build.
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { parseJsonLines } from '../checker/history.js';
import { checkHistory } from '../checker/linearizability.js';
import { cleanupLeftovers, Hosts, NS_PREFIX } from './hosts.js';
import { Nemesis } from './nemesis.js';
import { netnsSkip } from './netns-testing.js';
import { runJepsen } from './run.js';

const skip = netnsSkip;

const results = mkdtempSync(path.join(os.tmpdir(), 'cairn-jepsen-test-'));
t.teardown(() => rmSync(results, { recursive: true, force: true }));

/** From a namespace: can it open a TCP connection to addr:port within 1.5 s? */
function canConnect(ns: string, ip: string, port: number): boolean {
  const script = `const s=require('net').connect(${port},'${ip}');s.setTimeout(1500);s.on('connect',()=>process.exit(0));s.on('timeout',()=>process.exit(1));s.on('error',()=>process.exit(1));`;
  try {
    execFileSync('ip', ['netns', 'exec', ns, 'env', '-u', 'NODE_OPTIONS', process.execPath, '-e', script], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

t.test('a partition cuts traffic between the sides, the heal restores it; close removes everything', { skip }, async (t) => {
  const hosts = await Hosts.create({ nodes: 3, dir: path.join(results, 'partition') });
  t.teardown(() => hosts.closeSync());
  hosts.startAll();
  const [n1, n2, n3] = hosts.hosts;
  if (n1 === undefined || n2 === undefined || n3 === undefined) throw new Error('3 hosts');
  // The agents' gRPC port: wait until n1 can reach n2 (the agent is listening).
  const deadline = Date.now() + 60_000;
  while (!canConnect(n1.ns, n2.ip, 7500)) {
    if (Date.now() > deadline) throw new Error('n2 never listened');
  }
  const nemesis = new Nemesis(hosts, () => 0);
  const applied = await nemesis.start({ nemesis: 'partition', mode: 'halves', side: [0] });
  t.equal(canConnect(n1.ns, n2.ip, 7500), false, 'n1 cannot reach n2');
  t.equal(canConnect(n2.ns, n1.ip, 7500), false, 'n2 cannot reach n1');
  t.equal(canConnect(n2.ns, n3.ip, 7500), true, 'n2 still reaches n3 (same side)');
  await nemesis.heal(applied);
  t.equal(canConnect(n1.ns, n2.ip, 7500), true, 'healed: n1 reaches n2 again');
  const removed = hosts.closeSync();
  t.ok(removed.some((r) => r.startsWith(`netns ${NS_PREFIX}${hosts.runId}-n1`)), `removed ${removed.join('; ')}`);
  const ns = execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' });
  t.notOk(ns.includes(`${NS_PREFIX}${hosts.runId}`), 'no namespace of the run is left');
  t.same(cleanupLeftovers(hosts.runId), [], 'nothing left to clean');
});

t.test('20 s of partitions and kill -9 on 3 nodes: the register history is linearizable', { skip }, async (t) => {
  const seed = Number(process.env['JEPSEN_SEED'] ?? 20261121);
  const r = await runJepsen({ nodes: 3, timeS: 20, nemesis: 'partition,kill', workload: 'register', seed, resultsDir: results, log: (l) => t.comment(l) });
  const report = r.report as { register: { ok: number; info: number; ops: number }; faults: { nemesis: string }[] };
  t.equal(r.valid, true, 'the checker says valid');
  t.ok(report.register.ok > 100, `${report.register.ok} ok operations`);
  t.ok(report.faults.length >= 2, `${report.faults.length} faults injected`);
  t.ok(report.faults.some((f) => f.nemesis === 'partition') && report.faults.some((f) => f.nemesis === 'kill'), 'both partitions and kills happened');
  // The history file on disk is the one checked: re-read and check it again.
  const again = checkHistory(parseJsonLines(readFileSync(path.join(r.dir, 'history.jsonl'), 'utf8')));
  t.equal(again.valid, true, 'history.jsonl re-checked from disk');
  // Only this run's: other harnesses (other tests, other checkouts) may be running on the machine.
  t.notOk(execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' }).includes(`${NS_PREFIX}${String(r.report['runId'])}`), 'no namespace of the run is left');
});

t.test('after a crash (kill -9) of the harness, the next cleanup removes its hosts; a live run is left alone', { skip }, async (t) => {
  const hostsJs = new URL('./hosts.js', import.meta.url).href;
  const script = `const { Hosts } = await import(${JSON.stringify(hostsJs)}); const h = await Hosts.create({ nodes: 2, dir: ${JSON.stringify(path.join(results, 'crash'))} }); h.startAll(); console.log(h.runId); setInterval(() => {}, 1000);`;
  const child = spawn('env', ['-u', 'NODE_OPTIONS', process.execPath, '--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
  t.teardown(() => child.kill('SIGKILL'));
  const runId = await new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /^([0-9a-f]{4})$/m.exec(out);
      if (m?.[1] !== undefined) resolve(m[1]);
    });
    child.once('exit', () => reject(new Error(`harness child exited before building its hosts: ${out}`)));
  });
  t.teardown(() => cleanupLeftovers(runId));
  const listed = (): string => execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' });
  t.ok(listed().includes(`${NS_PREFIX}${runId}-n1`), 'the child built its namespaces');
  t.notOk(cleanupLeftovers().some((r) => r.includes(runId)), 'a run whose harness is alive is not touched');
  t.ok(listed().includes(`${NS_PREFIX}${runId}-n1`), 'still there');
  const pids = execFileSync('ip', ['netns', 'pids', `${NS_PREFIX}${runId}-n1`], { encoding: 'utf8' }).trim();
  t.match(pids, /^\d+$/, `an agent runs in n1 (${pids})`);
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGKILL');
  await exited;
  t.ok(listed().includes(`${NS_PREFIX}${runId}-n1`), 'the crashed harness left its namespaces behind');
  const removed = cleanupLeftovers();
  t.ok(removed.some((r) => r.startsWith(`netns ${NS_PREFIX}${runId}-n1 (killed ${pids})`)), `removed: ${removed.join('; ')}`);
  t.ok(removed.some((r) => r === `link cj${runId}br`), 'and its bridge');
  t.notOk(listed().includes(`${NS_PREFIX}${runId}`), 'no namespace of the crashed run is left');
  t.notOk(execFileSync('ip', ['-o', 'link', 'show'], { encoding: 'utf8' }).includes(`cj${runId}`), 'no link of the crashed run is left');
});
