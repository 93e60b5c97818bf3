import { CairnError, type LogIndex, type NodeId } from '../../../base/index.js';
import type { PlantedBugs } from '../../options.js';
import { TEST_COMMAND, TestCluster, decodeCommand, encodeCommand, type ClusterOptions, type TestNode } from '../cluster.js';
import type { ConfigChange, Message, Role } from '../../types.js';
import * as fmt from './format.js';
import { ScriptError, type Arg, type Command } from './script.js';

/**
 * The interaction language of the transcript tests (after etcd raft's `rafttest`
 * InteractionEnv): each command drives a TestCluster of real RawNodes and prints what
 * happened. See src/raft/testdata/README.md for the commands.
 */

const PLANTED_BUGS: Record<string, keyof PlantedBugs> = {
  'commit-old-term': 'commitOldTermByCount',
  'read-index-without-heartbeat': 'readIndexWithoutHeartbeat',
  'double-vote': 'doubleVote',
};

const MAX_STABILIZE_ROUNDS = 1000;

/** A command's arguments, each consumed at most once; unknown leftovers are an error. */
class Args {
  private readonly used = new Set<Arg>();

  constructor(
    private readonly where: string,
    private readonly cmd: Command,
  ) {}

  fail(why: string): never {
    throw new ScriptError(`${this.where}: ${this.cmd.name}: ${why}`);
  }

  /** All positional arguments. */
  positional(): Arg[] {
    const out = this.cmd.args.filter((a) => a.key === undefined);
    for (const a of out) this.used.add(a);
    return out;
  }

  /** Positional values, lists flattened. */
  positionalValues(): string[] {
    return this.positional().flatMap((a) => a.values);
  }

  pos(i: number, what: string): string {
    const a = this.cmd.args.filter((x) => x.key === undefined)[i];
    if (!a || a.list || a.values.length !== 1) return this.fail(`argument ${i + 1} must be ${what}`);
    this.used.add(a);
    return a.values[0] as string;
  }

  posInt(i: number, what: string): number {
    return this.toInt(this.pos(i, what), what);
  }

  key(name: string): Arg | undefined {
    const a = this.cmd.args.find((x) => x.key === name);
    if (a) this.used.add(a);
    return a;
  }

  str(name: string): string | undefined {
    const a = this.key(name);
    if (!a) return undefined;
    if (a.list || a.values.length !== 1) return this.fail(`${name}= takes one value`);
    return a.values[0];
  }

  int(name: string): number | undefined {
    const s = this.str(name);
    return s === undefined ? undefined : this.toInt(s, name);
  }

  bool(name: string): boolean | undefined {
    const s = this.str(name);
    if (s === undefined) return undefined;
    if (s !== 'true' && s !== 'false') return this.fail(`${name}= must be true or false, got ${s}`);
    return s === 'true';
  }

  list(name: string): string[] | undefined {
    return this.key(name)?.values.slice();
  }

  done(): void {
    const extra = this.cmd.args.filter((a) => !this.used.has(a));
    if (extra.length > 0) {
      this.fail(`unexpected argument(s) ${extra.map((a) => (a.key ? `${a.key}=` : '') + (a.list ? `(${a.values.join(',')})` : a.values.join(''))).join(' ')}`);
    }
  }

  private toInt(s: string, what: string): number {
    if (!/^\d+$/.test(s)) return this.fail(`${what} must be a non-negative integer, got ${s}`);
    return Number(s);
  }
}

/** `1` and `n1` both name node n1. */
function nodeName(s: string): string {
  return /^\d+$/.test(s) ? `n${s}` : s;
}

interface RoleTerm {
  readonly role: Role;
  readonly term: number;
}

/**
 * Repeats print once with a count, so the heartbeats of many ticks stay readable: a run of
 * one identical line as `line (x5)`, a run of a repeated block of up to 4 lines (heartbeats
 * to each follower, tick after tick) as the block followed by `(the N lines above x5)`.
 */
function compactRuns(lines: readonly string[]): string[] {
  const out: string[] = [];
  const same = (a: number, b: number, len: number): boolean => {
    for (let k = 0; k < len; k++) if (lines[a + k] !== lines[b + k]) return false;
    return true;
  };
  for (let i = 0; i < lines.length; ) {
    let best = { period: 1, times: 1 };
    for (let period = 1; period <= 4 && i + 2 * period <= lines.length; period++) {
      let times = 1;
      while (i + (times + 1) * period <= lines.length && same(i, i + times * period, period)) times++;
      if (times > 1 && times * period > best.times * best.period) best = { period, times };
    }
    if (best.times === 1) {
      out.push(lines[i] as string);
    } else if (best.period === 1) {
      out.push(`${lines[i] as string} (x${best.times})`);
    } else {
      out.push(...lines.slice(i, i + best.period), `(the ${best.period} lines above x${best.times})`);
    }
    i += best.times * best.period;
  }
  return out;
}

