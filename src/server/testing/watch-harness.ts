import { mkdtemp, rm } from 'node:fs/promises';
import * as http from 'node:http';
import * as os from 'node:os';
import * as path from 'node:path';
import * as v8 from 'node:v8';
import * as vm from 'node:vm';
import type { Test } from 'tap';
import { resourceToJson, type ResourceJson } from '../../api/index.js';
import { createLogger } from '../../platform/index.js';
import type { ChangeRecord } from '../../store/index.js';
import { startAgent, type Agent } from '../agent.js';
import type { AgentConfig } from '../config.js';
import { clusterConfigs, devConfig } from './agents.js';
import { waitForAgreedLeader } from './leader.js';

/**
 * Test support for the watch tests of this folder (watch-http.test.ts, watch-grpc.test.ts):
 * real agents in this process on ports the OS picks, a small HTTP client, an NDJSON watch
 * reader that can stop reading its socket, and an independent record of what the replica
 * applied (the reference the streams are checked against). Test-only: nothing imports it
 * but tests.
 */

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Polls `cond` until it holds; fails with `what` (and what `seen` says) after `ms`. */
export async function until(cond: () => boolean, ms: number, what: string, seen: () => string = () => ''): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) {
      const s = seen();
      throw new Error(`timed out after ${ms} ms waiting for ${what}${s !== '' ? `; seen: ${s}` : ''}`);
    }
    await sleep(10);
  }
}

let gc: (() => void) | undefined;

/** The heap in use after a full garbage collection (the measurement the slow-consumer cases print). */
export function heapUsedAfterGc(): number {
  if (!gc) {
    v8.setFlagsFromString('--expose-gc');
    gc = vm.runInNewContext('gc') as () => void;
  }
  gc();
  return process.memoryUsage().heapUsed;
}

/** Closes every agent of a test at its end (in parallel), then removes their data. */
export class Agents {
  readonly all: Agent[] = [];
  private readonly dirs: string[] = [];
  private readonly closed = new Set<Agent>();

  constructor(t: Test) {
    t.teardown(async () => {
      await Promise.all(this.all.map((a) => this.close(a)));
      for (const d of this.dirs) await rm(d, { recursive: true, force: true });
    });
  }

  async close(a: Agent): Promise<void> {
    this.closed.add(a);
    await a.close();
  }

  /** A single node like `cairn agent --dev` (demo types), with `overrides`; resolves once it leads. */
  async dev(overrides: Partial<AgentConfig> = {}): Promise<Agent> {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'cairn-watch-'));
    this.dirs.push(dir);
    const cfg = devConfig(dir, overrides);
    const agent = await startAgent(cfg, { logger: createLogger({ level: 'error', nodeId: cfg.nodeId }) });
    this.all.push(agent);
    await agent.ready;
    await until(() => agent.coordinator()?.status().role === 'leader', 15_000, 'the dev node to lead');
    return agent;
  }

  /** Three voters formed with --bootstrap-expect 3 (demo types); resolves once all agree on a leader. */
  async three(overrides: Partial<AgentConfig> = {}): Promise<Agent[]> {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'cairn-watch3-'));
    this.dirs.push(dir);
    const started: Agent[] = [];
    for (const cfg of await clusterConfigs(dir, 3, overrides)) {
      const a = await startAgent(cfg, { logger: createLogger({ level: 'error', nodeId: cfg.nodeId }) });
      this.all.push(a);
      started.push(a);
    }
    await Promise.all(started.map((a) => a.ready));
    // A leader all three agree on in one term: callers pick "the leader" and "a follower" by
    // role right after this, and a deposed leader may still call itself leader for a while.
    await waitForAgreedLeader(started, 20_000);
    return started;
  }
}

/** Everything the replica applied, in commit order, as its subscribers see it (independent of the publisher). */
export class ChangeLog {
  readonly entries: Array<{ readonly index: number; readonly records: readonly ChangeRecord[] }> = [];
  readonly resets: number[] = [];

  constructor(agent: Agent) {
    const c = agent.coordinator();
    if (!c) throw new Error('the agent is not running');
    c.subscribe((e) => {
      if (e.kind === 'changes') this.entries.push({ index: e.index as number, records: e.changes });
      else this.resets.push(e.index as number);
    });
  }

