/**
 * The simulated replicas run the real FSM and store. A node that installs a snapshot (sent by
 * the leader, or its own from disk at restart) must end with exactly the state the snapshot's
 * taker had, byte for byte, and at the end of a run every node's whole FSM state must be
 * byte-identical. The invariants check this on every run; these tests show it from the event
 * log (the planted driver bugs of planted-bugs.test.ts show the checks can fail).
 */
import t from 'tap';
import { runSimulation } from './simulation.js';

interface StateLine {
  readonly node: string;
  readonly index: number;
  readonly digest: string;
}

/** `<time> <node> <verb> <index>/<term> (<bytes> bytes, state <digest>)` lines of one verb. */
function stateLines(log: string, verb: 'snapshot saved' | 'restore snapshot' | 'recover snapshot'): StateLine[] {
  const re = new RegExp(`^\\s*\\d+ (n\\d+)\\s+${verb} (\\d+)/\\d+ \\(\\d+ bytes, state ([0-9a-f]+:\\d+)\\)$`, 'gm');
  return [...log.matchAll(re)].map((m) => ({ node: m[1] ?? '', index: Number(m[2]), digest: m[3] ?? '' }));
}

t.test('a node that installs a snapshot ends with the byte-identical FSM state its taker had', async (t) => {
  let checked = 0;
  for (let seed = 1; seed <= 10 && checked < 3; seed++) {
    const r = await runSimulation({ seed, faults: 'crashes', log: true });
    t.ok(r.ok, `crashes seed ${seed}: ${r.violation?.message ?? 'ok'}`);
    const log = r.eventLog ?? '';
    const taken = new Map<number, StateLine>();
    for (const c of stateLines(log, 'snapshot saved')) if (!taken.has(c.index)) taken.set(c.index, c);
    const installed = [...stateLines(log, 'restore snapshot'), ...stateLines(log, 'recover snapshot')];
    if (!installed.some((l) => taken.get(l.index)?.node !== l.node)) continue;
    checked++;
    for (const l of installed) {
      const c = taken.get(l.index);
      t.equal(l.digest, c?.digest, `seed ${seed}: ${l.node} installed ${l.index} with the state ${c?.node ?? '(none)'} took there`);
    }
    const final = /final FSM states: (.*)$/m.exec(log)?.[1] ?? '';
    t.equal(final.split('; ').length, 1, `seed ${seed}: every node ends at one index with one state (${final})`);
  }
  t.equal(checked, 3, 'three runs in which a node installed a snapshot another node took');
});
