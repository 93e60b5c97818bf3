import t from 'tap';
import { CairnError, ErrorCode, type LogIndex, type Term } from '../base/index.js';
import type { Entry } from '../raft/index.js';
import type { JsonValue, Resource } from '../store/index.js';
import { Fsm, CommandType, MissingWriteHooksError, encodeEnvelope, type ApplyResult, type PutInput, type PreparedPut, type WriteHooks } from './index.js';

/**
 * Unconditional writes (envelope 0x14, docs/api.md "Unconditional writes"): the state machine
 * runs the type's hooks against the resource as stored at the entry's log position, so writers
 * of one key are ordered by the log and none is refused for contention. Driven through whole
 * log entries (validation, the fsm, the store).
 */

const TOPIC = { group: 'test', groupVersion: 'v1', kind: 'Topic' };
const ARTIST = { group: 'demo', groupVersion: 'v1', kind: 'Artist' };
const tenancy = { partition: 'default', namespace: 'default' };

/**
 * Hooks standing in for a registry (the fsm does not import the api): `test.v1.Topic` fills
 * `replicas: 1` and refuses shrinking `partitions` against the current resource (an immutable-field
 * rule, like the streaming domain's Topic), and `partitions` must be a positive integer (the
 * "schema"). Counts its calls.
 */
class TopicHooks implements WriteHooks {
  calls = 0;
  prepare(input: PutInput, current: Resource | undefined): PreparedPut | undefined {
    this.calls++;
    if (input.type.group !== TOPIC.group || input.type.kind !== TOPIC.kind) return undefined;
    const data = input.data as Record<string, JsonValue>;
    if (data['replicas'] === undefined) data['replicas'] = 1;
    const partitions = data['partitions'];
    if (typeof partitions !== 'number' || !Number.isInteger(partitions) || partitions < 1) {
      return { ok: false, error: new CairnError(ErrorCode.INVALID_ARGUMENT, 'data does not match the schema of test.v1.Topic: /partitions must be a positive integer') };
    }
    const before = (current?.data as Record<string, JsonValue> | undefined)?.['partitions'];
    if (typeof before === 'number' && partitions < before) {
      return { ok: false, error: new CairnError(ErrorCode.INVALID_ARGUMENT, `data refused by test.v1.Topic: partitions cannot shrink (from ${before} to ${partitions})`) };
    }
    return { ok: true, data, metadata: { ...(input.metadata ?? current?.metadata ?? {}) } };
  }
}

let seq = 0;
function header(extra: Record<string, unknown> = {}): Record<string, unknown> {
  seq++;
  return { time: `2026-11-27T10:00:${String(seq % 60).padStart(2, '0')}.000Z`, uid: `uid-${seq}`, generation: `gen-${seq}`, ...extra };
}

function entry(index: number, data: Uint8Array): Entry {
  return { index: index as LogIndex, term: 1 as Term, data };
}

function put(name: string, data: Record<string, JsonValue>, extra: Record<string, unknown> = {}): Uint8Array {
  return encodeEnvelope(CommandType.ResourcePut, { ...header(extra), id: { type: TOPIC, tenancy, name }, data });
}

function cas(name: string, data: Record<string, JsonValue>, expectedVersion: number): Uint8Array {
  return encodeEnvelope(CommandType.ResourceWrite, { ...header(), id: { type: TOPIC, tenancy, name }, data, expectedVersion });
}

function written(r: ApplyResult): Extract<ApplyResult, { kind: 'write' }> {
  if (!r.ok || r.kind !== 'write') throw new Error(`expected a write result, got ${JSON.stringify(r)}`);
  return r;
}

const key = { group: TOPIC.group, kind: TOPIC.kind, tenancy, name: 'hot' };

t.test('64 unconditional writes of one key, all proposed against the same state, all apply: distinct increasing versions, none CAS_FAILED', async (t) => {
  const fsm = new Fsm({ writeHooks: new TopicHooks() });
  fsm.apply(entry(1, put('hot', { partitions: 1 })));
  // 64 writers that all saw version 1: as read-then-CAS writes, 63 would be refused.
  const casVerdicts = new Fsm({ writeHooks: new TopicHooks() });
  casVerdicts.apply(entry(1, put('hot', { partitions: 1 })));
  let casFailed = 0;
  for (let i = 0; i < 64; i++) {
    const r = casVerdicts.apply(entry(2 + i, cas('hot', { partitions: 2 + i }, 1))).result;
    if (!r.ok && r.error.code === 'CAS_FAILED') casFailed++;
  }
  t.equal(casFailed, 63, 'the read-then-CAS shape refuses all but one (what the api answered after its retries ran out)');
  const versions: number[] = [];
  for (let i = 0; i < 64; i++) {
    const r = fsm.apply(entry(2 + i, put('hot', { partitions: 2 + i }))).result;
    t.not(!r.ok && r.error.code, 'CAS_FAILED');
    const w = written(r);
    t.ok(w.changed);
    versions.push(w.resource.version as number);
  }
  t.same(versions, Array.from({ length: 64 }, (_, i) => 2 + i), 'each write got its own entry index as version, increasing');
  t.same(fsm.store.get(key)?.data, { partitions: 65, replicas: 1 }, 'the last in log order wins, with the mutate hook applied');
});

