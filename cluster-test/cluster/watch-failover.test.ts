/**
 * A watch survives kill -9 of the node serving it. Three real `cairn agent` processes; a
 * CairnClient watches one namespace through node X (X listed first, every node listed), while
 * another client keeps writing (upserts and deletes) through the other two. X is SIGKILLed in
 * the middle of the writes (X is the leader, so the writes also ride out an election). The
 * watch must resume on another node and the events it delivered must be exactly the committed
 * sequence: every acknowledged write's revision once, revisions strictly increasing (no
 * duplicate), and the state the events build equals a final linearizable list.
 */
import t from 'tap';
import { CairnClient, isOutcomeUnknown, type WatchEvent } from '../../src/client/index.js';
import { ARTIST, Cluster, now, until } from './harness.js';

const NAMESPACE = 'wf';
const NAMES = 12;

interface Ack {
  readonly name: string;
  readonly revision: string;
}

t.test('a watch resumes on another node after kill -9 of its node: no gap, no duplicate', async (t) => {
  const cluster = await Cluster.start(t, { size: 3 });
  const { leader: x, followers } = await cluster.roles();
  const watcher = new CairnClient({ endpoints: [x.grpcAddr, ...followers.map((n) => n.grpcAddr)], endpointOrder: 'listed', ...(await cluster.clientOptions()) });
  const writer = new CairnClient({ endpoints: followers.map((n) => n.grpcAddr), timeoutMs: 20_000, ...(await cluster.clientOptions()) });
  t.teardown(() => {
    watcher.close();
    writer.close();
  });

  // The consumer: every event, with when it arrived.
  const events: Array<{ ev: WatchEvent<{ name: string }>; at: number; endpoint: string }> = [];
  const stream = watcher.watch<{ name: string }>({ type: ARTIST, namespace: NAMESPACE }, { reconnectBaseMs: 50 });
  let consumerError: unknown;
  const consuming = (async () => {
    try {
      for await (const ev of stream) events.push({ ev, at: now(), endpoint: stream.endpoint });
    } catch (e) {
      consumerError = e;
    }
  })();
  await until('the watch tail', 20_000, async () => (events.some((e) => e.ev.type === 'tail') ? true : undefined));
  t.equal(stream.endpoint, x.grpcAddr, `watching through ${x.id} (the leader)`);

  // Two writers: upserts of a dozen names, and a delete now and then.
  const acks: Ack[] = [];
  const unknown: string[] = [];
  let writing = true;
  let ops = 0;
  const worker = async (w: number): Promise<void> => {
    for (let i = 0; writing; i++) {
      const name = `n${(i * 5 + w * 7) % NAMES}`;
      ops++;
      try {
        if (i % 9 === 8) await writer.delete({ type: ARTIST, name, tenancy: { namespace: NAMESPACE } });
        else {
          const r = await writer.write({ type: ARTIST, name, tenancy: { namespace: NAMESPACE } }, { data: { name: `${name} ${w}.${i}` } });
          acks.push({ name, revision: r.version });
        }
      } catch (e) {
        // The outcome of a write cut off by the failover may be unknown: it is then neither
        // counted nor required, but the final list still checks what the watch built.
        if (!isOutcomeUnknown(e)) throw e;
        unknown.push(`${name}: ${(e as Error).message}`);
      }
    }
  };
  const workers = [worker(0), worker(1)];
  await until('50 acknowledged writes', 30_000, async () => (acks.length >= 50 ? true : undefined));
  const killedAt = now();
  const seenBeforeKill = events.length;
  await x.kill9();
  t.comment(`killed ${x.id} after ${acks.length} acknowledged writes; ${seenBeforeKill} events seen`);
  const acksAtKill = acks.length;
  await until('50 more acknowledged writes after the kill', 60_000, async () => (acks.length >= acksAtKill + 50 ? true : undefined));
  writing = false;
  await Promise.all(workers);

  // The final state, linearizably, from a survivor; then wait until the watch has caught up
  // with it: the events build that state, or an event or bookmark reaches its revision.
  const final = await writer.list<{ name: string }>(ARTIST, { namespace: NAMESPACE });
  const want = JSON.stringify(final.resources.map((r) => [r.id.name, r.version]).sort());
  const built = (): Map<string, string> => {
    const m = new Map<string, string>();
    for (const { ev } of events) {
      if (ev.type === 'change') m.set(ev.resource.id.name, ev.resource.version);
      else if (ev.type === 'delete') m.delete(ev.resource.id.name);
    }
    return m;
  };
  const reached = (): boolean => events.some(({ ev }) => ev.type !== 'tail' && ev.type !== 'reset' && BigInt(ev.revision) >= BigInt(final.revision));
  await until(
    `the watch to catch up with the list at revision ${final.revision}`,
    30_000,
    async () => (JSON.stringify([...built()].sort()) === want || reached() ? true : undefined),
    () => `${events.length} events, the last ${events.slice(-2).map(({ ev }) => `${ev.type} ${'revision' in ev ? ev.revision : ''}`).join(', ')}`,
  );
  stream.close();
  await consuming;
  t.equal(consumerError, undefined, 'the watch never failed');

  const firstAfter = events.find((e) => e.at > killedAt && e.endpoint !== x.grpcAddr);
  t.ok(firstAfter !== undefined, `resumed on ${firstAfter?.endpoint ?? 'nothing'}`);
  t.not(stream.endpoint, x.grpcAddr, 'served by another node now');
  t.comment(
    `WATCH FAILOVER kill -9 of the serving node (the leader: the election is included) -> first event from another node: ${Math.round((firstAfter?.at ?? killedAt) - killedAt)} ms; ${stream.stats.streams} streams, lost by ${JSON.stringify(stream.stats.lostBy)}, ${stream.stats.duplicatesDropped} repeats dropped; ${ops} operations, ${acks.length} acknowledged writes, ${unknown.length} with an unknown outcome`,
  );

  // The live events after the tail: strictly increasing revisions (no duplicate, commit order).
  const tailAt = events.findIndex((e) => e.ev.type === 'tail');
  const live = events.slice(tailAt + 1).map((e) => e.ev).filter((e) => e.type === 'change' || e.type === 'delete');
  const revisions = live.map((e) => BigInt(e.revision));
  const increasing = revisions.every((r, i) => i === 0 || r > (revisions[i - 1] as bigint));
  t.ok(increasing, 'live revisions strictly increase: nothing repeated, nothing out of order');
  t.equal(stream.stats.resets, 0, 'no reset: the resume point was within the window');
  t.notOk(events.some((e) => e.ev.type === 'reset'), 'no reset event');

  // Every acknowledged write appears exactly once, at its revision.
  const changeAt = new Map<string, string>();
  for (const e of live) if (e.type === 'change') changeAt.set(e.revision, e.resource.id.name);
  const missing = acks.filter((a) => changeAt.get(a.revision) !== a.name);
  t.same(missing, [], `every one of the ${acks.length} acknowledged writes was seen at its revision`);
  const counts = new Map<string, number>();
  for (const r of revisions) counts.set(String(r), (counts.get(String(r)) ?? 0) + 1);
  t.same([...counts].filter(([, n]) => n > 1), [], 'no revision delivered twice');

  // The state the events build equals the final list.
  t.same(
    [...built()].sort(),
    final.resources.map((r) => [r.id.name, r.version]).sort(),
    'applying the events gives exactly the final linearizable list',
  );
});