export class InteractionEnv {
  private cluster: TestCluster | undefined;
  private out: string[] = [];
  private where = '';
  /** `log-level none`: commands run but print only errors (etcd's way to keep setup short). */
  private quiet = false;
  /** The highest commit index anywhere in the cluster when each read was asked. */
  private readonly readAskedAt = new Map<string, number>();

  constructor(private readonly file: string) {}

  /** Runs one command; returns its output lines (never empty: `ok` when nothing to say). */
  handle(cmd: Command): string[] {
    this.out = [];
    this.where = `${this.file}:${cmd.line}`;
    const a = new Args(this.where, cmd);
    try {
      this.dispatch(cmd.name, a);
      a.done();
    } catch (e) {
      // Conditions the core reports to its caller are part of the transcript; anything else
      // (an assertion, a script mistake) fails the test.
      if (!(e instanceof CairnError)) throw e;
      this.out.push(`error: ${e.code}: ${e.message}`);
    }
    if (this.quiet) this.out = this.out.filter((l) => l.startsWith('error: '));
    return this.out.length > 0 ? this.out : ['ok'];
  }

  private dispatch(name: string, a: Args): void {
    switch (name) {
      case 'add-nodes':
        return this.addNodes(a);
      case 'add-empty':
        return this.addEmpty(a);
      case 'campaign':
        return this.campaign(a);
      case 'connection-lost':
        return this.connectionLost(a);
      case 'propose':
        return this.propose(a);
      case 'propose-conf-change':
        return this.proposeConfChange(a);
      case 'tick-election':
        return this.tickElection(a);
      case 'tick-heartbeat':
        return this.tickHeartbeat(a);
      case 'tick':
        return this.tick(a);
      case 'process-ready':
        return this.processReady(a);
      case 'deliver-msgs':
        return this.deliverMsgs(a);
      case 'stabilize':
        return this.stabilize(a);
      case 'partition':
        return this.partition(a);
      case 'isolate':
        this.c().isolate(this.id(a.pos(0, 'a node')));
        return;
      case 'heal':
        this.c().heal();
        return;
      case 'cut':
        this.c().cutOneWay(this.id(a.pos(0, 'the sending node')), this.id(a.pos(1, 'the receiving node')));
        return;
      case 'restart':
        return this.restart(a);
      case 'raft-log':
        return this.raftLog(a);
      case 'raft-state':
        for (const id of this.c().ids()) this.out.push(this.stateLine(id));
        return;
      case 'status':
        return this.status(a);
      case 'transfer-leader':
        return this.transferLeader(a);
      case 'read-index':
        return this.readIndex(a);
      case 'compact':
        return this.compact(a);
      case 'applied':
        return this.applied(a);
      case 'log-level': {
        const level = a.pos(0, 'none or info');
        if (level !== 'none' && level !== 'info') a.fail(`unknown level ${level}; use none or info`);
        this.quiet = level === 'none';
        return;
      }
      default:
        a.fail('unknown command');
    }
  }

  // ---- helpers ------------------------------------------------------------------------------

  private c(): TestCluster {
    if (!this.cluster) throw new ScriptError(`${this.where}: no cluster yet; start with add-nodes`);
    return this.cluster;
  }

  /** A known node id from `1` or `n1`. */
  private id(s: string): string {
    const id = nodeName(s);
    if (!this.c().nodes.has(id as NodeId)) throw new ScriptError(`${this.where}: no node ${id}`);
    return id;
  }

  private ids(a: Args): string[] {
    const ids = a.positionalValues().map((s) => this.id(s));
    return ids.length > 0 ? ids : this.c().ids();
  }

  private n(id: string): TestNode {
    return this.c().node(id);
  }

  private roleTerm(id: string): RoleTerm {
    const s = this.n(id).raw.status();
    return { role: s.role, term: s.term };
  }

  /** INFO lines for a change of role or term since `before` (etcd's "became X at term T"). */
  private changes(id: string, before: RoleTerm, indent = ''): string[] {
    const now = this.roleTerm(id);
    if (now.role === before.role && now.term === before.term) return [];
    return [`${indent}INFO ${id} became ${now.role} at term ${now.term}`];
  }