t.test('the hooks judge the state at the log position: a refusal is their error, not CAS_FAILED, and changes nothing', async (t) => {
  const fsm = new Fsm({ writeHooks: new TopicHooks() });
  written(fsm.apply(entry(1, put('hot', { partitions: 3 }))).result);
  const before = JSON.stringify(fsm.store.get(key));
  // Proposed by someone who saw partitions 3 or less... but applied after a write of 5.
  written(fsm.apply(entry(2, put('hot', { partitions: 5 }))).result);
  const shrink = fsm.apply(entry(3, put('hot', { partitions: 4 })));
  t.match(shrink.result, { ok: false, error: { code: 'INVALID_ARGUMENT', message: 'data refused by test.v1.Topic: partitions cannot shrink (from 5 to 4)' } });
  t.same(shrink.changes, []);
  const bad = fsm.apply(entry(4, put('hot', { partitions: 0 })));
  t.match(bad.result, { ok: false, error: { code: 'INVALID_ARGUMENT', message: /does not match the schema of test\.v1\.Topic/ } });
  t.equal(fsm.store.get(key)?.version, 2, 'no new version for refused writes');
  t.not(JSON.stringify(fsm.store.get(key)), before);
});

t.test('create if absent, update otherwise; an unchanged write keeps its version; metadata absent keeps the stored', async (t) => {
  const fsm = new Fsm({ writeHooks: new TopicHooks() });
  const created = written(fsm.apply(entry(7, put('hot', { partitions: 1 }, { uid: 'uid-created', metadata: { team: 'a' } }))).result);
  t.equal(created.resource.id.uid, 'uid-created', 'the uid comes from the command on create');
  t.equal(created.resource.version, 7);
  const same = written(fsm.apply(entry(8, put('hot', { partitions: 1 }))).result);
  t.equal(same.changed, false, 'writing the same object (after defaults) changes nothing');
  t.equal(same.resource.version, 7);
  t.same(same.resource.metadata, { team: 'a' }, 'metadata left out keeps the stored metadata');
  const updated = written(fsm.apply(entry(9, put('hot', { partitions: 2 }, { uid: 'uid-other' }))).result);
  t.equal(updated.resource.id.uid, 'uid-created', 'an update keeps the uid');
  t.equal(updated.resource.version, 9);
  t.not(updated.resource.generation, created.resource.generation, 'a data change is a new generation');
  const cleared = written(fsm.apply(entry(10, put('hot', { partitions: 2 }, { metadata: {} }))).result);
  t.same(cleared.resource.metadata, {}, 'metadata given replaces');
});

t.test("the store's rules hold for unconditional writes: uid precondition, owner fixed, status only passed back, idempotency", async (t) => {
  const fsm = new Fsm({ writeHooks: new TopicHooks() });
  const first = written(fsm.apply(entry(1, put('hot', { partitions: 1 }, { requestId: 'req-1' }))).result);
  const uidWrong = fsm.apply(entry(2, encodeEnvelope(CommandType.ResourcePut, { ...header(), id: { type: TOPIC, tenancy, name: 'hot', uid: 'not-it' }, data: { partitions: 2 } })));
  t.match(uidWrong.result, { ok: false, error: { code: 'UID_MISMATCH' } });
  const owner = { type: TOPIC, tenancy, name: 'other', uid: 'u-x' };
  t.match(fsm.apply(entry(3, put('hot', { partitions: 2 }, { owner }))).result, { ok: false, error: { code: 'INVALID_ARGUMENT', message: /owner is set at creation/ } });
  const status = { c: { observedGeneration: 'g', conditions: [], updatedAt: '2026-11-27T10:00:00.000Z' } };
  t.match(fsm.apply(entry(4, put('hot', { partitions: 2 }, { status }))).result, { ok: false, error: { code: 'INVALID_ARGUMENT' } });
  const again = fsm.apply(entry(5, put('hot', { partitions: 9 }, { requestId: 'req-1' })));
  t.same(again.result, first, 'a repeated request id answers the first result');
  t.same(again.changes, []);
  t.equal(fsm.store.get(key)?.version, 1, 'nothing above changed the resource');
});

t.test('a put carrying an expectedVersion is malformed: refused the same way everywhere, the store untouched', async (t) => {
  const malformed: string[] = [];
  const fsm = new Fsm({ writeHooks: new TopicHooks(), onMalformedEntry: (_type, _i, m) => malformed.push(m) });
  const r = fsm.apply(entry(1, put('hot', { partitions: 1 }, { expectedVersion: 0 })));
  t.match(r.result, { ok: false, error: { code: 'INTERNAL' } });
  t.match(malformed, [/carries no expectedVersion/]);
  t.equal(fsm.store.size, 0);
});

