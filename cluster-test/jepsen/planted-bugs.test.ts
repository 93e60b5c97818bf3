/**
 * "Prove the checkers" (issue 8, Stage 7): each of the agent's planted bugs (`--planted-bugs`,
 * src/server/planted-bugs.ts) is caught by the checker meant for it, and the same scenario
 * without the bug passes that checker, so what is caught is the bug, not the scenario.
 *
 * - stale-follower-read: three agents in this process; one follower's Raft traffic is cut (the
 *   `raftPartitioned` hook), writes go on through the majority, then a linearizable read through
 *   the cut-off follower. With the bug it answers an old value at once: the register history is
 *   not linearizable (checker/linearizability.ts). Without it the read cannot confirm its read
 *   index, fails, and the history is linearizable.
 * - ack-before-fsync: one `cairn agent` process; acknowledged creates, then kill -9 at once and a
 *   restart. With the bug the last acknowledged adds are gone (checker/set-checker.ts: lost).
 * - watch-skip-event: one `cairn agent` process; a watch from the initial state while creates
 *   are acknowledged one by one. With the bug one change never reaches the stream
 *   (checker/watch-checker.ts: missing).
 *
 * No root needed; each case takes a few seconds.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import t, { type Test } from 'tap';
import { createLogger } from '../../src/platform/index.js';
import { startAgent, WATCH_SKIP_NTH, type Agent } from '../../src/server/index.js';
import { clusterConfigs, waitForAgreedLeader } from '../../src/server/testing/index.js';
import { HistoryRecorder } from '../checker/history.js';
import { checkHistory, formatAnomaly } from '../checker/linearizability.js';
import { checkSet, type SetAdd } from '../checker/set-checker.js';
import { checkWatcher, formatWatchAnomaly, type CommittedChange } from '../checker/watch-checker.js';
import { ARTIST, Cluster, describeResult, field, list, put, request, until } from '../cluster/harness.js';
import { projectResource, TrackedWatch, WatchStream } from '../cluster/watch-client.js';

// ---- stale-follower-read ---------------------------------------------------------------------

interface StaleReadRun {
  readonly valid: ReturnType<typeof checkHistory>['valid'];
  readonly anomalies: string[];
  /** What the cut-off follower's read returned (HTTP status, and the value when 200). */
  readonly followerRead: string;
}

async function staleReadScenario(t: Test, bug: boolean): Promise<StaleReadRun> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'cairn-planted-'));
  const agents: Agent[] = [];
  t.teardown(async () => {
    await Promise.all(agents.map((a) => a.close()));
    await rm(dir, { recursive: true, force: true });
  });
  const cut = new Set<string>();
  for (const cfg of await clusterConfigs(dir, 3, { plantedBugs: bug ? ['stale-follower-read'] : [] })) {
    const id = cfg.nodeId;
    agents.push(await startAgent(cfg, { logger: createLogger({ level: 'error', nodeId: id }), raftPartitioned: () => cut.has(id) }));
  }
  await Promise.all(agents.map((a) => a.ready));
  // The leader all three name in one term: a deposed leader still calling itself leader would
  // make the node cut off below the real leader, and the writes to the 'leader' fail.
  const leader = await waitForAgreedLeader(agents, 20_000);
  const follower = agents.find((a) => a !== leader) as Agent;
  const url = (a: Agent): string => `http://${a.httpAddress}/v1/resource/${ARTIST}/reg?namespace=stale`;

  const history = new HistoryRecorder();
  const start = performance.now();
  const time = (): number => performance.now() - start;
  const write = async (value: string): Promise<number> => {
    const op = history.invoke(0, 'write', 'reg', value, time());
    const r = await request(url(leader), { method: 'PUT', body: { data: { name: value } }, timeoutMs: 10_000 });
    if (r.status !== 200) throw new Error(`write ${value}: ${describeResult(r)}`);
    history.complete(op, 'ok', value, time());
    return Number(field(r.body, 'version'));
  };
  const read = async (via: Agent, proc: number, timeoutMs: number): Promise<string> => {
    const op = history.invoke(proc, 'read', 'reg', null, time());
    const r = await request(url(via), { timeoutMs });
    const name = field(field(r.body, 'data'), 'name');
    if (r.status === 200 && typeof name === 'string') {
      history.complete(op, 'ok', name, time());
      return `200 ${name}`;
    }
    // Not an answer: the read may or may not have happened (Jepsen's info).
    history.complete(op, 'info', null, time());
    return describeResult(r);
  };

  // v0 reaches every node, then the follower is cut off and v1..v3 commit on the majority.
  const v0 = await write('v0');
  await until('the follower to apply v0', 10_000, async () => ((follower.coordinator()?.status().applied ?? 0) >= v0 ? true : undefined));
  cut.add(follower.nodeId);
  for (const v of ['v1', 'v2', 'v3']) await write(v);
  const followerRead = await read(follower, 1, 8_000);
  await read(leader, 2, 8_000);
  cut.clear();
  const res = checkHistory(history.events);
  return { valid: res.valid, anomalies: res.anomalies.map(formatAnomaly), followerRead };
}