  /** Runs f against node `id` and prints the role/term change it caused. */
  private observe<T>(id: string, f: () => T): T {
    const before = this.roleTerm(id);
    const r = f();
    this.out.push(...this.changes(id, before));
    return r;
  }

  private stateLine(id: string): string {
    const s = this.n(id).raw.status();
    const member = s.config.members.find((m) => m.id === s.id);
    const suffrage = member === undefined ? ' (not a member)' : member.suffrage === 'learner' ? ' (learner)' : '';
    return `${id}: ${s.role}${suffrage} Term:${s.term} Vote:${fmt.node(s.vote)} Lead:${fmt.node(s.leader)} Commit:${s.commit} Applied:${s.applied} Last:${s.lastIndex}`;
  }

  private electionTicks(id: string): number {
    return this.n(id).options.electionTimeoutTicks ?? 10;
  }

  // ---- commands -----------------------------------------------------------------------------

  private addNodes(a: Args): void {
    if (this.cluster) a.fail('the cluster exists already; use add-empty to add a node later');
    const count = a.posInt(0, 'the number of nodes');
    if (count < 1) a.fail('needs at least one node');
    const all = Array.from({ length: count }, (_, i) => `n${i + 1}`);
    const learnerIds = (a.list('learners') ?? []).map(nodeName);
    const voterIds = (a.list('voters') ?? all.filter((id) => !learnerIds.includes(id))).map(nodeName);
    const named = [...voterIds, ...learnerIds].sort();
    if (named.length !== count || named.some((id) => !all.includes(id)) || new Set(named).size !== count) {
      a.fail(`voters and learners must name each of n1..n${count} exactly once`);
    }
    const planted: { -readonly [K in keyof PlantedBugs]: boolean } = {};
    for (const bug of a.list('plantedbugs') ?? []) {
      const key = PLANTED_BUGS[bug];
      if (!key) a.fail(`unknown planted bug ${bug}; known: ${Object.keys(PLANTED_BUGS).join(', ')}`);
      planted[key] = true;
    }
    const seed = a.int('seed');
    const election = a.int('election');
    const heartbeat = a.int('heartbeat');
    const leaderLost = a.int('leader-lost');
    const preVote = a.bool('prevote');
    const checkQuorum = a.bool('checkquorum');
    const maxAppendBytes = a.int('max-append-bytes');
    const maxInflight = a.int('max-inflight');
    const chunk = a.int('snapshot-chunk');
    const opts: ClusterOptions = {
      ...(seed !== undefined ? { seed } : {}),
      ...(election !== undefined ? { electionTimeoutTicks: election } : {}),
      ...(heartbeat !== undefined ? { heartbeatTimeoutTicks: heartbeat } : {}),
      ...(leaderLost !== undefined ? { leaderLostTicks: leaderLost } : {}),
      ...(preVote !== undefined ? { preVote } : {}),
      ...(checkQuorum !== undefined ? { checkQuorum } : {}),
      ...(maxAppendBytes !== undefined ? { maxAppendBytes } : {}),
      ...(maxInflight !== undefined ? { maxInflightMsgs: maxInflight } : {}),
      ...(chunk !== undefined ? { snapshotChunkBytes: chunk } : {}),
      ...(Object.keys(planted).length > 0 ? { plantedBugs: planted } : {}),
    };
    const cluster = new TestCluster(opts);
    cluster.bootstrap(voterIds, learnerIds);
    this.cluster = cluster;
    const first = this.n(all[0] as string).raw.status();
    this.out.push(`config ${fmt.config(first.config)}`);
    for (const id of all) this.out.push(this.stateLine(id));
  }

  private addEmpty(a: Args): void {
    const id = nodeName(a.pos(0, 'a node id'));
    if (this.c().nodes.has(id as NodeId)) a.fail(`node ${id} exists already`);
    this.c().addEmpty(id);
    this.out.push(this.stateLine(id));
  }

  private campaign(a: Args): void {
    const id = this.id(a.pos(0, 'a node'));
    this.observe(id, () => this.n(id).raw.campaign());
  }

  /** The driver of `id` saw its connection with `peer` break (RawNode.reportConnectionLost). */
  private connectionLost(a: Args): void {
    const id = this.id(a.pos(0, 'a node'));
    const peer = this.id(a.pos(1, 'the peer whose connection broke'));
    const armed = this.observe(id, () => this.n(id).raw.reportConnectionLost(peer as NodeId));
    const lead = fmt.node(this.n(id).raw.status().leader);
    this.out.push(armed ? `${id} forgot its leader; campaigning at its turn` : `${id} ignored the report (Lead:${lead})`);
  }

