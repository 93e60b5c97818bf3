import t from 'tap';
import type { LogIndex, Term } from '../base/index.js';
import { NOOP_ENTRY_DATA, type Entry } from '../raft/index.js';
import { lowWaterBytes } from '../store/index.js';
import { Fsm, CommandType, encodeEnvelope, type ApplyResult } from './index.js';
import { packBody, unpackBody } from './envelope.js';
import { readSnapshotFrames, writeSnapshotFrames } from './snapshot-format.js';

/**
 * The quota decided in the state machine (docs/security.md "Quotas"): the quota travels in the
 * command (`quotaBytes`), the verdict is NO_SPACE at apply, and the NO_SPACE alarm is
 * replicated state: raised by a refusal or data at the quota, cleared at the low-water mark by
 * any stamped command (deletes included), carried in the snapshot header.
 */

const artist = { group: 'demo', groupVersion: 'v1', kind: 'Artist' };
const tenancy = { partition: 'default', namespace: 'default' };
const KIB = 1024;

let seq = 0;
function header(extra: Record<string, unknown> = {}): Record<string, unknown> {
  seq++;
  return { time: '2026-11-27T07:00:00.000Z', uid: `uid-${seq}`, generation: `gen-${seq}`, ...extra };
}

function write(name: string, bytes: number, quotaBytes?: number): Uint8Array {
  return encodeEnvelope(CommandType.ResourceWrite, { ...header(quotaBytes !== undefined ? { quotaBytes } : {}), id: { type: artist, tenancy, name }, data: { blob: 'x'.repeat(bytes) } });
}

function del(name: string, quotaBytes?: number): Uint8Array {
  return encodeEnvelope(CommandType.ResourceDelete, { ...header(quotaBytes !== undefined ? { quotaBytes } : {}), id: { type: artist, tenancy, name } });
}

class Log {
  index = 0;
  constructor(readonly fsm = new Fsm()) {}
  apply(data: Uint8Array): ApplyResult {
    this.index++;
    return this.fsm.apply({ index: this.index as LogIndex, term: 1 as Term, data } as Entry).result;
  }
}

function code(r: ApplyResult): string {
  return r.ok ? 'ok' : r.error.code;
}

function concat(chunks: Iterable<Uint8Array>): Uint8Array {
  const parts = [...chunks];
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}

t.test('a write stamped with a quota is refused with NO_SPACE once the data would pass it; the alarm rises and clears at the low-water mark', async (t) => {
  const quota = 64 * KIB;
  const log = new Log();
  let n = 0;
  let r: ApplyResult;
  for (;;) {
    r = log.apply(write(`r${n}`, 4 * KIB, quota));
    if (!r.ok) break;
    n++;
    t.same(log.fsm.alarms, [], `no alarm while the data fits (${log.fsm.store.dataBytes} bytes)`);
    if (n > 100) throw new Error('the quota never refused anything');
  }
  t.equal(code(r), 'NO_SPACE');
  if (!r.ok) {
    t.equal(r.error.details['quotaBytes'], quota);
    t.equal(r.error.details['dataBytes'], log.fsm.store.dataBytes);
    t.ok((r.error.details['needed'] as number) > 4 * KIB);
  }
  t.ok(log.fsm.store.dataBytes <= quota, `the data stayed within the quota (${log.fsm.store.dataBytes} of ${quota})`);
  t.same(log.fsm.alarms, ['NO_SPACE'], 'the refusal raised the alarm');
  t.equal(n, log.fsm.store.size, 'the refused write stored nothing');

  const tiny = log.apply(write('tiny', 1, quota));
  t.equal(code(tiny), 'NO_SPACE', 'while the alarm is raised, even a write that would fit is refused');
  t.equal(code(log.apply(write('r0', 4 * KIB - 100, quota))), 'ok', 'a shrinking write works');
  t.same(log.fsm.alarms, ['NO_SPACE'], 'shrinking a little does not clear the alarm (above the low-water mark)');
  t.equal(code(log.apply(NOOP_ENTRY_DATA)), 'ok');
  // Deletes clear it, once the data is at or below 90% of the quota.
  let deleted = 0;
  while (log.fsm.store.dataBytes > lowWaterBytes(quota)) {
    t.same(log.fsm.alarms, ['NO_SPACE'], `still raised at ${log.fsm.store.dataBytes} bytes`);
    const d = log.apply(del(`r${n - 1 - deleted}`, quota));
    t.ok(d.ok && d.kind === 'delete' && d.deleted, 'deletes work under the alarm');
    deleted++;
  }
  t.same(log.fsm.alarms, [], `the delete that brought the data to ${log.fsm.store.dataBytes} (low-water ${lowWaterBytes(quota)}) cleared the alarm`);
  t.equal(code(log.apply(write('again', 1 * KIB, quota))), 'ok', 'growing writes work again');
});