t.test('stale-follower-read: a cut-off follower serves a stale linearizable read; the linearizability checker says no', async (t) => {
  await t.test('with the bug', async (t) => {
    const run = await staleReadScenario(t, true);
    t.comment(`follower read: ${run.followerRead}; verdict ${String(run.valid)}\n${run.anomalies.join('\n')}`);
    t.equal(run.followerRead, '200 v0', 'the cut-off follower answered the value from before the partition');
    t.equal(run.valid, false, 'the history is not linearizable');
    t.ok(run.anomalies.length > 0, 'an anomaly is reported');
  });
  await t.test('without the bug', async (t) => {
    const run = await staleReadScenario(t, false);
    t.comment(`follower read: ${run.followerRead}; verdict ${String(run.valid)}`);
    t.not(run.followerRead.slice(0, 3), '200', 'the cut-off follower does not answer (its read index cannot be confirmed)');
    t.equal(run.valid, true, 'the history is linearizable');
  });
});

// ---- ack-before-fsync ------------------------------------------------------------------------

async function lostAfterKillScenario(t: Test, bug: boolean): Promise<ReturnType<typeof checkSet>> {
  // Formed without the bug and stopped cleanly, so the cluster's own first entries are on disk
  // (otherwise kill -9 could lose the bootstrap itself); then restarted with the bug.
  const cluster = await Cluster.start(t, { size: 1, tickMs: 20 });
  const node = await cluster.waitForLeader();
  await node.term();
  node.startWith(['--bootstrap-expect', '1', ...(bug ? ['--planted-bugs', 'ack-before-fsync'] : [])]);
  await node.waitReady();
  await cluster.waitForLeader();
  const adds: SetAdd[] = [];
  for (let i = 0; i < 30; i++) {
    const name = `e${i}`;
    const r = await put(node, { name, namespace: 'set', data: { name }, version: '0', key: `add-${name}` });
    adds.push({ element: name, status: r.status === 200 ? 'ok' : r.status === 409 || r.status === 400 ? 'fail' : 'info' });
  }
  t.equal(adds.filter((a) => a.status === 'ok').length, 30, 'every add was acknowledged');
  await node.kill9();
  node.restart();
  await node.waitReady();
  await cluster.waitForLeader();
  const finalRead = [...(await list(node, ARTIST, { namespace: 'set' })).keys()];
  return checkSet(adds, finalRead);
}

t.test('ack-before-fsync: kill -9 after acknowledged adds loses some; the set checker reports them lost', async (t) => {
  await t.test('with the bug', async (t) => {
    const res = await lostAfterKillScenario(t, true);
    t.comment(`ok ${res.ok}, lost ${res.lost.length}: ${res.lost.join(' ')}`);
    t.equal(res.valid, false, 'the set checker fails the run');
    t.ok(res.lost.length > 0, 'acknowledged adds are reported lost');
  });
  await t.test('without the bug', async (t) => {
    const res = await lostAfterKillScenario(t, false);
    t.equal(res.valid, true, 'every acknowledged add survives kill -9');
    t.equal(res.ok, 30);
  });
});

// ---- watch-skip-event ------------------------------------------------------------------------

async function watchScenario(t: Test, bug: boolean): Promise<ReturnType<typeof checkWatcher>> {
  const cluster = await Cluster.start(t, { size: 1, tickMs: 20, flags: bug ? ['--planted-bugs', 'watch-skip-event'] : [] });
  const node = await cluster.waitForLeader();
  const watch = new TrackedWatch('w', { type: ARTIST, namespace: 'watched' }, false);
  const stream = new WatchStream('s', [watch]);
  await stream.open(node);
  // The acknowledgements are the committed history of this namespace: one writer, creates only.
  const changes: CommittedChange[] = [];
  const n = WATCH_SKIP_NTH + 10;
  for (let i = 0; i < n; i++) {
    const name = `a${i}`;
    const r = await put(node, { name, namespace: 'watched', data: { name }, version: '0', key: `w-${name}` });
    if (r.status !== 200) throw new Error(`create ${name}: ${describeResult(r)}`);
    const { key, value } = projectResource(r.body);
    changes.push({ revision: Number(field(r.body, 'version')), kind: 'upsert', key, value });
  }
  const last = changes[changes.length - 1]?.revision ?? 0;
  await until(`the watch to receive revision ${last}`, 15_000, async () => (watch.record().connections[0]?.events.some((e) => e.type === 'change' && e.revision === last) ? true : undefined), () => `covered ${String(watch.covered)}`, 20);
  await stream.close();
  return checkWatcher({ start: { revision: 0, resources: [] }, changes, completeThrough: last }, watch.record());
}

t.test('watch-skip-event: a dropped change is a gap the watch checker reports', async (t) => {
  await t.test('with the bug', async (t) => {
    const res = await watchScenario(t, true);
    t.comment(res.anomalies.map(formatWatchAnomaly).join('\n'));
    t.equal(res.valid, false, 'the watch checker fails the watcher');
    t.ok(res.anomalies.some((a) => a.kind === 'missing'), 'a missing change is reported');
  });
  await t.test('without the bug', async (t) => {
    const res = await watchScenario(t, false);
    t.equal(res.valid, true, res.anomalies.map(formatWatchAnomaly).join('\n'));
  });
});