  private propose(a: Args): void {
    const id = this.id(a.pos(0, 'a node'));
    const data = a.pos(1, 'the command text');
    const p = this.observe(id, () => this.n(id).raw.propose(encodeCommand(data)));
    this.out.push(`proposed ${p.term}/${p.index}`);
  }

  private proposeConfChange(a: Args): void {
    const id = this.id(a.pos(0, 'a node'));
    const type = a.pos(1, 'add-learner, add-voter, promote or remove');
    const target = nodeName(a.pos(2, 'the node to change')) as NodeId;
    let change: ConfigChange;
    switch (type) {
      case 'add-learner':
      case 'add-voter':
        change = { type, id: target, address: `${target}:7500` };
        break;
      case 'promote':
      case 'remove':
        change = { type, id: target };
        break;
      default:
        return a.fail(`unknown change ${type}; use add-learner, add-voter, promote or remove`);
    }
    const p = this.observe(id, () => this.n(id).raw.proposeConfigChange(change));
    this.out.push(`proposed ${p.term}/${p.index}`);
  }

  /**
   * Ticks the named nodes together, one tick at a time, until one of them acts on a timeout:
   * a follower or candidate campaigns (its role or term changes, or it queues vote
   * requests), a leader steps down for lack of a quorum; then it stops at once, so the nodes
   * after that one in the list have not had that last tick. At most 2x the election timeout:
   * the longest randomized timeout, and two check-quorum rounds for a leader. Naming several
   * nodes models time passing for all of them (their leader leases expire together).
   */
  private tickElection(a: Args): void {
    const ids = a.positionalValues().map((s) => this.id(s));
    if (ids.length === 0) a.fail('name at least one node');
    const watch = ids.map((id) => {
      const before = this.roleTerm(id);
      return { id, before, watchReady: before.role !== 'leader' && !this.n(id).raw.hasReady() };
    });
    const max = 2 * Math.max(...ids.map((id) => this.electionTicks(id)));
    let acted = false;
    for (let i = 0; i < max && !acted; i++) {
      for (const w of watch) {
        const raw = this.n(w.id).raw;
        raw.tick();
        const now = this.roleTerm(w.id);
        acted = now.role !== w.before.role || now.term !== w.before.term || (w.watchReady && raw.hasReady());
        if (acted) break; // the first to time out goes first; the others have not ticked yet
      }
    }
    for (const w of watch) this.out.push(...this.changes(w.id, w.before));
  }

  private tickHeartbeat(a: Args): void {
    const id = this.id(a.pos(0, 'a node'));
    const ticks = this.n(id).options.heartbeatTimeoutTicks ?? 1;
    this.observe(id, () => this.c().tick(id, ticks));
  }

  private tick(a: Args): void {
    const id = this.id(a.pos(0, 'a node'));
    const ticks = a.posInt(1, 'the number of ticks');
    this.observe(id, () => this.c().tick(id, ticks));
  }

  private printReady(id: string): boolean {
    const before = this.roleTerm(id);
    const rd = this.c().handleReady(id);
    if (!rd) return false;
    const lines = fmt.ready(rd);
    const msgStart = lines.indexOf('Messages:');
    if (msgStart >= 0) {
      const end = lines.findIndex((l, k) => k > msgStart && /^(ReadStates|ReadFailures):$/.test(l));
      const stop = end < 0 ? lines.length : end;
      lines.splice(msgStart + 1, stop - msgStart - 1, ...compactRuns(lines.slice(msgStart + 1, stop)));
    }
    this.out.push(`> ${id} handling Ready`, ...lines.map((l) => `  ${l}`), ...this.changes(id, before, '  '));
    // Linearizable reads (thesis §6.4): a read must see every write committed before it was
    // asked, so its read index may not be below the commit index of that moment.
    for (const rs of rd.readStates) {
      const asked = this.readAskedAt.get(rs.requestId);
      if (asked !== undefined && rs.index < asked) {
        this.out.push(`  STALE READ: ${rs.requestId} reads at index ${rs.index}, but index ${asked} was committed before it was asked`);
      }
    }
    return true;
  }

  private processReady(a: Args): void {
    for (const id of this.ids(a)) this.printReady(id);
  }

