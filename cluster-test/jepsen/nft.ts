/**
 * nftables rule sets for the partition nemesis, as text for `nft -f -` inside a node's network
 * namespace. Pure, so the rules can be unit-tested without root.
 */

/** The table every partition rule lives in; deleting it heals the node. */
export const NFT_TABLE = 'cairn_jepsen';

/** What one node drops: packets arriving from `from`, packets it sends to `to`. */
export interface NodeCut {
  readonly from: readonly string[];
  readonly to: readonly string[];
}

function checkAddresses(addrs: readonly string[]): void {
  for (const a of addrs) if (!/^\d{1,3}(\.\d{1,3}){3}$/.test(a)) throw new Error(`not an IPv4 address: ${a}`);
}

/**
 * The node's partition table: drops input from `cut.from` and output to `cut.to` (IPv4), in the
 * node's own namespace. The table is created fresh (deleted first if present), so applying
 * twice replaces rather than adds. Empty when the node drops nothing.
 */
export function cutRules(cut: NodeCut): string {
  checkAddresses(cut.from);
  checkAddresses(cut.to);
  if (cut.from.length === 0 && cut.to.length === 0) return '';
  const chain = (name: 'input' | 'output', match: string, addrs: readonly string[]): string[] => [
    `  chain ${name} {`,
    `    type filter hook ${name} priority 0; policy accept;`,
    ...(addrs.length > 0 ? [`    ip ${match} { ${addrs.join(', ')} } drop`] : []),
    '  }',
  ];
  return [
    `table inet ${NFT_TABLE}`,
    `delete table inet ${NFT_TABLE}`,
    `table inet ${NFT_TABLE} {`,
    ...chain('input', 'saddr', cut.from),
    ...chain('output', 'daddr', cut.to),
    '}',
    '',
  ].join('\n');
}

/** Drops every IPv4 packet to or from `blocked` (the other side's addresses), both directions. */
export function partitionRules(blocked: readonly string[]): string {
  return cutRules({ from: blocked, to: blocked });
}

/**
 * For directed cuts between node indexes (partitions.ts) over the nodes' `addresses`: what each
 * address drops. A cut from F to T is dropped twice, on F's output and on T's input, so a cut
 * both ways gives both nodes the same set in both chains (what `partitionRules` writes), and a
 * one-way cut leaves the other direction alone at both ends.
 */
export function cutPlan(addresses: readonly string[], cuts: readonly { readonly from: number; readonly to: number }[]): Map<string, NodeCut> {
  const from = addresses.map(() => new Set<string>());
  const to = addresses.map(() => new Set<string>());
  for (const c of cuts) {
    const f = addresses[c.from];
    const t = addresses[c.to];
    if (f === undefined || t === undefined || c.from === c.to) throw new Error(`bad cut ${c.from}->${c.to} over ${addresses.length} nodes`);
    from[c.to]?.add(f);
    to[c.from]?.add(t);
  }
  const order = (s: Set<string>): string[] => addresses.filter((a) => s.has(a));
  return new Map(addresses.map((a, i) => [a, { from: order(from[i] as Set<string>), to: order(to[i] as Set<string>) }]));
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