t.test('a node without the hooks, or without the type, stops instead of applying an unconditional write without them', async (t) => {
  t.throws(() => new Fsm().apply(entry(1, put('hot', { partitions: 1 }))), MissingWriteHooksError);
  const fsm = new Fsm({ writeHooks: new TopicHooks() });
  const artist = encodeEnvelope(CommandType.ResourcePut, { ...header(), id: { type: ARTIST, tenancy, name: 'a' }, data: { name: 'A' } });
  t.throws(() => fsm.apply(entry(1, artist)), /unconditional write of demo\.v1\.Artist, whose hooks this node does not have/);
  t.equal(fsm.store.size, 0);
});

t.test('a 0x10 write entry (every entry already in a log) applies as before: no hooks, the version CAS it carries', async (t) => {
  const hooks = new TopicHooks();
  const fsm = new Fsm({ writeHooks: hooks });
  const w = written(fsm.apply(entry(1, encodeEnvelope(CommandType.ResourceWrite, { ...header(), id: { type: TOPIC, tenancy, name: 'hot' }, data: { partitions: 0 } }))).result);
  t.same(w.resource.data, { partitions: 0 }, 'stored as given: 0x10 was checked before proposing');
  t.equal(hooks.calls, 0, 'no hook ran');
  t.match(fsm.apply(entry(2, cas('hot', { partitions: 1 }, 7))).result, { ok: false, error: { code: 'CAS_FAILED' } });
});

t.test('determinism: the same log applied on two replicas gives identical results, state and snapshots', async (t) => {
  const log: Uint8Array[] = [];
  for (let i = 0; i < 40; i++) {
    const name = `t${i % 3}`;
    // Growing, shrinking (refused at some positions only), malformed, CAS and deletes, interleaved.
    if (i % 7 === 6) log.push(encodeEnvelope(CommandType.ResourceDelete, { ...header(), id: { type: TOPIC, tenancy, name } }));
    else if (i % 5 === 4) log.push(cas(name, { partitions: i, replicas: 1 }, i - 1));
    else log.push(put(name, { partitions: i % 4 === 3 ? 0 : (i * 7) % 11 + 1 }, i % 2 === 0 ? { metadata: { i: String(i) } } : {}));
  }
  const replicas = [new Fsm({ writeHooks: new TopicHooks() }), new Fsm({ writeHooks: new TopicHooks() })];
  const results = replicas.map((fsm) => log.map((data, i) => JSON.stringify(fsm.apply(entry(i + 1, data)))));
  t.same(results[0], results[1], 'every verdict is the same');
  const verdicts = new Set((results[0] ?? []).map((r) => (JSON.parse(r) as { result: { ok: boolean; error?: { code: string } } }).result).map((r) => (r.ok ? 'ok' : r.error?.code)));
  t.ok(verdicts.has('ok') && verdicts.has('INVALID_ARGUMENT') && verdicts.has('CAS_FAILED'), `the log exercises applied and refused writes (${[...verdicts].join(', ')})`);
  const snap = (fsm: Fsm): string => Buffer.concat([...fsm.snapshot().chunks()]).toString('base64');
  t.equal(snap(replicas[0] as Fsm), snap(replicas[1] as Fsm), 'identical snapshots');
  // A replica that restarts from a snapshot taken halfway and applies the rest again ends the same.
  const half = new Fsm({ writeHooks: new TopicHooks() });
  log.slice(0, 20).forEach((data, i) => half.apply(entry(i + 1, data)));
  const restarted = new Fsm({ writeHooks: new TopicHooks() });
  restarted.restore({ index: 20 as LogIndex, term: 1 as Term, config: { voters: [], learners: [] } } as unknown as Parameters<Fsm['restore']>[0], Buffer.concat([...half.snapshot().chunks()]));
  const rest = log.slice(20).map((data, i) => JSON.stringify(restarted.apply(entry(i + 21, data))));
  t.same(rest, (results[0] ?? []).slice(20), 'the same verdicts after a restore');
  t.equal(snap(restarted), snap(replicas[0] as Fsm), 'and the same state');
});

t.test('the determinism check can fail: a hook that depends on something outside (proposed, current) makes replicas differ', async (t) => {
  // A planted bug: a mutate hook that counts its calls, so a replica that applied one more
  // unconditional write before (here: a replica that took part in an earlier run) stores another value.
  class CountingHooks extends TopicHooks {
    override prepare(input: PutInput, current: Resource | undefined): PreparedPut | undefined {
      const r = super.prepare(input, current);
      return r?.ok === true ? { ...r, data: { ...(r.data as Record<string, JsonValue>), seen: this.calls } } : r;
    }
  }
  const warm = new CountingHooks();
  warm.calls = 1;
  const replicas = [new Fsm({ writeHooks: new CountingHooks() }), new Fsm({ writeHooks: warm })];
  const log = [put('a', { partitions: 1 }), put('a', { partitions: 2 })];
  for (const fsm of replicas) log.forEach((data, i) => fsm.apply(entry(i + 1, data)));
  const snap = (fsm: Fsm): string => Buffer.concat([...fsm.snapshot().chunks()]).toString('base64');
  t.not(snap(replicas[0] as Fsm), snap(replicas[1] as Fsm), 'the snapshots differ, so the comparison above would catch it');
});