  /** Takes the queued messages matching `select` out of every outbox, in node then send order. */
  private take(select: (m: Message) => boolean): Message[] {
    const taken: Message[] = [];
    for (const n of this.c().nodes.values()) {
      const keep: Message[] = [];
      for (const m of n.outbox) (select(m) ? taken : keep).push(m);
      n.outbox = keep;
    }
    return taken;
  }

  /**
   * Delivers messages grouped by recipient (node order), each group in send order. Messages
   * to different nodes are independent (a step only queues output until the next Ready), so
   * this is the same as delivering them in send order.
   */
  private deliver(msgs: readonly Message[], drop: (m: Message) => boolean): void {
    const c = this.c();
    const recipients = [...c.ids(), ...new Set(msgs.map((m) => m.to).filter((to) => !c.nodes.has(to)))];
    for (const to of recipients) {
      const group = msgs.filter((m) => m.to === to);
      if (group.length === 0) continue;
      const lines: string[] = [];
      for (const m of group) {
        const text = fmt.message(m);
        const target = c.nodes.get(to);
        if (drop(m)) lines.push(`dropped: ${text}`);
        else if (c.isCut(m.from, m.to)) lines.push(`dropped (partition): ${text}`);
        else if (!target) lines.push(`dropped (no node ${to}): ${text}`);
        else {
          lines.push(text);
          const before = this.roleTerm(to);
          target.raw.step(structuredClone(m));
          lines.push(...this.changes(to, before));
        }
      }
      this.out.push(`> ${to} receiving messages`, ...compactRuns(lines).map((l) => `  ${l}`));
    }
  }

  private deliverMsgs(a: Args): void {
    const to = new Set(a.positionalValues().map(nodeName));
    const drop = new Set((a.list('drop') ?? []).map(nodeName));
    const fromList = a.list('from');
    const from = fromList ? new Set(fromList.map(nodeName)) : undefined;
    const typeName = a.str('type');
    const type = typeName === undefined ? undefined : fmt.parseMessageType(typeName);
    if (typeName !== undefined && type === undefined) a.fail(`unknown message type ${typeName}`);
    const everyone = to.size === 0 && drop.size === 0;
    const msgs = this.take(
      (m) => (type === undefined || m.type === type) && (from === undefined || from.has(m.from)) && (everyone || to.has(m.to) || drop.has(m.to)),
    );
    this.deliver(msgs, (m) => drop.has(m.to));
  }

  /**
   * Until nothing moves: every node (of those named) handles its Ready, then every node
   * receives the messages addressed to it (etcd `stabilize`).
   */
  private stabilize(a: Args): void {
    const ids = this.ids(a);
    const only = a.positional().length > 0 ? new Set(ids) : undefined;
    for (let round = 0; round < MAX_STABILIZE_ROUNDS; round++) {
      let moved = false;
      for (const id of ids) if (this.printReady(id)) moved = true;
      const msgs = this.take((m) => only === undefined || only.has(m.to));
      if (msgs.length > 0) {
        moved = true;
        this.deliver(msgs, () => false);
      }
      if (!moved) return;
    }
    throw new ScriptError(`${this.where}: the cluster did not stabilize within ${MAX_STABILIZE_ROUNDS} rounds`);
  }

  private partition(a: Args): void {
    const groups = a.positional().map((g) => g.values.map((s) => this.id(s)));
    if (groups.length < 2) a.fail('name at least two groups, e.g. partition (1,2) (3)');
    this.c().partition(...groups);
  }

  private restart(a: Args): void {
    const id = this.id(a.pos(0, 'a node'));
    const lost = this.n(id).outbox.length;
    this.c().restart(id);
    this.out.push(`INFO ${id} restarted from disk${lost > 0 ? `, ${lost} undelivered message(s) lost` : ''}`, this.stateLine(id));
  }

  private raftLog(a: Args): void {
    const id = this.id(a.pos(0, 'a node'));
    const disk = this.n(id).disk;
    if (disk.snapshot) this.out.push(`snapshot ${fmt.snapshotMeta(disk.snapshot.meta)}`);
    if (disk.entries.length === 0) this.out.push(`log is empty`);
    this.out.push(...disk.entries.map(fmt.entry));
  }

