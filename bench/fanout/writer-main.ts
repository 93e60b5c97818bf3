/**
 * The writer process (see writer.ts): one command at a time over IPC, one reply each.
 */
import { CairnClient } from '../../src/client/index.js';
import { monoMs } from './clock.js';
import { dueAtMs, writesDue } from './stats.js';
import { ARTIST } from './watchers.js';
import { artistData, artistName, type RunCommand, type RunReply, type SeedCommand, type SeedReply, type WriterCommand, type WriterReply } from './writer.js';

let client: CairnClient | undefined;
let clientEndpoint = '';
/** Writes made by this process so far: every write's data differs from every earlier one, so none is a no-op. */
let writesMade = 0;

const reply = (r: WriterReply): void => {
  process.send?.(r);
};

const ref = (key: number): { type: string; name: string; tenancy: { namespace: string } } => ({ type: ARTIST, name: artistName(key), tenancy: { namespace: 'default' } });

async function seed(cmd: SeedCommand): Promise<SeedReply> {
  // Each phase has a node of its own: a client for this one.
  if (client === undefined || clientEndpoint !== cmd.endpoint) {
    client?.close();
    client = new CairnClient({ endpoints: [cmd.endpoint], timeoutMs: 30_000 });
    clientEndpoint = cmd.endpoint;
  }
  const c = client;
  const t0 = monoMs();
  let next = 0;
  let revision = 0;
  const worker = async (): Promise<void> => {
    while (next < cmd.keys) {
      const key = next++;
      const r = await c.write(ref(key), { data: artistData(key, 0, cmd.dataBytes) });
      revision = Math.max(revision, Number(r.version));
    }
  };
  await Promise.all(Array.from({ length: cmd.concurrency }, worker));
  return { type: 'seeded', revision, ms: monoMs() - t0 };
}

async function run(cmd: RunCommand): Promise<RunReply> {
  const c = client;
  if (!c) throw new Error('run before seed: the writer has no client');
  const total = writesDue(cmd.durationMs - 1e-9, cmd.ratePerSec);
  const revision: number[] = [];
  const sentMs: number[] = [];
  const ackedMs: number[] = [];
  let sent = 0;
  let failed = 0;
  let firstError: string | undefined;
  let inFlight = 0;
  let maxInFlightSeen = 0;
  let timer: NodeJS.Timeout | undefined;
  await new Promise<void>((resolve) => setTimeout(resolve, Math.max(0, cmd.startAtMs - monoMs())));
  const cpu0 = process.cpuUsage();
  const wall0 = monoMs();
  return new Promise<RunReply>((resolve) => {
    const finishIfDone = (): void => {
      if (sent < total || inFlight > 0) return;
      const cpu = process.cpuUsage(cpu0);
      resolve({ type: 'ran', revision, sentMs, ackedMs, scheduled: total, sent, failed, firstError, cpuMs: (cpu.user + cpu.system) / 1000, wallMs: monoMs() - wall0, maxInFlightSeen });
    };
    const send = (k: number): void => {
      const key = k % cmd.keys;
      const seq = ++writesMade;
      inFlight++;
      maxInFlightSeen = Math.max(maxInFlightSeen, inFlight);
      const t0 = monoMs();
      c.write(ref(key), { data: artistData(key, seq, cmd.dataBytes) }).then(
        (r) => {
          ackedMs.push(monoMs());
          sentMs.push(t0);
          revision.push(Number(r.version));
        },
        (e: unknown) => {
          failed++;
          firstError ??= e instanceof Error ? e.message : String(e);
        },
      ).finally(() => {
        inFlight--;
        tick();
        finishIfDone();
      });
    };
    // Open loop: every write is due at start + k / rate whether or not earlier ones have been
    // answered; only the in-flight bound can hold it back (and then the rate falls short).
    const tick = (): void => {
      if (timer !== undefined) clearTimeout(timer);
      timer = undefined;
      const due = Math.min(total, writesDue(monoMs() - cmd.startAtMs, cmd.ratePerSec));
      while (sent < due && inFlight < cmd.maxInFlight) send(sent++);
      if (sent < total && inFlight < cmd.maxInFlight) timer = setTimeout(tick, Math.max(0, cmd.startAtMs + dueAtMs(sent, cmd.ratePerSec) - monoMs()));
    };
    tick();
  });
}

process.on('message', (m: WriterCommand) => {
  const handle = async (): Promise<void> => {
    switch (m.type) {
      case 'seed':
        reply(await seed(m));
        return;
      case 'run':
        reply(await run(m));
        return;
      case 'exit':
        client?.close();
        process.exit(0);
    }
  };
  handle().catch((e: unknown) => reply({ type: 'error', message: e instanceof Error ? (e.stack ?? e.message) : String(e) }));
});
// The parent went away: nothing left to do.
process.on('disconnect', () => process.exit(0));
