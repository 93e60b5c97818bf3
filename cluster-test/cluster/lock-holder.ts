/**
 * A process that competes for a lock with runWithLock, for `lease-lock.test.ts`: what a user's
 * own controller process does. Arguments: `<endpoints,comma-separated> <lockName> <identity>
 * <leaseDurationMs> <renewDeadlineMs> <retryPeriodMs>`. Prints one JSON line per event on
 * stdout: `{"event":"started"}`, `{"event":"acquired"}` when its work starts (it holds the
 * lock), `{"event":"aborted"}` when the work's signal fires; each with `at` (epoch ms). SIGTERM
 * stops it cleanly (releasing the lock) and exits 0; SIGKILL is the crash the test is about.
 * With CAIRN_TLS_CA_FILE set (the cluster runs TLS), the client trusts that CA; with
 * CAIRN_TOKEN set (the cluster runs with access control, as TLS clusters do), it sends that token.
 */
import { readFileSync } from 'node:fs';
import { CairnClient } from '../../src/client/index.js';
import { runWithLock } from '../../src/controller/index.js';
import { systemClock, systemTimers } from '../../src/platform/index.js';

const [endpoints, lockName, identity, lease, renew, retry] = process.argv.slice(2);
if (endpoints === undefined || lockName === undefined || identity === undefined || lease === undefined || renew === undefined || retry === undefined) {
  process.stderr.write('usage: lock-holder <endpoints> <lockName> <identity> <leaseDurationMs> <renewDeadlineMs> <retryPeriodMs>\n');
  process.exit(2);
}
const say = (event: string, extra: Record<string, unknown> = {}): void => {
  process.stdout.write(`${JSON.stringify({ event, at: Date.now(), identity, ...extra })}\n`);
};
const caFile = process.env['CAIRN_TLS_CA_FILE'];
const token = process.env['CAIRN_TOKEN'];
const client = new CairnClient({ endpoints: endpoints.split(','), timeoutMs: 5000, ...(caFile ? { tls: { ca: readFileSync(caFile) } } : {}), ...(token ? { token } : {}) });
const handle = runWithLock(
  client,
  lockName,
  identity,
  (signal) => {
    say('acquired');
    signal.addEventListener('abort', () => say('aborted'), { once: true });
  },
  {
    leaseDurationMs: Number(lease),
    renewDeadlineMs: Number(renew),
    retryPeriodMs: Number(retry),
    clock: systemClock,
    timers: systemTimers,
    logger: {
      debug: () => {},
      info: (o, m) => say('log', { msg: m, ...o }),
      warn: (o, m) => say('log', { msg: m, ...o }),
      error: (o, m) => say('log', { msg: m, ...o }),
    },
  },
);
say('started');
process.once('SIGTERM', () => {
  void handle.stop().then(() => {
    say('stopped');
    client.close();
    process.exit(0);
  });
});
