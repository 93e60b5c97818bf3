/**
 * A recording client for the HTTP watch (API.md "Watch", `POST /v1/watch`, NDJSON): one stream
 * carries several watches; every line received is kept, per watch and per connection, in the
 * watch checker's format (cluster-test/checker/watch-checker.ts). A stream can be cut (the
 * socket closed) and reopened on any node: each watch then resumes with `gt_revision` = the
 * last revision it covered (its last event, its tail, or the stream's last bookmark), or, if
 * it never got a start point, starts over as it first did.
 */
import type { JsonValue, ReceivedEvent, WatchConnection, WatcherRecord, WatchFilterSpec, WatchKey } from '../checker/watch-checker.js';
import { fetchNode, field, request, type ClusterNode } from './harness.js';

/** One watch of a request body, as API.md spells it. */
export interface WatchRequestSpec {
  readonly type: string;
  readonly partition?: string;
  readonly namespace?: string;
  readonly name_prefix?: string;
}

interface MutableConnection {
  from: WatchConnection['from'];
  readonly node: string;
  readonly events: ReceivedEvent[];
}

/** The projection of a resource the checks compare: identity is in the key; uid, version and data here. */
export function projectResource(r: unknown): { key: WatchKey; value: JsonValue } {
  const id = field(r, 'id');
  const tenancy = field(id, 'tenancy');
  const s = (o: unknown, k: string): string => {
    const v = field(o, k);
    if (typeof v !== 'string') throw new Error(`expected a string ${k} in ${JSON.stringify(o)}`);
    return v;
  };
  return {
    key: { type: s(id, 'type'), partition: s(tenancy, 'partition'), namespace: s(tenancy, 'namespace'), name: s(id, 'name') },
    value: { uid: s(id, 'uid'), version: s(r, 'version'), data: (field(r, 'data') ?? null) as JsonValue },
  };
}

/** One watch, followed across the connections of its stream. */
export class TrackedWatch {
  readonly connections: MutableConnection[] = [];
  /** Every matching change up to this revision has been received (undefined: no start point yet). */
  covered: number | undefined;
  /** In the current connection: past the initial state (or not waiting for one). */
  live = false;

  constructor(
    readonly id: string,
    readonly request: WatchRequestSpec,
    /** Live events only on a fresh start (at_tail); resumes use gt_revision like any other. */
    readonly atTail: boolean,
  ) {}

  /** The filter as the server normalizes it (empty partition or namespace means `default`). */
  get filter(): WatchFilterSpec {
    return {
      type: this.request.type,
      partition: this.request.partition ?? 'default',
      namespace: this.request.namespace ?? 'default',
      ...(this.request.name_prefix !== undefined ? { namePrefix: this.request.name_prefix } : {}),
    };
  }

  record(): WatcherRecord {
    return { id: this.id, filter: this.filter, connections: this.connections.map((c) => ({ from: c.from, node: c.node, events: [...c.events] })) };
  }

  /** @internal The request body entry for a new connection, and how it starts. */
  begin(node: string): Record<string, unknown> {
    const body: Record<string, unknown> = { ...this.request };
    let from: WatchConnection['from'];
    if (this.covered !== undefined) {
      body['gt_revision'] = String(this.covered);
      from = { kind: 'resume', gtRevision: this.covered };
    } else if (this.atTail) {
      body['at_tail'] = true;
      from = { kind: 'at-tail' };
    } else from = { kind: 'initial' };
    // A resume or an at-tail start has no initial state to wait for.
    this.live = from.kind !== 'initial';
    this.connections.push({ from, node, events: [] });
    return body;
  }

  private get current(): MutableConnection {
    const c = this.connections[this.connections.length - 1];
    if (!c) throw new Error(`watch ${this.id} has no connection`);
    return c;
  }

  private cover(revision: number): void {
    if (this.live) this.covered = Math.max(this.covered ?? revision, revision);
  }

  /** @internal */
  receive(ev: ReceivedEvent): void {
    this.current.events.push(ev);
    switch (ev.type) {
      case 'change':
      case 'delete':
        this.cover(ev.revision);
        return;
      case 'tail':
        this.live = true;
        this.cover(ev.revision);
        return;
      case 'bookmark':
        this.cover(ev.revision);
        return;
      case 'error':
        return;
    }
  }

  /** @internal Marks the current at-tail connection as started at or before `revision`. */
  startedBy(revision: number): void {
    const c = this.current;
    if (c.from.kind === 'at-tail') c.from = { kind: 'at-tail', notAfter: revision };
  }
}

/**
 * One `POST /v1/watch` stream at a time, reopened on demand. `open` resolves once the response
 * headers are in (the server has subscribed every watch by then); lines are read in the
 * background until the stream ends or `close` cuts it.
 */
