/**
 * The failover trials' network cut (netcut.ts): the nftables text, the cgroup v2 mount lookup,
 * hostile names refused before anything reaches `nft`, and, where the machine allows it (root,
 * nft, cgroup v2), the cut itself on a real process; elsewhere, that the reason is given.
 */
import { spawn } from 'node:child_process';
import { connect } from 'node:net';
import t from 'tap';
import { cgroup2Mount, cgroupName, cleanupNetCut, cutOff, cutRules, heal, healRules, netCutSupport, spawnPrefix, tableName } from './netcut.js';

t.test('the cut drops, in the input and the output hook, every packet of a socket in the cgroup', async (t) => {
  const rules = cutRules('cairn_bench_42', 'unified/cairn-bench-42-n1');
  t.equal(
    rules,
    [
      'table inet cairn_bench_42',
      'delete table inet cairn_bench_42',
      'table inet cairn_bench_42 {',
      '  chain input {',
      '    type filter hook input priority 0; policy accept;',
      '    socket cgroupv2 level 1 "unified/cairn-bench-42-n1" drop',
      '  }',
      '  chain output {',
      '    type filter hook output priority 0; policy accept;',
      '    socket cgroupv2 level 1 "unified/cairn-bench-42-n1" drop',
      '  }',
      '}',
      '',
    ].join('\n'),
    'created fresh (an earlier cut of the run is replaced, not added to)',
  );
  t.equal(healRules('cairn_bench_42'), 'table inet cairn_bench_42\ndelete table inet cairn_bench_42\n', 'healing deletes the table, present or not');
});

t.test("names carry the run's pid, so two runs never touch each other's table or cgroups", async (t) => {
  t.equal(tableName(42), 'cairn_bench_42');
  t.equal(cgroupName('n1', 42), 'cairn-bench-42-n1');
  t.not(tableName(42), tableName(43));
});

t.test('hostile names are refused before any rule is written', async (t) => {
  t.throws(() => cutRules('cairn_bench_1; flush ruleset', 'unified/x'), /bad nftables table name/);
  t.throws(() => cutRules('cairn_bench_1', 'unified/x" drop; flush ruleset #'), /bad cgroup path/);
  t.throws(() => cutRules('cairn_bench_1', '../../etc'), /bad cgroup path/);
  t.throws(() => cutRules('cairn_bench_1', '/sys/fs/cgroup/x'), /bad cgroup path/);
  t.throws(() => healRules('x y'), /bad nftables table name/);
  t.throws(() => cgroupName('n1/../..'), /bad node name/);
});

t.test('the cgroup v2 mount is found in /proc/mounts, in the pure and the hybrid layouts', async (t) => {
  t.equal(cgroup2Mount('cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid 0 0\n'), '/sys/fs/cgroup');
  t.equal(
    cgroup2Mount('tmpfs /sys/fs/cgroup tmpfs rw 0 0\ncgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\ncgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n'),
    '/sys/fs/cgroup/unified',
  );
  t.equal(cgroup2Mount('cgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n'), undefined, 'cgroup v1 only: none');
});

t.test('on this machine: a process started in its cgroup is cut off in both directions and answers again once healed (or the reason it cannot be)', async (t) => {
  const s = netCutSupport();
  if (!s.ok) {
    // Not root, no nft or no cgroup v2: the bench skips the row with this reason.
    t.match(s.reason, /needs|not installed|cgroup|nft|mounted/, `unsupported here: ${s.reason}`);
    return;
  }
  // An echo server in a cgroup of its own, as the bench starts its servers.
  const prefix = spawnPrefix('netcut-test');
  t.ok(prefix, 'started inside a cgroup');
  const script = "const s=require('net').createServer(c=>c.on('data',d=>c.write(d))).listen(0,'127.0.0.1',()=>console.log(s.address().port))";
  const child = spawn((prefix as { command: string }).command, [...(prefix as { args: readonly string[] }).args, process.execPath, '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
  const exited = new Promise((r) => child.once('exit', r));
  t.teardown(async () => {
    heal();
    child.kill('SIGKILL');
    await exited;
    cleanupNetCut(); // the cgroup, now empty
  });
  const port = await new Promise<number>((resolve, reject) => {
    child.stdout?.once('data', (d: Buffer) => resolve(Number(d.toString().trim())));
    child.once('exit', () => reject(new Error('the echo server exited')));
  });
  /** Connects and sends one byte: whether it came back within `ms`. */
  const echoes = (ms: number): Promise<boolean> =>
    new Promise((resolve) => {
      const c = connect(port, '127.0.0.1');
      const done = (v: boolean): void => {
        clearTimeout(timer);
        c.destroy();
        resolve(v);
      };
      const timer = setTimeout(() => done(false), ms);
      c.on('connect', () => c.write('x'));
      c.on('data', () => done(true));
      c.on('error', () => done(false));
    });
  t.ok(await echoes(5_000), 'answers before the cut');
  // An established connection (what a Raft stream is) and new ones alike.
  const open = connect(port, '127.0.0.1');
  await new Promise((r) => open.once('connect', r));
  cutOff('netcut-test');
  let got = false;
  open.on('data', () => (got = true));
  open.write('y');
  t.notOk(await echoes(500), 'a new connection gets no answer (no reset either: it just times out)');
  t.notOk(got, 'an established connection gets no answer');
  heal();
  t.ok(await echoes(5_000), 'answers again once healed');
  open.destroy();
});
