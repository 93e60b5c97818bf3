/**
 * durable-node: one single-voter Cairn node on a real disk, driven by the crash-recovery test
 * (crash-recovery.test.ts), which runs it as a child process and SIGKILLs it.
 *
 *   node dist/cluster-test/crash/durable-node.js write  --data-dir DIR --round R [--concurrency 8] [--max-ms 60000]
 *                                                   [--log-store wal|level] [--wal-segment-bytes N]
 *   node dist/cluster-test/crash/durable-node.js verify --data-dir DIR [--wal-segment-bytes N]
 *
 * The node is assembled as the agent assembles it: the data dir lock and node id
 * (openDataDir), the log store (openLogStore: the one the data dir has, else --log-store,
 * default wal as for the agent), the snapshot file store, the FSM and the replica
 * driver (proposals go to Replica.propose directly: see runWrite for why, and the Coordinator
 * adds nothing on a one-voter leader). Node id n1; a fresh data dir is bootstrapped as a one-voter
 * cluster. Snapshots are taken every 300 entries (50 retained behind them) so that crashes
 * land before, during and after snapshots.
 *
 * Standard output is the protocol with the test. Every line is written with a synchronous
 * write to fd 1, so a line is in the pipe before the next await: a SIGKILL can never lose a
 * line that was printed, nor leave half of one.
 *
 *   write:   `ready {json}` once the node leads, then `ack <name> <version>` for each
 *            ResourceWrite (demo.v1.Artist, name w<round>-<seq>, data {name, n: seq}) after its
 *            proposal resolved OK, i.e. after it was committed (fsynced) and applied. A
 *            proposal that fails prints `fail <name> <code> <message>` and the node exits 4.
 *            Runs until killed (or until --max-ms, a guard against orphans: then `done`, exit 0).
 *   verify:  opens the node, waits until the entries committed on disk are replayed, then
 *            until it leads and has committed an entry of its new term (a read index), so
 *            that entries persisted but not yet known committed before the crash are
 *            committed too; prints one JSON line (see VerifyReport) and exits 0. Verify takes
 *            no snapshots, so it leaves the snapshot files as it found them.
 *   Either mode, on a start-up error: `error <code> <message>` and exit 3.
 *
 * `--planted-bug ack-before-write` (write mode; for proving the test, never otherwise): the log
 * store reports each append done at once and writes it up to 50 ms later, like a write-back
 * cache that lies about durability. A SIGKILL then loses acknowledged writes, and the test
 * must notice.
 *
 * Diagnostics (pino JSON, one event per line) go to standard error.
 */
import { writeSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { monotonicFactory } from 'ulid';
import { CairnError, ErrorCode, SeededRandom, nodeId, type LogIndex, type Logger } from '../../src/base/index.js';
import { Fsm, CommandType, encodeEnvelope, type ApplyResult, type WriteCommand } from '../../src/fsm/index.js';
import { createLogger, FileSnapshotStore, LevelLogStore, openDataDir, openLogStore, systemClock, systemTimers, type DataDir, type LogStoreKind } from '../../src/platform/index.js';
import { makeConfig } from '../../src/raft/index.js';
import { Replica, type LogStore, type Transport } from '../../src/replica/index.js';
import type { Resource } from '../../src/store/index.js';

const NODE_ID = 'n1';
const TICK_MS = 20;
const SNAPSHOT_EVERY_ENTRIES = 300;
const SNAPSHOT_RETAIN_ENTRIES = 50;
const EXIT_STARTUP_ERROR = 3;
const EXIT_PROPOSAL_FAILED = 4;
// ulid's monotonic factory (~1 µs a call; the plain ulid() draws crypto randomness per character, ~46 µs).
const ulid = monotonicFactory();
const ARTIST = { group: 'demo', groupVersion: 'v1', kind: 'Artist' } as const;
const TENANCY = { partition: 'default', namespace: 'default' } as const;

/** The one line `verify` prints. */
export interface VerifyReport {
  readonly resources: readonly { readonly name: string; readonly version: number; readonly data: unknown }[];
  /** The store revision (the last applied index). */
  readonly revision: number;
  readonly status: {
    readonly term: number;
    readonly commit: number;
    readonly applied: number;
    readonly firstIndex: number;
    readonly lastIndex: number;
    readonly snapshotIndex: number;
  };
  readonly startup: {
    /** The snapshot the node restored (0: none). */
    readonly loadedSnapshotIndex: number;
    /** The commit index found on disk. */
    readonly diskCommit: number;
    /**
     * From the Replica.open call (snapshot load and restore, log load) until every entry
     * committed on disk was applied, observed on every turn of the event loop; ms, one
     * decimal. Replica.open resolves only once the replay is done, so the two are one span.
     */
    readonly openAndReplayMs: number;
    /** From then until the node led and its read index was applied. */
    readonly leadMs: number;
  };
  /** The log store the data dir has. */
  readonly logStore: LogStoreKind;
  /** What LevelDB reported dropping from its write-ahead log while opening (nothing for wal). */
  readonly recovery: { readonly droppedBytes: number; readonly messages: readonly string[] };
  /** Every warn and error event logged during start-up, as `message {fields}`. */
  readonly warnings: readonly string[];
}

class UsageError extends Error {}

const pause = new Int32Array(new SharedArrayBuffer(4));

/**
 * Writes one line to fd 1 before returning. The pipe the test reads may be non-blocking
 * (libuv creates it so): when it is full, wait a millisecond, synchronously, and retry.
 */
function out(line: string): void {
  const bytes = Buffer.from(`${line}\n`, 'utf8');
  let done = 0;
  while (done < bytes.length) {
    try {
      done += writeSync(1, bytes, done, bytes.length - done);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EAGAIN') throw e;
      Atomics.wait(pause, 0, 0, 1);
    }
  }
}

function parseArgs(argv: readonly string[]): { mode: 'write' | 'verify'; flags: Map<string, string> } {
  const [mode, ...rest] = argv;
  if (mode !== 'write' && mode !== 'verify') throw new UsageError(`the first argument must be write or verify, got ${JSON.stringify(mode)}`);
  const flags = new Map<string, string>();
  for (let i = 0; i < rest.length; i += 2) {
    const k = rest[i];
    const v = rest[i + 1];
    if (k === undefined || !k.startsWith('--') || v === undefined) throw new UsageError(`expected --flag value pairs, got ${JSON.stringify(rest.slice(i))}`);
    flags.set(k.slice(2), v);
  }
  if (!flags.has('data-dir')) throw new UsageError('--data-dir is required');
  return { mode, flags };
}

function intFlag(flags: Map<string, string>, name: string, fallback: number): number {
  const raw = flags.get(name);
  if (raw === undefined) return fallback;
  const n = Number(raw);
  if (!Number.isSafeInteger(n) || n < 0) throw new UsageError(`--${name} must be a non-negative integer, got ${JSON.stringify(raw)}`);
  return n;
}

/** Forwards to pino and keeps every warn and error event for the verify report. */
function recordingLogger(base: Logger, warnings: string[]): Logger {
  const keep = (obj: object, msg: string): void => {
    warnings.push(`${msg} ${JSON.stringify(obj)}`);
  };
  return {
    debug: (obj, msg) => base.debug(obj, msg),
    info: (obj, msg) => base.info(obj, msg),
    warn: (obj, msg) => {
      keep(obj, msg);
      base.warn(obj, msg);
    },
    error: (obj, msg) => {
      keep(obj, msg);
      base.error(obj, msg);
    },
  };
}

/** A one-voter cluster has no peers: nothing to send, nothing arrives. */
const noPeers: Transport = {
  send: () => {},
  onMessage: () => {},
  close: async () => {},
};

/** PLANTED BUG (see the header): appends and compactions are acknowledged, then done later, in order. */
class AckBeforeWriteLogStore implements LogStore {
  private queue: (() => Promise<void>)[] = [];
  private flushing: Promise<void> = Promise.resolve();
  private readonly timer: ReturnType<typeof setInterval>;

  constructor(
    private readonly inner: LogStore,
    delayMs: number,
  ) {
    this.timer = setInterval(() => {
      this.flushing = this.flushing.then(() => this.flush());
    }, delayMs);
  }

  private async flush(): Promise<void> {
    const ops = this.queue;
    this.queue = [];
    for (const op of ops) await op();
  }

  load(afterIndex: LogIndex): ReturnType<LogStore['load']> {
    return this.inner.load(afterIndex);
  }

  append(batch: Parameters<LogStore['append']>[0]): Promise<void> {
    this.queue.push(() => this.inner.append(batch));
    return Promise.resolve();
  }

  compact(index: LogIndex): Promise<void> {
    this.queue.push(() => this.inner.compact(index));
    return Promise.resolve();
  }

  async close(): Promise<void> {
    clearInterval(this.timer);
    await this.flushing;
    await this.flush();
    await this.inner.close();
  }
}

interface Node {
  readonly dataDir: DataDir;
  readonly replica: Replica<ApplyResult, Resource>;
  readonly fsm: Fsm;
  readonly logStore: LogStore;
  readonly logStoreKind: LogStoreKind;
  /** performance.now() when Replica.open was called. */
  readonly openStarted: number;
  /** Until Replica.open resolved (snapshot, log load and the replay of the committed log). */
  readonly openMs: number;
}

interface StoreChoice {
  /** For a data dir without a log yet. */
  readonly kind: LogStoreKind;
  readonly walSegmentBytes: number | undefined;
}

async function openNode(dir: string, logger: Logger, snapshots: boolean, store: StoreChoice, plantedBug = false): Promise<Node> {
  const id = nodeId(NODE_ID);
  const dataDir = await openDataDir({ path: dir, nodeId: id, logger });
  try {
    const opened = await openLogStore({ dataDir: dataDir.path, kind: store.kind, logger, ...(store.walSegmentBytes !== undefined ? { walSegmentBytes: store.walSegmentBytes } : {}) });
    const logStore = opened.store;
    const snapshotStore = await FileSnapshotStore.open({ dataDir: dataDir.path, logger });
    const fsm = new Fsm();
    const started = performance.now();
    const replica = await Replica.open<ApplyResult, Resource>({
      id,
      random: new SeededRandom(process.pid),
      clock: systemClock,
      timers: systemTimers,
      logStore: plantedBug ? new AckBeforeWriteLogStore(logStore, 50) : logStore,
      snapshotStore,
      transport: noPeers,
      stateMachine: fsm,
      logger,
      tickMs: TICK_MS,
      // verify must leave the snapshot files as it found them (the test corrupts them).
      snapshotEveryEntries: snapshots ? SNAPSHOT_EVERY_ENTRIES : Number.MAX_SAFE_INTEGER,
      snapshotRetainEntries: SNAPSHOT_RETAIN_ENTRIES,
      // Every 300 entries exactly, as the crash points were chosen for: no byte trigger.
      snapshotLogRatio: 0,
      bootstrap: makeConfig([{ id, suffrage: 'voter', address: '127.0.0.1:7500' }]),
    }).catch(async (e: unknown) => {
      await logStore.close().catch(() => undefined);
      throw e;
    });
    const openMs = performance.now() - started;
    return { dataDir, replica, fsm, logStore, logStoreKind: opened.kind, openStarted: started, openMs };
  } catch (e) {
    await dataDir.close().catch(() => undefined);
    throw e;
  }
}

async function closeNode(node: Node): Promise<void> {
  await node.replica.close();
  await node.dataDir.close();
}

/**
 * Polls `cond` until it holds, every `everyMs` (0: every turn of the event loop); throws naming
 * `what` after `timeoutMs`.
 */
async function until(cond: () => boolean, timeoutMs: number, what: string, everyMs = 2): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!cond()) {
    if (performance.now() > deadline) throw new CairnError(ErrorCode.TIMEOUT, `timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise<void>((resolve) => (everyMs === 0 ? setImmediate(resolve) : setTimeout(resolve, everyMs)));
  }
}

function round1(ms: number): number {
  return Math.round(ms * 10) / 10;
}

function storeChoice(flags: Map<string, string>): StoreChoice {
  const kind = flags.get('log-store') ?? 'wal';
  if (kind !== 'wal' && kind !== 'level') throw new UsageError(`--log-store must be wal or level, got ${JSON.stringify(kind)}`);
  return { kind, walSegmentBytes: flags.has('wal-segment-bytes') ? intFlag(flags, 'wal-segment-bytes', 0) : undefined };
}

async function runWrite(dir: string, flags: Map<string, string>): Promise<number> {
  const round = intFlag(flags, 'round', 0);
  const concurrency = Math.max(1, intFlag(flags, 'concurrency', 8));
  const maxMs = intFlag(flags, 'max-ms', 60_000);
  const planted = flags.get('planted-bug');
  if (planted !== undefined && planted !== 'ack-before-write') throw new UsageError(`--planted-bug must be ack-before-write, got ${JSON.stringify(planted)}`);
  const logger = createLogger({ nodeId: NODE_ID, destination: 2 });
  const node = await openNode(dir, logger, true, storeChoice(flags), planted !== undefined);
  const st0 = node.replica.status();
  const opened = performance.now();
  await until(() => node.replica.status().role === 'leader', 10_000, 'this node to lead its one-voter cluster');
  out(
    `ready ${JSON.stringify({
      openMs: round1(node.openMs),
      leadMs: round1(performance.now() - opened),
      snapshotIndex: st0.snapshotIndex,
      diskCommit: st0.commit,
      lastIndex: st0.lastIndex,
    })}`,
  );

  let seq = 0;
  let stopping = false;
  let failed = false;
  const worker = async (): Promise<void> => {
    while (!stopping) {
      const n = seq++;
      const name = `w${round}-${n}`;
      const now = new Date().toISOString();
      const cmd: WriteCommand = { time: now, uid: ulid(), generation: ulid(), id: { type: ARTIST, tenancy: TENANCY, name }, data: { name, n } };
      try {
        // Replica.propose appends to the Raft log before it returns, so within this process seq
        // order is log order (the test checks commit order against it). It resolves once the
        // entry is committed (fsynced) and applied.
        const r = await node.replica.propose(encodeEnvelope(CommandType.ResourceWrite, cmd));
        if (r.ok && r.kind === 'write') {
          out(`ack ${name} ${r.resource.version}`);
          continue;
        }
        out(`fail ${name} ${r.ok ? 'UNEXPECTED' : r.error.code} ${r.ok ? JSON.stringify(r) : r.error.message}`);
      } catch (e) {
        if (stopping) return;
        out(`fail ${name} ${e instanceof CairnError ? e.code : e instanceof Error ? e.name : 'ERROR'} ${oneLine(e)}`);
      }
      failed = true;
      stopping = true;
    }
  };
  const guard = setTimeout(() => {
    stopping = true;
  }, maxMs);
  await Promise.all(Array.from({ length: concurrency }, () => worker()));
  clearTimeout(guard);
  await closeNode(node);
  if (failed) return EXIT_PROPOSAL_FAILED;
  out('done');
  return 0;
}

async function runVerify(dir: string, flags: Map<string, string>): Promise<number> {
  const warnings: string[] = [];
  const logger = recordingLogger(createLogger({ nodeId: NODE_ID, destination: 2 }), warnings);
  const node = await openNode(dir, logger, false, storeChoice(flags));
  const st0 = node.replica.status();
  const diskCommit = st0.commit;
  await until(() => node.fsm.appliedIndex >= diskCommit, 60_000, `replay up to the commit index ${diskCommit} found on disk`, 0);
  const openAndReplayMs = performance.now() - node.openStarted;
  const mark = performance.now();
  await until(() => node.replica.status().role === 'leader', 10_000, 'this node to lead its one-voter cluster');
  const readIndex: LogIndex = await node.replica.readIndex();
  const leadMs = performance.now() - mark;
  const st = node.replica.status();
  const resources: { name: string; version: number; data: unknown }[] = [];
  for (const r of node.fsm.store.all()) resources.push({ name: r.id.name, version: r.version, data: r.data });
  const report: VerifyReport = {
    resources,
    revision: node.fsm.store.revision,
    status: { term: st.term, commit: st.commit, applied: Math.max(st.applied, readIndex), firstIndex: st.firstIndex, lastIndex: st.lastIndex, snapshotIndex: st.snapshotIndex },
    startup: {
      loadedSnapshotIndex: st0.snapshotIndex,
      diskCommit,
      openAndReplayMs: round1(openAndReplayMs),
      leadMs: round1(leadMs),
    },
    logStore: node.logStoreKind,
    recovery: node.logStore instanceof LevelLogStore ? { droppedBytes: node.logStore.recovery.droppedBytes, messages: node.logStore.recovery.messages } : { droppedBytes: 0, messages: [] },
    warnings,
  };
  await closeNode(node);
  out(JSON.stringify(report));
  return 0;
}

function oneLine(e: unknown): string {
  return (e instanceof Error ? e.message : String(e)).replace(/\s+/g, ' ');
}

function errorCode(e: unknown): string {
  if (e instanceof CairnError) return e.code;
  if (e instanceof Error) {
    const problem = (e as { problem?: unknown }).problem;
    return typeof problem === 'string' ? `${e.name}:${problem}` : e.name;
  }
  return 'ERROR';
}

async function main(): Promise<number> {
  let parsed: ReturnType<typeof parseArgs>;
  try {
    parsed = parseArgs(process.argv.slice(2));
  } catch (e) {
    process.stderr.write(`durable-node: ${oneLine(e)}\nusage: durable-node.js write|verify --data-dir DIR [--round R] [--concurrency N] [--max-ms MS] [--log-store wal|level] [--wal-segment-bytes N] [--planted-bug ack-before-write]\n`);
    return 2;
  }
  const dir = parsed.flags.get('data-dir') ?? '';
  try {
    return parsed.mode === 'write' ? await runWrite(dir, parsed.flags) : await runVerify(dir, parsed.flags);
  } catch (e) {
    out(`error ${errorCode(e)} ${oneLine(e)}`);
    return EXIT_STARTUP_ERROR;
  }
}

// Exit explicitly: after a failed start a timer or handle may be left that would keep the
// process alive, and every line was already written synchronously.
process.exit(await main());
