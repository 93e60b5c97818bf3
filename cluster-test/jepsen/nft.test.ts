// nftables rules of the partition nemesis (pure text; applying them needs root and is covered
// by run.netns-test.ts).
import t from 'tap';
import { healLossRules, healRules, lossRules, NFT_LOSS_TABLE, NFT_TABLE, partitionPlan, partitionRules } from './nft.js';

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
