/**
 * The fan-out benchmark's arithmetic, kept pure so a test can check it: pacing, delivery
 * samples joined to the writer's records, percentiles, CPU shares and byte accounting.
 */
// ---- Pacing ----------------------------------------------------------------------------------

/**
 * How many writes an open-loop writer at `ratePerSec` should have started `elapsedMs` after
 * its start (the first at 0 ms). Open loop: the schedule does not wait for answers, so a slow
 * server shows up as a missed rate rather than as a quietly lower one.
 */
export function writesDue(elapsedMs: number, ratePerSec: number): number {
  if (elapsedMs < 0) return 0;
  return Math.floor((elapsedMs * ratePerSec) / 1000) + 1;
}

/** Milliseconds from the start until write number `k` (0-based) is due. */
export function dueAtMs(k: number, ratePerSec: number): number {
  return (k * 1000) / ratePerSec;
}

// ---- Samples ---------------------------------------------------------------------------------

const CHUNK = 1 << 16;
const FIELDS = 3;

/**
 * (revision, receive time, bytes) of every change a watcher received, appended by all the
 * watchers of a run, in typed-array chunks: millions of deliveries without millions of
 * objects on the heap.
 */
export class DeliveryLog {
  private readonly chunks: Float64Array[] = [];
  private used = CHUNK; // forces a first chunk
  private count = 0;

  get size(): number {
    return this.count;
  }

  push(revision: number, receivedMs: number, bytes: number): void {
    if (this.used === CHUNK) {
      this.chunks.push(new Float64Array(CHUNK * FIELDS));
      this.used = 0;
    }
    const c = this.chunks[this.chunks.length - 1] as Float64Array;
    const at = this.used * FIELDS;
    c[at] = revision;
    c[at + 1] = receivedMs;
    c[at + 2] = bytes;
    this.used++;
    this.count++;
  }

  forEach(fn: (revision: number, receivedMs: number, bytes: number) => void): void {
    for (let i = 0; i < this.chunks.length; i++) {
      const c = this.chunks[i] as Float64Array;
      const n = i === this.chunks.length - 1 ? this.used : CHUNK;
      for (let j = 0; j < n * FIELDS; j += FIELDS) fn(c[j] as number, c[j + 1] as number, c[j + 2] as number);
    }
  }

  /** Forgets everything (the chunks are dropped, not reused). */
  clear(): void {
    this.chunks.length = 0;
    this.used = CHUNK;
    this.count = 0;
  }
}

/** One acknowledged write, as the writer saw it (monotonic ms, shared by the processes of the run). */
export interface WriteRecord {
  readonly revision: number;
  readonly sentMs: number;
  readonly ackedMs: number;
}

export interface LatencyJoin {
  /** Receive time minus the write's ack time, one per delivery of a measured write, ascending (ms; negative when the event beat the ack). */
  readonly fromAckMs: Float64Array;
  /** Receive time minus the write's send time, ascending (ms). */
  readonly fromSendMs: Float64Array;
  /** Deliveries of measured writes. */
  readonly delivered: number;
  /** Their bytes, summed over every watcher. */
  readonly deliveredBytes: number;
  /** Deliveries of other revisions (warm-up writes, the seed). */
  readonly outside: number;
}

/** Joins deliveries to the writes they carry; only writes in `measured` count. */
export function joinLatencies(log: DeliveryLog, measured: readonly WriteRecord[]): LatencyJoin {
  const byRevision = new Map<number, WriteRecord>();
  for (const w of measured) byRevision.set(w.revision, w);
  let n = 0;
  log.forEach((rev) => {
    if (byRevision.has(rev)) n++;
  });
  const fromAckMs = new Float64Array(n);
  const fromSendMs = new Float64Array(n);
  let i = 0;
  let outside = 0;
  let deliveredBytes = 0;
  log.forEach((rev, t, bytes) => {
    const w = byRevision.get(rev);
    if (w === undefined) {
      outside++;
      return;
    }
    fromAckMs[i] = t - w.ackedMs;
    fromSendMs[i] = t - w.sentMs;
    deliveredBytes += bytes;
    i++;
  });
  fromAckMs.sort();
  fromSendMs.sort();
  return { fromAckMs, fromSendMs, delivered: n, deliveredBytes, outside };
}