  /** Every change after revision `after` that `filter` matches, in commit order, as a watch sends it. */
  expected(after: number, filter: FilterJson): ExpectedLine[] {
    const out: ExpectedLine[] = [];
    for (const e of this.entries) {
      if (e.index <= after) continue;
      for (const r of e.records) {
        const value = resourceToJson(r.resource);
        if (filterMatches(filter, value)) out.push({ type: r.kind === 'delete' ? 'delete' : 'change', revision: String(e.index), value });
      }
    }
    return out;
  }
}

export interface ExpectedLine {
  readonly type: 'change' | 'delete';
  readonly revision: string;
  readonly value: ResourceJson;
}

/** A watch's (or a List's) filter as the HTTP API takes it. */
export interface FilterJson {
  readonly type: string;
  readonly partition?: string | undefined;
  readonly namespace?: string | undefined;
  readonly name_prefix?: string | undefined;
}

const SCOPE: Record<string, 'namespace' | 'partition' | 'cluster'> = { Artist: 'namespace', Album: 'namespace', RecordLabel: 'partition', Executive: 'cluster' };

/** The naive reference for a filter of the demo types (API.md "List"), as the conformance suite has it. */
export function filterMatches(f: FilterJson, r: ResourceJson): boolean {
  const want = f.type.split('.');
  const have = r.id.type.split('.');
  const [group, gv, kind] = want.length === 2 ? [want[0], undefined, want[1]] : [want[0], want[1], want[2]];
  if (have[0] !== group || have[2] !== kind || (gv !== undefined && have[1] !== gv)) return false;
  const scope = SCOPE[kind ?? ''] ?? 'namespace';
  const norm = (v: string | undefined): string => (v === undefined || v === '' ? 'default' : v);
  if (scope !== 'cluster' && f.partition !== '*' && r.id.tenancy.partition !== norm(f.partition)) return false;
  if (scope === 'namespace' && f.namespace !== '*' && r.id.tenancy.namespace !== norm(f.namespace)) return false;
  return f.name_prefix === undefined || f.name_prefix === '' || r.id.name.startsWith(f.name_prefix);
}

export interface Tenancy {
  readonly partition?: string | undefined;
  readonly namespace?: string | undefined;
}

export interface ListJson {
  readonly resources: ResourceJson[];
  readonly revision: string;
}

function query(q: Record<string, string | undefined>): string {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(q)) if (v !== undefined) p.set(k, v);
  const s = p.toString();
  return s === '' ? '' : `?${s}`;
}

/** The resource API over HTTP, failing loudly on anything but success. */
export class Http {
  readonly base: string;

  constructor(agent: Agent) {
    this.base = `http://${agent.httpAddress}`;
  }

  private async json<T>(method: string, url: string, body?: unknown): Promise<{ value: T; headers: Headers }> {
    // The API takes PUT, POST and PATCH only as application/json, with a body or without.
    const json = body !== undefined || method === 'PUT' || method === 'POST' || method === 'PATCH';
    const res = await fetch(`${this.base}${url}`, { method, ...(json ? { headers: { 'content-type': 'application/json' } } : {}), ...(body !== undefined ? { body: JSON.stringify(body) } : {}) });
    const text = await res.text();
    if (res.status !== 200) throw new Error(`${method} ${url}: HTTP ${res.status}: ${text}`);
    return { value: JSON.parse(text) as T, headers: res.headers };
  }

  async write(type: string, name: string, tenancy: Tenancy, body: Record<string, unknown>): Promise<ResourceJson> {
    return (await this.json<ResourceJson>('PUT', `/v1/resource/${type}/${name}${query({ ...tenancy })}`, body)).value;
  }

  async del(type: string, name: string, tenancy: Tenancy = {}): Promise<{ deleted: boolean; resource?: ResourceJson }> {
    return (await this.json<{ deleted: boolean; resource?: ResourceJson }>('DELETE', `/v1/resource/${type}/${name}${query({ ...tenancy })}`)).value;
  }

  async list(type: string, q: Record<string, string | undefined> = {}): Promise<ListJson> {
    return (await this.json<ListJson>('GET', `/v1/resources/${type}${query(q)}`)).value;
  }

