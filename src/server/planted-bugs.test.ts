import t from 'tap';
import type { LogIndex } from '../base/index.js';
import type { LoadedLog, LogStore } from '../replica/index.js';
import type { ChangeRecord } from '../store/index.js';
import { AckBeforeFsyncLogStore, parsePlantedBugs, skipNthChange } from './planted-bugs.js';

t.test('parsePlantedBugs splits the Raft core bugs from the agent ones and refuses unknown names', async (t) => {
  const b = parsePlantedBugs(['double-vote', 'stale-follower-read', 'ack-before-fsync', 'watch-skip-event']);
  t.same(b, { raft: { doubleVote: true }, staleFollowerRead: true, ackBeforeFsync: true, watchSkipEvent: true });
  t.same(parsePlantedBugs([]), { raft: {}, staleFollowerRead: false, ackBeforeFsync: false, watchSkipEvent: false });
  t.throws(() => parsePlantedBugs(['nope']), { code: 'INVALID_ARGUMENT', message: /unknown planted bug "nope"; known: double-vote, .*watch-skip-event/ });
});

t.test('skipNthChange drops exactly the nth record, once, across entries', async (t) => {
  const rec = (n: number): ChangeRecord<number> => ({ kind: 'upsert', revision: n as never, resource: n });
  const skip = skipNthChange<number>(3);
  t.same(skip([rec(1), rec(2)]).map((r) => r.resource), [1, 2]);
  t.same(skip([rec(3), rec(4)]).map((r) => r.resource), [4]);
  t.same(skip([rec(5)]).map((r) => r.resource), [5]);
});

t.test('AckBeforeFsyncLogStore acknowledges before writing, and a clean close writes what it holds', async (t) => {
  const written: number[] = [];
  const inner: LogStore = {
    load: async () => ({}) as LoadedLog,
    append: async (b) => {
      written.push(b.entries.length);
    },
    compact: async (i: LogIndex) => {
      written.push(-(i as number));
    },
    close: async () => undefined,
  };
  const s = new AckBeforeFsyncLogStore(inner, 60_000);
  await s.append({ entries: [], hardState: undefined, sync: true });
  await s.append({ entries: [{ index: 1 as LogIndex, term: 1 as never, data: new Uint8Array() }], hardState: undefined, sync: true });
  t.same(written, [], 'acknowledged, nothing written yet');
  const compacted = s.compact(1 as LogIndex);
  await s.close();
  await compacted;
  t.same(written, [0, 1, -1], 'written in order on close');
});
