/**
 * nftables rule sets for the partition nemesis, as text for `nft -f -` inside a node's network
 * namespace. Pure, so the rules can be unit-tested without root.
 */

/** The table every partition rule lives in; deleting it heals the node. */
export const NFT_TABLE = 'cairn_jepsen';

/**
 * Drops every IPv4 packet to or from `blocked` (the other side's addresses), both directions,
 * in the node's own namespace. The table is created fresh (deleted first if present), so
 * applying twice replaces rather than adds.
 */
export function partitionRules(blocked: readonly string[]): string {
  for (const a of blocked) if (!/^\d{1,3}(\.\d{1,3}){3}$/.test(a)) throw new Error(`not an IPv4 address: ${a}`);
  if (blocked.length === 0) return '';
  const set = `{ ${blocked.join(', ')} }`;
  return [
    `table inet ${NFT_TABLE}`,
    `delete table inet ${NFT_TABLE}`,
    `table inet ${NFT_TABLE} {`,
    '  chain input {',
    '    type filter hook input priority 0; policy accept;',
    `    ip saddr ${set} drop`,
    '  }',
    '  chain output {',
    '    type filter hook output priority 0; policy accept;',
    `    ip daddr ${set} drop`,
    '  }',
    '}',
    '',
  ].join('\n');
}

/** Removes the partition table (nothing if absent: `table` first makes sure it exists). */
export function healRules(): string {
  return `table inet ${NFT_TABLE}\ndelete table inet ${NFT_TABLE}\n`;
}

/**
 * For a partition of `all` addresses into `side` and the rest: what each address must drop.
 * Every address on one side blocks every address on the other.
 */
export function partitionPlan(all: readonly string[], side: readonly string[]): Map<string, string[]> {
  const inSide = new Set(side);
  for (const s of side) if (!all.includes(s)) throw new Error(`partition side names ${s}, not a host`);
  const plan = new Map<string, string[]>();
  for (const a of all) plan.set(a, all.filter((b) => inSide.has(a) !== inSide.has(b)));
  return plan;
}

/** The table of the packet-loss fallback of the netem nemesis (kernels without sch_netem). */
export const NFT_LOSS_TABLE = 'cairn_jepsen_loss';

/**
 * Drops `percent`% of the packets in and out of `dev`, at random (nftables `numgen random`):
 * the netem nemesis's loss where the kernel has no netem qdisc. Replaces any earlier one.
 */
export function lossRules(dev: string, percent: number): string {
  if (!/^[a-z0-9]+$/.test(dev)) throw new Error(`bad device name ${dev}`);
  if (!Number.isInteger(percent) || percent < 0 || percent > 100) throw new Error(`loss must be an integer percentage, got ${String(percent)}`);
  return [
    `table inet ${NFT_LOSS_TABLE}`,
    `delete table inet ${NFT_LOSS_TABLE}`,
    `table inet ${NFT_LOSS_TABLE} {`,
    '  chain input {',
    '    type filter hook input priority 0; policy accept;',
    `    iifname "${dev}" numgen random mod 100 < ${percent} drop`,
    '  }',
    '  chain output {',
    '    type filter hook output priority 0; policy accept;',
    `    oifname "${dev}" numgen random mod 100 < ${percent} drop`,
    '  }',
    '}',
    '',
  ].join('\n');
}

/** Removes the loss table (nothing if absent). */
export function healLossRules(): string {
  return `table inet ${NFT_LOSS_TABLE}\ndelete table inet ${NFT_LOSS_TABLE}\n`;
}