  /** A read and the cairn-revision it reports. */
  async read(type: string, name: string, q: Record<string, string | undefined>): Promise<{ resource: ResourceJson; revision: number }> {
    const r = await this.json<ResourceJson>('GET', `/v1/resource/${type}/${name}${query(q)}`);
    return { resource: r.value, revision: Number(r.headers.get('cairn-revision')) };
  }
}

/** One line of a watch stream (API.md "Watch"). */
export interface WatchLine {
  readonly type: 'change' | 'delete' | 'tail' | 'bookmark' | 'error';
  readonly watch?: number;
  readonly revision: string;
  readonly value?: ResourceJson;
  readonly code?: string;
  readonly message?: string;
}

/**
 * A `POST /v1/watch` stream read line by line. `pause()` stops reading (Node then stops
 * reading the socket, so TCP flow control pushes back on the server); `destroy()` hangs up.
 */
export class HttpWatch {
  readonly lines: WatchLine[] = [];
  bytes = 0;
  ended = false;
  private res: http.IncomingMessage | undefined;
  private rest = '';

  private constructor(
    private readonly req: http.ClientRequest,
    readonly status: number,
    readonly contentType: string,
  ) {}

  /** Opens a stream; resolves once the response headers arrive (rejects on a non-200 answer). */
  static open(base: string, body: unknown, agent?: http.Agent): Promise<HttpWatch> {
    return new Promise((resolve, reject) => {
      const text = JSON.stringify(body);
      const req = http.request(`${base}/v1/watch`, { method: 'POST', headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) }, ...(agent ? { agent } : {}) });
      req.on('error', (e) => reject(e));
      req.on('response', (res) => {
        if (res.statusCode !== 200) {
          let b = '';
          res.setEncoding('utf8');
          res.on('data', (c: string) => (b += c));
          res.on('end', () => reject(new Error(`watch answered HTTP ${res.statusCode}: ${b}`)));
          return;
        }
        const w = new HttpWatch(req, res.statusCode, String(res.headers['content-type']));
        w.res = res;
        res.setEncoding('utf8');
        res.on('data', (c: string) => w.onData(c));
        res.on('end', () => (w.ended = true));
        res.on('close', () => (w.ended = true));
        res.on('error', () => (w.ended = true));
        resolve(w);
      });
      req.end(text);
    });
  }

  private onData(c: string): void {
    this.bytes += Buffer.byteLength(c);
    this.rest += c;
    let nl = this.rest.indexOf('\n');
    while (nl >= 0) {
      const line = this.rest.slice(0, nl);
      this.rest = this.rest.slice(nl + 1);
      if (line !== '') this.lines.push(JSON.parse(line) as WatchLine);
      nl = this.rest.indexOf('\n');
    }
  }

  /** Lines other than bookmarks. */
  get events(): WatchLine[] {
    return this.lines.filter((l) => l.type !== 'bookmark');
  }

  of(watch: number): WatchLine[] {
    return this.lines.filter((l) => l.watch === watch && l.type !== 'bookmark');
  }

  tail(watch: number): WatchLine | undefined {
    return this.lines.find((l) => l.type === 'tail' && l.watch === watch);
  }

  get error(): WatchLine | undefined {
    return this.lines.find((l) => l.type === 'error');
  }

  /** Waits until `cond` holds of the lines received so far. */
  until(cond: (w: this) => boolean, ms: number, what: string): Promise<void> {
    return until(() => cond(this), ms, what, () => `${this.lines.length} lines, last ${JSON.stringify(this.lines.slice(-3)).slice(0, 600)}${this.ended ? ' (ended)' : ''}`);
  }

  pause(): void {
    this.res?.pause();
  }

  resume(): void {
    this.res?.resume();
  }

  destroy(): void {
    this.req.destroy();
    this.res?.destroy();
  }
}

/** The name, namespace and partition of a resource: how the tests compare sets. */
export const keyOf = (r: { id: { type: string; tenancy: { partition: string; namespace: string }; name: string } }): string => `${r.id.type} ${r.id.tenancy.partition}/${r.id.tenancy.namespace}/${r.id.name}`;
