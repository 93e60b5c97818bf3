/**
 * The writer process (see writer.ts): one command at a time over IPC, one reply each.
 */
import { monotonicFactory } from 'ulid';
import { CairnClient } from '../../src/client/index.js';
import { EtcdKv } from '../etcd-client.js';
import { CAIRN_NAMESPACE, CAIRN_TYPE, etcdKey, keyName, makeValue } from '../kv-data.js';
import { monoMs } from './clock.js';
import { dueAtMs, writesDue } from './stats.js';
import { ARTIST } from './watchers.js';
import { artistData, artistName, type RunCommand, type RunReply, type SeedCommand, type SeedReply, type WriterCommand, type WriterReply, type WriteTarget } from './writer.js';

/** One write of key `key` whose value is new (`seq` differs every time); resolves to the revision it made. */
type WriteFn = (key: number, seq: number, dataBytes: number) => Promise<number>;

interface Connection {
  readonly target: WriteTarget;
  readonly write: WriteFn;
  close(): void;
}

let conn: Connection | undefined;
/** Writes made by this process so far: every write's data differs from every earlier one, so none is a no-op. */
let writesMade = 0;

const reply = (r: WriterReply): void => {
  process.send?.(r);
};

function connect(target: WriteTarget): Connection {
  switch (target.system) {
    case 'cairn-artist': {
      const c = new CairnClient({ endpoints: [target.endpoint], timeoutMs: 30_000 });
      const ref = (key: number): { type: string; name: string; tenancy: { namespace: string } } => ({ type: ARTIST, name: artistName(key), tenancy: { namespace: 'default' } });
      return { target, close: () => c.close(), write: async (key, seq, dataBytes) => Number((await c.write(ref(key), { data: artistData(key, seq, dataBytes) })).version) };
    }
    case 'cairn-album': {
      const c = new CairnClient({ endpoints: [target.endpoint], timeoutMs: 30_000 });
      // As the load generator's: the client's default ulid() costs ~46 µs a write.
      const requestId = monotonicFactory();
      const ref = (key: number): { type: string; name: string; tenancy: { namespace: string } } => ({ type: CAIRN_TYPE, name: keyName(key), tenancy: { namespace: CAIRN_NAMESPACE } });
      return {
        target,
        close: () => c.close(),
        write: async (key, seq) => Number((await c.write(ref(key), { data: { title: makeValue(0, seq) } }, { requestId: requestId() })).version),
      };
    }
    case 'etcd': {
      const c = new EtcdKv(target.endpoint, 30_000);
      return { target, close: () => c.close(), write: (key, seq) => c.put(Buffer.from(etcdKey(key)), Buffer.from(makeValue(0, seq))) };
    }
  }
}

async function seed(cmd: SeedCommand): Promise<SeedReply> {
  // Each phase of make bench-watch has a node of its own, each system of make bench its own cluster.
  if (conn === undefined || conn.target.system !== cmd.target.system || conn.target.endpoint !== cmd.target.endpoint) {
    conn?.close();
    conn = connect(cmd.target);
  }
  const c = conn;
  const t0 = monoMs();
  let next = 0;
  let revision = 0;
  const worker = async (): Promise<void> => {
    while (next < cmd.keys) {
      const key = next++;
      revision = Math.max(revision, await c.write(key, ++writesMade, cmd.dataBytes));
    }
  };
  await Promise.all(Array.from({ length: cmd.concurrency }, worker));
  return { type: 'seeded', revision, ms: monoMs() - t0 };
}

async function run(cmd: RunCommand): Promise<RunReply> {
  const c = conn;
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
      c.write(key, seq, cmd.dataBytes).then(
        (rev) => {
          ackedMs.push(monoMs());
          sentMs.push(t0);
          revision.push(rev);
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
        conn?.close();
        process.exit(0);
    }
  };
  handle().catch((e: unknown) => reply({ type: 'error', message: e instanceof Error ? (e.stack ?? e.message) : String(e) }));
});
// The parent went away: nothing left to do.
process.on('disconnect', () => process.exit(0));
