/**
 * The nemesis's disk stall (faults.ts `disk-stall`, node.ts `stallDisk`): armed, it fires when
 * the next leader issues a log write; no fsync of that node's disk completes until the stall
 * ends (those already running included), and most stalls end in power loss. Shown here from
 * the event log; planted-bugs.test.ts shows it catches the driver bug it is aimed at
 * (`countOwnWriteEarly`).
 */
import t from 'tap';
import { runSimulation } from './simulation.js';

interface Line {
  readonly time: number;
  readonly who: string;
  readonly what: string;
}

function parse(log: string): Line[] {
  const out: Line[] = [];
  for (const m of log.matchAll(/^\s*(\d+) (\S+)\s+(.*)$/gm)) out.push({ time: Number(m[1]), who: m[2] ?? '', what: m[3] ?? '' });
  return out;
}

/** A completed fsync of the node's log or snapshot file. */
const FSYNC = /^(fsync \d+|snapshot saved )/;

t.test('a disk stall holds every fsync of its node until it ends, then ends in power loss or with the held fsyncs', async (t) => {
  let stalls = 0;
  let endedInCrash = 0;
  let endedWithFsyncs = 0;
  for (let seed = 1; seed <= 3; seed++) {
    const r = await runSimulation({ seed, faults: 'slow-disk', log: true });
    t.ok(r.ok, `slow-disk seed ${seed}: ${r.violation?.message ?? 'ok'}`);
    t.ok(r.stats.diskStalls > 0, `slow-disk seed ${seed}: ${r.stats.diskStalls} disk stalls`);
    const lines = parse(r.eventLog ?? '');
    for (let i = 0; i < lines.length; i++) {
      const l = lines[i] as Line;
      const m = /^disk stalled until t=(\d+)ms$/.exec(l.what);
      if (m === null) continue;
      stalls++;
      const until = Number(m[1]);
      // The nemesis says which node it struck, as leader, in the same step.
      const strike = lines.slice(Math.max(0, i - 3), i + 4).find((x) => x.who === 'nem' && x.what.startsWith(`strike: disk stall ${l.who} (leader`));
      t.ok(strike !== undefined, `seed ${seed}: the stall of ${l.who} at t=${l.time} was struck on it as leader`);
      let early: Line | undefined;
      let crashed = false;
      let fsynced = false;
      for (let k = i + 1; k < lines.length; k++) {
        const x = lines[k] as Line;
        if (x.time > until) break;
        if (x.who !== l.who && !(x.who === 'nem' && x.what.startsWith(`strike: crash ${l.who} at the end of its disk stall`))) continue;
        if (x.who === 'nem' || x.what.startsWith('crash ')) {
          crashed = true;
          break;
        }
        if (!FSYNC.test(x.what)) continue;
        if (x.time < until) early = x;
        else fsynced = true;
        if (early !== undefined) break;
      }
      t.equal(early, undefined, `seed ${seed}: no fsync of ${l.who} completes during its stall t=${l.time}..${until}${early !== undefined ? ` (one at t=${early.time}: ${early.what})` : ''}`);
      if (crashed) endedInCrash++;
      else if (fsynced) endedWithFsyncs++;
    }
  }
  t.ok(stalls >= 3, `${stalls} stalls in three runs`);
  t.ok(endedInCrash > 0, `${endedInCrash} stalls ended in power loss`);
  t.ok(endedWithFsyncs > 0, `${endedWithFsyncs} stalls ended with the held fsyncs completing at their end`);
});

t.test('a profile that does not name disk-stall never stalls a disk', async (t) => {
  for (const faults of ['default', 'chaos']) {
    const r = await runSimulation({ seed: 1, faults, log: true });
    t.equal(r.stats.diskStalls, 0, `${faults}: no disk stall counted`);
    t.notMatch(r.eventLog ?? '', /disk stall/, `${faults}: no disk stall in the event log`);
  }
});
