import t from 'tap';
import { EntryType, Fsm, logIndex, NOOP_ENTRY_DATA, term, type Entry } from './raft.js';
import { commandRequestId, encodeRegisterWrite, fsmSnapshotBytes, readRegister, registerWriteHooks, resultDigest, writeVerdict, type Stamp } from './resources.js';

let n = 0;
function stamp(): Stamp {
  n++;
  return { time: `2026-01-01T00:00:${String(n % 60).padStart(2, '0')}.000Z`, uid: `uid-${n}`, generation: `gen-${n}` };
}

function entry(index: number, data: Uint8Array): Entry {
  return { index: logIndex(index), term: term(1), data };
}

function put(index: number, key: string, value: string, expectedVersion?: number): Entry {
  return entry(index, encodeRegisterWrite({ requestId: `r${index}`, key, value, ...(expectedVersion !== undefined ? { expectedVersion } : {}) }, stamp()));
}

t.test('a register write is a ResourcePut (unconditional) or ResourceWrite (CAS) envelope carrying the request id', async (t) => {
  const data = encodeRegisterWrite({ requestId: 'c1.7', key: 'k3', value: '1-7' }, stamp());
  t.equal(data[0], 0x14, 'ResourcePut');
  t.equal(commandRequestId(data), 'c1.7');
  const cas = encodeRegisterWrite({ requestId: 'c1.8', key: 'k3', value: '1-8', expectedVersion: 3 }, stamp());
  t.equal(cas[0], 0x10, 'ResourceWrite');
  t.equal(commandRequestId(cas), 'c1.8');
  t.equal(commandRequestId(NOOP_ENTRY_DATA), undefined, 'a Raft no-op carries none');
  t.equal(NOOP_ENTRY_DATA[0], EntryType.Noop);
});

t.test('writes, reads and the version CAS through the real FSM', async (t) => {
  const fsm = new Fsm({ writeHooks: registerWriteHooks() });
  t.same(readRegister(fsm.store, 'k0'), { value: null, version: 0 }, 'an absent register is null at version 0');
  t.equal(writeVerdict('r1', fsm.apply(put(1, 'k0', 'a')).result), 'ok');
  t.same(readRegister(fsm.store, 'k0'), { value: 'a', version: 1 }, 'the version is the index of the last change');
  fsm.apply(entry(2, NOOP_ENTRY_DATA));
  t.equal(writeVerdict('r3', fsm.apply(put(3, 'k0', 'b', 1)).result), 'ok', 'CAS on the version read applies');
  t.equal(writeVerdict('r4', fsm.apply(put(4, 'k0', 'c', 1)).result), 'cas-failed', 'a stale version is refused');
  t.same(readRegister(fsm.store, 'k0'), { value: 'b', version: 3 }, 'and changes nothing');
  t.equal(writeVerdict('r5', fsm.apply(put(5, 'k1', 'x', 0)).result), 'ok', 'version 0 creates an absent register');
  t.equal(writeVerdict('r6', fsm.apply(put(6, 'k1', 'y', 0)).result), 'cas-failed', 'version 0 on an existing one is refused');
  t.equal(writeVerdict('r7', fsm.apply(put(7, 'k1', 'z')).result), 'ok', 'an unconditional write always applies');
  t.same(readRegister(fsm.store, 'k1'), { value: 'z', version: 7 });
  t.same(fsm.store.get({ group: 'demo', kind: 'Artist', tenancy: { partition: 'default', namespace: 'default' }, name: 'k1' })?.data, { value: 'z', replaced: 'x' }, 'the mutate hook ran at apply against the stored value');
});

t.test('a refusal other than CAS_FAILED is a simulator bug, not a failed operation', async (t) => {
  const fsm = new Fsm({ writeHooks: registerWriteHooks() });
  const same = { time: '2026-01-01T00:00:00.000Z', uid: 'uid-same', generation: 'g' };
  fsm.apply(entry(1, encodeRegisterWrite({ requestId: 'r1', key: 'k0', value: 'a' }, same)));
  // Creating another resource with a uid already in use is refused with INTERNAL.
  const r = fsm.apply(entry(2, encodeRegisterWrite({ requestId: 'r2', key: 'k1', value: 'b' }, same)));
  t.throws(() => writeVerdict('r2', r.result), /refused with INTERNAL/);
});

t.test('replicas applying the same entries serialize to the same bytes; a restored FSM serializes back to them', async (t) => {
  const entries: Entry[] = [];
  for (let i = 1; i <= 40; i++) entries.push(i % 9 === 0 ? entry(i, NOOP_ENTRY_DATA) : put(i, `k${i % 5}`, `v${i}`));
  const a = new Fsm({ dedupeWindow: 8, writeHooks: registerWriteHooks() });
  const b = new Fsm({ dedupeWindow: 8, writeHooks: registerWriteHooks() });
  const digests: string[] = [];
  for (const e of entries) {
    const ra = a.apply(e).result;
    const rb = b.apply(e).result;
    t.equal(resultDigest(ra), resultDigest(rb));
    digests.push(resultDigest(ra));
  }
  t.equal(new Set(digests).size > 30, true, 'results differ from entry to entry');
  const bytes = fsmSnapshotBytes(a);
  t.same(fsmSnapshotBytes(b), bytes, 'byte-identical');
  const c = new Fsm({ dedupeWindow: 8, writeHooks: registerWriteHooks() });
  c.restore({ index: logIndex(40), term: term(1), config: { members: [] } }, bytes);
  t.same(fsmSnapshotBytes(c), bytes, 'restore round-trips byte for byte');
  for (const k of ['k0', 'k1', 'k2', 'k3', 'k4']) t.same(readRegister(c.store, k), readRegister(a.store, k), `${k} reads the same`);
  // Applying on after the restore keeps the replicas identical, results included.
  const next = put(41, 'k2', 'after');
  t.equal(resultDigest(c.apply(next).result), resultDigest(a.apply(next).result));
  t.same(fsmSnapshotBytes(c), fsmSnapshotBytes(a));
});

t.test('result digests do not depend on key order', async (t) => {
  t.equal(
    resultDigest({ ok: false, error: { code: 'CAS_FAILED', message: 'm', details: { expected: 1, actual: 2 } } }),
    resultDigest({ ok: false, error: { message: 'm', details: { actual: 2, expected: 1 }, code: 'CAS_FAILED' } }),
  );
});

t.test('with a quota stamped (--quota-bytes), a write refused for space is the no-space verdict; without one it is a simulator bug', async (t) => {
  const fsm = new Fsm({ writeHooks: registerWriteHooks() });
  const quota = (s: Stamp): Stamp => ({ ...s, quotaBytes: 700 });
  t.equal(writeVerdict('r1', fsm.apply(entry(1, encodeRegisterWrite({ requestId: 'r1', key: 'k0', value: 'a' }, quota(stamp())))).result, true), 'ok');
  const big = fsm.apply(entry(2, encodeRegisterWrite({ requestId: 'r2', key: 'k1', value: 'b'.repeat(400) }, quota(stamp()))));
  t.equal(writeVerdict('r2', big.result, true), 'no-space', 'refused at apply for space');
  t.throws(() => writeVerdict('r2', big.result), /refused with NO_SPACE/, 'a run without a quota never expects it');
  t.same(fsm.alarms, ['NO_SPACE']);
  t.ok(fsm.store.dataBytes <= 700);
});
