/**
 * Helpers for the harness's root-only tests (`*.netns-test.ts`: `make cluster-test-selftest`,
 * `make test-jepsen`). Not a test file itself.
 */
import { execFileSync } from 'node:child_process';
import { makeSchedule, type NemesisName, type ScheduledFault } from './schedule.js';

/**
 * Why the netns tests cannot run here, or false. They skip rather than fail under a bare
 * `npx tap`; `make test-jepsen` runs setup.sh first, which fails loudly when root, the tools or
 * network namespaces are missing, so CI never gets here with a reason to skip.
 */
export const netnsSkip: string | false =
  process.getuid?.() !== 0
    ? 'needs root'
    : (['nft', 'tc', 'ip']
        .filter((c) => {
          try {
            execFileSync('sh', ['-c', `command -v ${c}`], { stdio: 'ignore' });
            return false;
          } catch {
            return true;
          }
        })
        .map((c) => `needs ${c} (bash cluster-test/jepsen/setup.sh)`)[0] ?? false);

/**
 * The first seed from `from` whose schedule (3 nodes, `nemeses`, `timeS`) satisfies `want`: a
 * test forces the faults it needs while its run stays replayable from the command line with
 * that seed. Throws if none of 1,000 seeds does (the schedule's draws changed: fix the test).
 */
export function seedWhere(o: { readonly nemeses: readonly NemesisName[]; readonly timeS: number; readonly from?: number }, what: string, want: (s: readonly ScheduledFault[]) => boolean): number {
  const from = o.from ?? 1;
  for (let seed = from; seed < from + 1000; seed++) {
    if (want(makeSchedule({ seed, nodes: 3, nemeses: o.nemeses, timeMs: o.timeS * 1000 }))) return seed;
  }
  throw new Error(`no seed in ${from}..${from + 999} gives a schedule with ${what}`);
}