export class WatchStream {
  private abort: AbortController | undefined;
  private reading: Promise<void> | undefined;
  /** Lines that were not JSON or not a known event (should stay empty). */
  readonly garbage: string[] = [];
  /** Why each connection ended: `closed` (by us), `eof`, `error CODE`, or a network error. */
  readonly endings: string[] = [];
  opens = 0;

  constructor(
    readonly id: string,
    readonly watches: readonly TrackedWatch[],
  ) {}

  get isOpen(): boolean {
    return this.reading !== undefined;
  }

  async open(node: ClusterNode): Promise<void> {
    if (this.reading) throw new Error(`stream ${this.id} is already open`);
    const body = this.watches.map((w) => w.begin(node.id));
    const abort = new AbortController();
    this.abort = abort;
    this.opens++;
    const res = await fetchNode(`${node.url}/v1/watch`, { method: 'POST', body: JSON.stringify(body), headers: { 'content-type': 'application/json' }, signal: abort.signal });
    const ct = res.headers.get('content-type');
    if (res.status !== 200 || ct !== 'application/json;stream=watch' || !res.body) {
      const text = await res.text().catch(() => '');
      throw new Error(`watch stream ${this.id} on ${node.id}: ${res.status} ${ct ?? ''} ${text.slice(0, 300)}`);
    }
    if (this.watches.some((w) => w.connections[w.connections.length - 1]?.from.kind === 'at-tail')) {
      // The server subscribed before it sent the headers: a linearizable read now returns a
      // revision at or after every at-tail watch's start, so the checker can hold the stream
      // to every change after it.
      const r = await request(`${node.url}/v1/resources/demo.v1.Album?namespace=no-such-namespace`, { timeoutMs: 10_000 });
      const rev = field(r.body, 'revision');
      if (r.status === 200 && typeof rev === 'string') for (const w of this.watches) w.startedBy(Number(rev));
    }
    this.reading = this.read(res.body, abort.signal).finally(() => {
      this.reading = undefined;
    });
  }

  private async read(body: ReadableStream<Uint8Array>, signal: AbortSignal): Promise<void> {
    const decoder = new TextDecoder();
    let buf = '';
    let ending = 'eof';
    try {
      for await (const chunk of body as unknown as AsyncIterable<Uint8Array>) {
        buf += decoder.decode(chunk, { stream: true });
        let nl: number;
        while ((nl = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, nl);
          buf = buf.slice(nl + 1);
          const e = this.dispatch(line);
          if (e !== undefined) ending = e;
        }
      }
    } catch (e) {
      ending = signal.aborted ? 'closed' : e instanceof Error ? e.message : String(e);
    }
    // A partial last line of a cut connection was never received as an event.
    this.endings.push(ending);
  }

  /** Routes one line to its watch (a bookmark to every watch). Returns an ending if the line is an error. */
  private dispatch(line: string): string | undefined {
    if (line.trim() === '') return undefined;
    let o: unknown;
    try {
      o = JSON.parse(line);
    } catch {
      this.garbage.push(line);
      return undefined;
    }
    const type = field(o, 'type');
    const rev = field(o, 'revision');
    const revision = typeof rev === 'string' ? Number(rev) : undefined;
    const watch = field(o, 'watch');
    const target = typeof watch === 'number' ? this.watches[watch] : undefined;
    switch (type) {
      case 'change':
      case 'delete': {
        if (!target || revision === undefined) break;
        const { key, value } = projectResource(field(o, 'value'));
        target.receive({ type, revision, key, value });
        return undefined;
      }
      case 'tail':
        if (!target || revision === undefined) break;
        target.receive({ type, revision });
        return undefined;
      case 'bookmark':
        if (revision === undefined) break;
        for (const w of this.watches) w.receive({ type, revision });
        return undefined;
      case 'error': {
        const code = field(o, 'code');
        const c = typeof code === 'string' ? code : 'UNKNOWN';
        const msg = field(o, 'message');
        for (const w of target ? [target] : this.watches) w.receive({ type: 'error', code: c, ...(revision !== undefined ? { revision } : {}), ...(typeof msg === 'string' ? { message: msg } : {}) });
        return `error ${c}`;
      }
    }
    this.garbage.push(line);
    return undefined;
  }

  /** Cuts the connection (closes the socket) and waits until reading has stopped. */
  async close(): Promise<void> {
    this.abort?.abort();
    await this.reading;
  }

  /** Waits for the stream to end by itself (after an error event, or the server closing it). */
  async ended(): Promise<void> {
    await this.reading;
  }
}
