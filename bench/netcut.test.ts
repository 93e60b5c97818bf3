/**
 * The failover trials' network cut (netcut.ts), the parts that need no root: the nftables text,
 * the cgroup v2 mount lookup, and hostile names refused before anything reaches `nft`.
 */
import t from 'tap';
import { cgroup2Mount, cgroupName, cutRules, healRules, tableName } from './netcut.js';

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
