/**
 * The workloads, through the client library (src/client) against random nodes. Every
 * operation is recorded: the register workload in the checker's history format
 * (../checker/history.ts), the set workload as adds with their outcomes plus one final read.
 */
import { CairnClient, isCairnClientError, isOutcomeUnknown, type Resource } from '../../src/client/index.js';
import { HistoryRecorder, type OpStatus, type Value } from '../checker/history.js';
import type { SetAdd } from '../checker/set-checker.js';
import { Rng } from './schedule.js';

export const TYPE = 'demo.v1.Artist';
const NAMESPACE = 'default';

/** One completed operation for the throughput/latency plot. */
export interface Sample {
  readonly workload: 'register' | 'set' | 'watch';
  readonly f: string;
  readonly start: number;
  readonly end: number;
  readonly status: OpStatus;
}

export interface WorkloadOptions {
  readonly endpoints: readonly string[];
  readonly seed: number;
  /** Milliseconds since the run started. */
  readonly now: () => number;
  readonly workers?: number;
  /** Per call, retries and failover included. Default 5 s. */
  readonly timeoutMs?: number;
  /**
   * Worker w talks to node w mod N only (Jepsen's client per node) instead of all of them with
   * fail-over: a worker on a cut-off node stays there, so what that node answers gets recorded.
   */
  readonly pinned?: boolean;
  /** The cluster CA the clients check the nodes against (the nodes run TLS); absent: plaintext. */
  readonly tls?: { readonly ca: string };
  /** The bearer token the clients send (the nodes run with access control, as TLS nodes do). */
  readonly token?: string;
}

type Artist = { name: string; genre?: string };

/** What a CAS may expect: the value last seen and the version it was seen at. */
interface Known {
  readonly value: Value;
  readonly version: string;
}

/** The error's code for the tallies. */
function codeOf(e: unknown): string {
  if (isCairnClientError(e)) return `${e.code}${e.outcomeUnknown ? ' (unknown outcome)' : ''}`;
  return e instanceof Error ? e.message : String(e);
}

abstract class Workload {
  readonly samples: Sample[] = [];
  readonly errors = new Map<string, number>();
  protected running = false;
  private loops: Promise<void>[] = [];
  protected readonly clients: CairnClient[] = [];

  constructor(protected readonly o: WorkloadOptions) {}

  start(): void {
    this.running = true;
    const n = this.o.workers ?? 4;
    for (let w = 0; w < n; w++) {
      const endpoints = this.o.pinned === true ? [this.o.endpoints[w % this.o.endpoints.length] as string] : this.o.endpoints;
      const client = new CairnClient({ endpoints, timeoutMs: this.o.timeoutMs ?? 5000, ...(this.o.tls !== undefined ? { tls: this.o.tls } : {}), ...(this.o.token !== undefined ? { token: this.o.token } : {}) });
      this.clients.push(client);
      this.loops.push(this.loop(w, client, new Rng((this.o.seed ^ (0x9e3779b9 * (w + 1))) >>> 0)));
    }
  }

  /** Stops issuing operations; waits for those in flight. */
  async stop(): Promise<void> {
    this.running = false;
    await Promise.all(this.loops);
  }

  close(): void {
    for (const c of this.clients) c.close();
  }

  protected tally(e: unknown): void {
    const k = codeOf(e);
    this.errors.set(k, (this.errors.get(k) ?? 0) + 1);
  }

  protected abstract loop(worker: number, client: CairnClient, rng: Rng): Promise<void>;
}

/**
 * A CAS register per key (`jr-k<j>`, the value is the Artist's `name`): reads (linearizable;
 * absent = null), blind writes of unique values, and compare-and-set from the value this worker
 * last saw, done as a write conditioned on the version it saw it at. A version identifies one
 * state, so a CAS that succeeds did find the expected value; one that fails (`CAS_FAILED`) is
 * `fail` and the checker drops it. A blind write never fails for contention (docs/api.md
 * "Unconditional writes"): one answered `CAS_FAILED` is recorded in `blindWritesRefusedForContention`,
 * which the run reports as an anomaly.
 */
export class RegisterWorkload extends Workload {
  readonly history = new HistoryRecorder();
  /** Blind (unconditional) writes answered CAS_FAILED: each a broken contract, never contention. */
  readonly blindWritesRefusedForContention: string[] = [];
  private nextValue = 1;