  private status(a: Args): void {
    const id = this.id(a.pos(0, 'a node'));
    const s = this.n(id).raw.status();
    this.out.push(this.stateLine(id), `config ${fmt.config(s.config)}`);
    if (s.snapshotIndex > 0) {
      const log = s.firstIndex > s.lastIndex ? 'no entries' : `entries [${s.firstIndex}, ${s.lastIndex}]`;
      this.out.push(`snapshot at ${s.snapshotIndex}, ${log} after it`);
    }
    if (!s.progress) return;
    if (s.leadTransferee !== '') this.out.push(`transferring leadership to ${s.leadTransferee}`);
    const ids = [...s.progress.keys()].sort();
    for (const p of ids) {
      const pr = s.progress.get(p);
      if (!pr) continue;
      // The leader's own entry only tracks what it made durable (its match); its state and
      // next mean nothing, so they are not printed.
      if (p === id) {
        this.out.push(`${p}: self match=${pr.match}`);
        continue;
      }
      this.out.push(`${p}: ${pr.state} match=${pr.match} next=${pr.next} ${pr.recentActive ? 'active' : 'inactive'}`);
    }
  }

  private transferLeader(a: Args): void {
    const from = this.id(a.pos(0, 'the leader'));
    const to = nodeName(a.pos(1, 'the target')) as NodeId;
    this.observe(from, () => this.n(from).raw.transferLeadership(to));
  }

  private readIndex(a: Args): void {
    const id = this.id(a.pos(0, 'a node'));
    const req = a.pos(1, 'a request id');
    const committed = Math.max(...this.c().ids().map((n) => this.n(n).raw.status().commit));
    this.readAskedAt.set(req, committed);
    this.observe(id, () => this.n(id).raw.readIndex(req));
  }

  /** The "state machine" of a test node: its commands so far, comma-separated. */
  private stateMachineAt(n: TestNode, index: number): string {
    const snap = n.disk.snapshot;
    const base = snap ? new TextDecoder().decode(snap.data) : '';
    const cmds = n.applied.filter((e) => e.index > (snap?.meta.index ?? 0) && e.index <= index && e.data[0] === TEST_COMMAND).map((e) => decodeCommand(e.data));
    return [base, ...cmds].filter((s) => s !== '').join(',');
  }

  private compact(a: Args): void {
    const id = this.id(a.pos(0, 'a node'));
    const index = a.posInt(1, 'the index to compact through');
    const n = this.n(id);
    const applied = n.raw.status().applied;
    if (index > applied) a.fail(`${id} has applied only through ${applied}; it cannot snapshot at ${index}`);
    const data = new TextEncoder().encode(this.stateMachineAt(n, index));
    const snap = this.c().compact(id, index as LogIndex, data);
    this.out.push(`${id} compacted its log through ${snap.meta.term}/${snap.meta.index}; snapshot data ${JSON.stringify(new TextDecoder().decode(data))} (${data.length} bytes)`);
  }

  /**
   * What each node applied, one node per line, and whether the nodes agree at every index
   * they both applied (State Machine Safety, Raft §5.4.3).
   */
  private applied(a: Args): void {
    const ids = this.ids(a);
    const byIndex = new Map<number, Map<string, string[]>>();
    for (const id of ids) {
      const n = this.n(id);
      const restored = n.restoredFrom[n.restoredFrom.length - 1];
      // Entries applied before the snapshot was installed, the snapshot, then entries after it.
      const at = restored?.meta.index ?? 0;
      const parts = [
        ...n.applied.filter((e) => e.index <= at).map(fmt.entry),
        ...(restored ? [`[snapshot ${restored.meta.term}/${restored.meta.index} ${JSON.stringify(new TextDecoder().decode(restored.data))}]`] : []),
        ...n.applied.filter((e) => e.index > at).map(fmt.entry),
      ];
      this.out.push(`${id}: ${parts.length > 0 ? parts.join(', ') : '(nothing)'}`);
      for (const e of n.applied) {
        const text = fmt.entry(e);
        const at = byIndex.get(e.index) ?? new Map<string, string[]>();
        byIndex.set(e.index, at);
        at.set(text, [...(at.get(text) ?? []), id]);
      }
    }
    if (ids.length < 2) return;
    const violations = [...byIndex.entries()].filter(([, v]) => v.size > 1).sort((x, y) => x[0] - y[0]);
    if (violations.length === 0) {
      this.out.push('State Machine Safety holds: the nodes applied the same entry at every index');
      return;
    }
    for (const [index, v] of violations) {
      const variants = [...v.entries()].map(([text, who]) => `${text} on ${who.join(',')}`).join(' but ');
      this.out.push(`SAFETY VIOLATION: index ${index} applied as ${variants}`);
    }
  }
}