t.test('entries without a quota (written before quotas existed) neither refuse nor touch the alarm', async (t) => {
  const log = new Log();
  t.equal(code(log.apply(write('a', 8 * KIB, 4 * KIB))), 'NO_SPACE');
  t.same(log.fsm.alarms, ['NO_SPACE']);
  t.equal(code(log.apply(write('b', 8 * KIB))), 'ok', 'an unstamped write is not subject to any quota');
  t.same(log.fsm.alarms, ['NO_SPACE'], 'and leaves the alarm as it was');
  t.equal(code(log.apply(del('b'))), 'ok');
  t.same(log.fsm.alarms, ['NO_SPACE'], 'an unstamped delete cannot clear it either');
  t.equal(code(log.apply(del('nothing', 4 * KIB))), 'ok');
  t.same(log.fsm.alarms, [], 'a stamped delete (even of nothing) judges the data against its quota and clears it');
});

t.test('data at or over a (lowered) quota raises the alarm without a refusal; shrinking still works', async (t) => {
  const log = new Log();
  t.equal(code(log.apply(write('a', 16 * KIB, 1024 * KIB))), 'ok');
  t.equal(code(log.apply(write('a', 15 * KIB, 10 * KIB))), 'ok', 'shrinking under a quota below the data works');
  t.same(log.fsm.alarms, ['NO_SPACE'], 'the data is still over that quota: raised');
  t.equal(code(log.apply(write('a', 1 * KIB, 10 * KIB))), 'ok');
  t.same(log.fsm.alarms, [], 'below the low-water mark: cleared');
});

t.test('a malformed quota is refused deterministically as a malformed entry', async (t) => {
  for (const bad of [0, -1, 1.5, '1024', Number.MAX_SAFE_INTEGER + 2]) {
    const log = new Log();
    const r = log.apply(encodeEnvelope(CommandType.ResourceWrite, { ...header({ quotaBytes: bad }), id: { type: artist, tenancy, name: 'a' }, data: {} }));
    t.equal(code(r), 'INTERNAL', `quotaBytes ${JSON.stringify(bad)} is refused`);
    if (!r.ok) t.match(r.error.message, /quotaBytes must be a positive integer/);
    t.equal(log.fsm.store.size, 0, 'and changes nothing');
  }
});

t.test('replicas agree on every verdict and the alarm; the alarm travels in the snapshot header', async (t) => {
  const a = new Log();
  const b = new Log();
  const entries: Uint8Array[] = [];
  for (let i = 0; i < 40; i++) entries.push(i % 7 === 6 ? del(`r${i - 3}`, 40 * KIB) : write(`r${i}`, 2 * KIB + (i % 5) * 512, i % 3 === 0 ? 48 * KIB : 40 * KIB));
  const seen: string[] = [];
  for (const e of entries) {
    const ra = a.apply(e);
    const rb = b.apply(e);
    t.equal(code(ra), code(rb));
    t.same(a.fsm.alarms, b.fsm.alarms);
    seen.push(code(ra));
  }
  t.ok(seen.includes('NO_SPACE') && seen.includes('ok'), `the sequence mixes refusals and writes (${seen.filter((s) => s === 'NO_SPACE').length} refused)`);
  // Force a known alarm state, then round-trip through a snapshot.
  a.apply(write('big', 64 * KIB, 40 * KIB));
  t.same(a.fsm.alarms, ['NO_SPACE']);
  const snap = a.fsm.snapshot();
  const bytes = concat(snap.chunks());
  t.same(readSnapshotFrames(bytes).header.alarms, ['NO_SPACE'], 'in the header');
  const c = new Fsm();
  c.restore({ index: snap.index, term: 1 as Term, config: { members: [] } }, bytes);
  t.same(c.alarms, ['NO_SPACE'], 'restored');
  t.equal(c.store.dataBytes, a.fsm.store.dataBytes, 'the data size is recomputed on restore');

  // A snapshot written before alarms existed (no field) restores with none raised.
  const { header: h, bodies } = readSnapshotFrames(bytes);
  const { alarms: _dropped, ...old } = unpackBody(packBody(h)) as Record<string, unknown>;
  const oldBytes = concat(writeSnapshotFrames(old as never, bodies));
  const d = new Fsm();
  d.restore({ index: snap.index, term: 1 as Term, config: { members: [] } }, oldBytes);
  t.same(d.alarms, [], 'an older snapshot has no alarm');
  t.equal(d.store.size, c.store.size);
});

t.test('a restore entry starts without the alarm; the next stamped command judges the restored data', async (t) => {
  const log = new Log();
  log.apply(write('a', 32 * KIB, 1024 * KIB));
  const frames = concat(log.fsm.snapshot().chunks());
  log.apply(write('b', 8 * KIB, 16 * KIB));
  t.same(log.fsm.alarms, ['NO_SPACE']);
  const r = log.apply(encodeEnvelope(CommandType.Restore, { ...header(), snapshot: frames }));
  t.equal(code(r), 'ok');
  t.same(log.fsm.alarms, []);
  log.apply(del('nothing', 16 * KIB));
  t.same(log.fsm.alarms, ['NO_SPACE'], 'the restored 32 KiB is over the 16 KiB quota');
});