  constructor(
    o: WorkloadOptions,
    readonly keys = 8,
  ) {
    super(o);
  }

  protected async loop(worker: number, client: CairnClient, rng: Rng): Promise<void> {
    const known = new Map<string, Known>();
    while (this.running) {
      const key = `jr-k${rng.int(this.keys)}`;
      const ref = { type: TYPE, name: key, tenancy: { namespace: NAMESPACE } };
      const r = rng.next();
      const start = this.o.now();
      let status: OpStatus;
      let f: string;
      if (r < 0.4) {
        f = 'read';
        const h = this.history.invoke(worker, 'read', key, null, start);
        try {
          const res = await client.read<Artist>(ref, { consistency: 'linearizable' });
          known.set(key, { value: res.resource.data.name, version: res.resource.version });
          status = 'ok';
          this.history.complete(h, 'ok', res.resource.data.name, this.o.now());
        } catch (e) {
          if (isCairnClientError(e, 'NOT_FOUND')) {
            known.set(key, { value: null, version: '0' });
            status = 'ok';
            this.history.complete(h, 'ok', null, this.o.now());
          } else {
            // A read changes nothing: whatever happened, it did not take effect on the register.
            this.tally(e);
            status = 'fail';
            this.history.complete(h, 'fail', null, this.o.now());
          }
        }
      } else {
        const value = `v${this.nextValue++}`;
        const cas = r >= 0.7;
        f = cas ? 'cas' : 'write';
        const seen = known.get(key) ?? { value: null, version: '0' };
        const invoke = cas ? this.history.invoke(worker, 'cas', key, [seen.value, value], start) : this.history.invoke(worker, 'write', key, value, start);
        try {
          const res: Resource<Artist> = await client.write<Artist>(ref, { data: { name: value }, ...(cas ? { version: seen.version } : {}) });
          known.set(key, { value, version: res.version });
          status = 'ok';
        } catch (e) {
          this.tally(e);
          status = isOutcomeUnknown(e) ? 'info' : 'fail';
          if (!cas && isCairnClientError(e, 'CAS_FAILED')) this.blindWritesRefusedForContention.push(`worker ${worker}: write ${key} = ${value} at ${start} ms answered CAS_FAILED`);
          // After a failed CAS our view of the key is stale; read again before the next CAS.
          known.delete(key);
        }
        if (invoke.f === 'cas') this.history.complete(invoke, status, [seen.value, value], this.o.now());
        else if (invoke.f === 'write') this.history.complete(invoke, status, value, this.o.now());
      }
      this.samples.push({ workload: 'register', f, start, end: this.o.now(), status });
    }
  }
}

/** Unique adds (`js-<worker>-<seq>`, create-only writes), then one final linearizable list. */
export class SetWorkload extends Workload {
  readonly adds: (SetAdd & { readonly start: number; readonly end: number })[] = [];

  protected async loop(worker: number, client: CairnClient): Promise<void> {
    for (let seq = 1; this.running; seq++) {
      const name = `js-${worker}-${seq}`;
      const start = this.o.now();
      let status: OpStatus;
      try {
        await client.write<Artist>({ type: TYPE, name, tenancy: { namespace: NAMESPACE } }, { data: { name }, version: '0' });
        status = 'ok';
      } catch (e) {
        this.tally(e);
        status = isOutcomeUnknown(e) ? 'info' : 'fail';
      }
      const end = this.o.now();
      this.adds.push({ element: name, status, start, end });
      this.samples.push({ workload: 'set', f: 'add', start, end, status });
    }
  }

  /** The final read: a linearizable list of every `js-` name, retried until a node answers. */
  async finalRead(deadlineMs = 60_000): Promise<string[]> {
    const client = this.clients[0] ?? new CairnClient({ endpoints: this.o.endpoints, ...(this.o.tls !== undefined ? { tls: this.o.tls } : {}), ...(this.o.token !== undefined ? { token: this.o.token } : {}) });
    const deadline = Date.now() + deadlineMs;
    for (;;) {
      try {
        const res = await client.list<Artist>(TYPE, { namespace: NAMESPACE, namePrefix: 'js-', consistency: 'linearizable' });
        return res.resources.map((r) => r.id.name);
      } catch (e) {
        if (Date.now() > deadline) throw e;
        await new Promise((resolve) => setTimeout(resolve, 500));
      }
    }
  }
}
