// nftables rules of the partition nemesis (pure text; applying them needs root and is covered
// by run.netns-test.ts).
import t from 'tap';
import { cutPlan, cutRules, healLossRules, healRules, lossRules, NFT_LOSS_TABLE, NFT_TABLE, partitionPlan, partitionRules } from './nft.js';
import { halvesCuts } from './partitions.js';

t.test('a partition drops both directions of traffic with the other side only', async (t) => {
  const all = ['10.0.0.11', '10.0.0.12', '10.0.0.13', '10.0.0.14', '10.0.0.15'];
  const plan = partitionPlan(all, ['10.0.0.12', '10.0.0.14']);
  t.same(plan.get('10.0.0.12'), ['10.0.0.11', '10.0.0.13', '10.0.0.15']);
  t.same(plan.get('10.0.0.11'), ['10.0.0.12', '10.0.0.14']);
  t.same(plan.get('10.0.0.15'), ['10.0.0.12', '10.0.0.14']);
  t.throws(() => partitionPlan(all, ['10.0.0.99']), /not a host/);
});

t.test('the rule set replaces the table and drops in input and output', async (t) => {
  const rules = partitionRules(['10.0.0.11', '10.0.0.13']);
  t.equal(
    rules,
    [
      `table inet ${NFT_TABLE}`,
      `delete table inet ${NFT_TABLE}`,
      `table inet ${NFT_TABLE} {`,
      '  chain input {',
      '    type filter hook input priority 0; policy accept;',
      '    ip saddr { 10.0.0.11, 10.0.0.13 } drop',
      '  }',
      '  chain output {',
      '    type filter hook output priority 0; policy accept;',
      '    ip daddr { 10.0.0.11, 10.0.0.13 } drop',
      '  }',
      '}',
      '',
    ].join('\n'),
  );
  t.equal(partitionRules([]), '', 'a node with nothing to block gets no table');
  t.equal(healRules(), `table inet ${NFT_TABLE}\ndelete table inet ${NFT_TABLE}\n`);
  t.throws(() => partitionRules(['10.0.0.1; flush ruleset']), /not an IPv4 address/);
});

t.test('the loss fallback of the netem nemesis drops a random share of eth0 traffic both ways', async (t) => {
  const rules = lossRules('eth0', 15);
  t.match(rules, /^table inet cairn_jepsen_loss\ndelete table inet cairn_jepsen_loss\n/);
  t.match(rules, /iifname "eth0" numgen random mod 100 < 15 drop/);
  t.match(rules, /oifname "eth0" numgen random mod 100 < 15 drop/);
  t.equal(healLossRules(), `table inet ${NFT_LOSS_TABLE}\ndelete table inet ${NFT_LOSS_TABLE}\n`);
  t.throws(() => lossRules('eth0', 150), /integer percentage/);
  t.throws(() => lossRules('eth0"; flush ruleset', 5), /bad device/);
});

t.test('a cut plan drops a one-way cut at the sender\'s output and the receiver\'s input only', async (t) => {
  const all = ['10.0.0.11', '10.0.0.12', '10.0.0.13'];
  // n1's packets to n2 are dropped; n2 -> n1 flows.
  const plan = cutPlan(all, [{ from: 0, to: 1 }]);
  t.same(plan.get('10.0.0.11'), { from: [], to: ['10.0.0.12'] });
  t.same(plan.get('10.0.0.12'), { from: ['10.0.0.11'], to: [] });
  t.same(plan.get('10.0.0.13'), { from: [], to: [] });
  t.equal(
    cutRules(plan.get('10.0.0.12') ?? { from: [], to: [] }),
    [
      `table inet ${NFT_TABLE}`,
      `delete table inet ${NFT_TABLE}`,
      `table inet ${NFT_TABLE} {`,
      '  chain input {',
      '    type filter hook input priority 0; policy accept;',
      '    ip saddr { 10.0.0.11 } drop',
      '  }',
      '  chain output {',
      '    type filter hook output priority 0; policy accept;',
      '  }',
      '}',
      '',
    ].join('\n'),
  );
  t.match(cutRules(plan.get('10.0.0.11') ?? { from: [], to: [] }), /chain input \{\n {4}type filter hook input priority 0; policy accept;\n {2}\}\n {2}chain output \{\n {4}type filter hook output priority 0; policy accept;\n {4}ip daddr \{ 10\.0\.0\.12 \} drop/);
  t.equal(cutRules({ from: [], to: [] }), '', 'a node that drops nothing gets no table');
  t.throws(() => cutPlan(all, [{ from: 0, to: 3 }]), /bad cut/);
  t.throws(() => cutPlan(all, [{ from: 1, to: 1 }]), /bad cut/);
  t.throws(() => cutRules({ from: ['10.0.0.1 } accept'], to: [] }), /not an IPv4 address/);
});

t.test('both-way cuts give the same rules as the halves partition', async (t) => {
  const all = ['10.0.0.11', '10.0.0.12', '10.0.0.13', '10.0.0.14', '10.0.0.15'];
  const side = [1, 3];
  const viaCuts = cutPlan(all, halvesCuts(5, side));
  const viaPlan = partitionPlan(all, side.map((i) => all[i] as string));
  for (const a of all) t.equal(cutRules(viaCuts.get(a) ?? { from: [], to: [] }), partitionRules(viaPlan.get(a) ?? []), a);
});