export interface Percentiles {
  readonly p50: number;
  readonly p90: number;
  readonly p99: number;
  readonly max: number;
  /** Samples that exist. */
  readonly count: number;
  /** Samples that never came (undelivered events): ranked above every real one, as +Infinity. */
  readonly missing: number;
}

/**
 * Nearest-rank percentiles of an ascending array, NaN when there is nothing at all. `missing`
 * samples count as slower than every real one: when 30% of the deliveries never came, p50 is a
 * real latency and p90 is +Infinity ("not delivered"), not the p90 of the survivors.
 */
export function percentiles(sorted: ArrayLike<number>, missing = 0): Percentiles {
  const total = sorted.length + missing;
  const at = (p: number): number => {
    if (total === 0) return Number.NaN;
    const rank = Math.min(total, Math.max(1, Math.ceil((p / 100) * total)));
    return rank > sorted.length ? Number.POSITIVE_INFINITY : (sorted[rank - 1] as number);
  };
  return { p50: at(50), p90: at(90), p99: at(99), max: at(100), count: sorted.length, missing };
}

// ---- CPU ---------------------------------------------------------------------------------------

/** CPU time over wall time as a percentage of one core (200 = two cores busy). */
export function cpuPercent(cpuMs: number, wallMs: number): number {
  return wallMs <= 0 ? Number.NaN : (100 * cpuMs) / wallMs;
}

// ---- Verdict ---------------------------------------------------------------------------------

/**
 * Why a phase fell behind, from what each process did in the window. The node is saturated
 * when its threads were running or waiting to run (CPU + run-queue wait) nearly all the time
 * on as many cores as it can use: one for a Node server (its JavaScript thread does the
 * fan-out), every core for a Go server such as etcd (`serverCores`). It wanted them whether
 * or not other work let it have them. The load generator is saturated when its event loop was
 * busy nearly all the time.
 */
export function verdictOf(p: { keepsUp: boolean; serverCpuPercent: number; serverCpuWaitPercent: number; elu: number; serverCores?: number }): string {
  if (p.keepsUp) return 'keeps up';
  const wait = Number.isFinite(p.serverCpuWaitPercent) ? p.serverCpuWaitPercent : 0;
  const server = p.serverCpuPercent + wait >= 90 * (p.serverCores ?? 1);
  const client = p.elu >= 0.85;
  const node = `node busy ${Math.round(p.serverCpuPercent)}% + waiting for a CPU ${Math.round(wait)}%${(p.serverCores ?? 1) > 1 ? ` of ${p.serverCores} cores` : ''}`;
  const gen = `watcher event loop ${Math.round(p.elu * 100)}% busy`;
  if (server && client) return `falls behind: node and load generator both saturated (${node}; ${gen})`;
  if (server) return `falls behind: node-bound (${node})`;
  if (client) return `falls behind: load-generator-bound (${gen})`;
  return `falls behind: neither process saturated (${node}; ${gen})`;
}

// ---- Bytes -------------------------------------------------------------------------------------

export interface ByteComparison {
  /** Bytes the server sent to all watchers, per change: what one write costs in watch traffic. */
  readonly watchBytesPerChange: number;
  /** The same clients polling List once every `pollIntervalS` instead, per change. */
  readonly pollBytesPerChange: number;
  /** pollBytesPerChange / watchBytesPerChange: how many times more polling sends. */
  readonly pollOverWatch: number;
}

/**
 * Watch traffic against polling, per change. Watching costs what the watchers received over
 * the changes they carried; polling costs `clients` List responses every `pollIntervalS`,
 * whatever changed, spread over the changes of that interval (`changesPerSec`).
 */
export function compareBytes(o: { readonly watchBytes: number; readonly changes: number; readonly listResponseBytes: number; readonly clients: number; readonly pollIntervalS: number; readonly changesPerSec: number }): ByteComparison {
  const watchBytesPerChange = o.changes > 0 ? o.watchBytes / o.changes : Number.NaN;
  const pollBytesPerSec = (o.listResponseBytes * o.clients) / o.pollIntervalS;
  const pollBytesPerChange = o.changesPerSec > 0 ? pollBytesPerSec / o.changesPerSec : Number.NaN;
  return { watchBytesPerChange, pollBytesPerChange, pollOverWatch: pollBytesPerChange / watchBytesPerChange };
}
