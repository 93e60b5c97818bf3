import type * as http from 'node:http';
import { CairnError, ErrorCode } from '../base/index.js';
import { errorBody } from './errors.js';
import type { HttpRequest, Router } from './http-server.js';
import { bearerToken } from './resource-service.js';
import { resourceJsonText, WATCH_LIMITS, type WatchEvent, type WatchService, type WatchSession, type WatchSpec } from './watch.js';

const WATCH_FIELDS = ['type', 'partition', 'namespace', 'name_prefix', 'gt_revision', 'at_tail'] as const;

function invalid(msg: string): CairnError {
  return new CairnError(ErrorCode.INVALID_ARGUMENT, msg);
}

/** The body of `POST /v1/watch`: `[{type, partition?, namespace?, name_prefix?, gt_revision?, at_tail?}]`. */
export function parseWatchBody(req: HttpRequest): WatchSpec[] {
  const v = req.json();
  if (!Array.isArray(v)) throw invalid('the watch request must be a JSON array of watches, e.g. [{"type":"demo.v1.Artist"}]');
  return v.map((w: unknown, i) => {
    if (typeof w !== 'object' || w === null || Array.isArray(w)) throw invalid(`watch ${i} must be a JSON object`);
    const o = w as Record<string, unknown>;
    for (const k of Object.keys(o)) {
      if (!(WATCH_FIELDS as readonly string[]).includes(k)) throw invalid(`unknown field ${JSON.stringify(k)} in watch ${i}; allowed: ${WATCH_FIELDS.join(', ')}`);
    }
    const str = (k: string): string | undefined => {
      const x = o[k];
      if (x === undefined || x === null) return undefined;
      if (typeof x !== 'string') throw invalid(`watch ${i}: ${k} must be a string`);
      return x;
    };
    const atTail = o['at_tail'];
    if (atTail !== undefined && atTail !== null && typeof atTail !== 'boolean') throw invalid(`watch ${i}: at_tail must be a boolean`);
    const type = str('type');
    if (type === undefined) throw invalid(`watch ${i}: type is required`);
    return { type, partition: str('partition'), namespace: str('namespace'), namePrefix: str('name_prefix'), gtRevision: str('gt_revision'), atTail: atTail === true };
  });
}

/**
 * One NDJSON line per event (API.md "Watch"). The resource's JSON text is built once per stored
 * version for every watcher that gets it (`resourceJsonText`); the line around it is joined per
 * send (a rope V8 flattens when the chunk is written), not kept: kept, it would be a second copy
 * of the text for as long as the window keeps the version (docs/performance.md "Where a node's
 * memory goes").
 */
export function watchEventLine(ev: WatchEvent): string {
  switch (ev.kind) {
    case 'change':
    case 'delete':
      return `{"type":"${ev.kind}","watch":${ev.watch},"revision":"${ev.revision}","value":${resourceJsonText(ev.resource)}}\n`;
    case 'tail':
      return `{"type":"tail","watch":${ev.watch},"revision":"${ev.revision}"}\n`;
    case 'bookmark':
      return `{"type":"bookmark","revision":"${ev.revision}"}\n`;
    case 'new-snapshot-to-follow':
    case 'end-of-snapshot':
      // Only gRPC watches ask for framing; never sent on HTTP.
      return '';
  }
}

/** `POST /v1/watch`: a streaming response, one JSON document per line, flushed per batch of events. */
export function addWatchRoutes(router: Router, watches: WatchService): void {
  router.add('POST', '/v1/watch', async (req: HttpRequest, res: http.ServerResponse) => {
    const extra = [...req.query.keys()][0];
    if (extra !== undefined) throw invalid(`unknown query parameter ${JSON.stringify(extra)}; a watch takes its options in the body`);
    const specs = parseWatchBody(req);
    const auth = req.headers['authorization'];
    const token = bearerToken(auth);
    // A client that goes away while the node starts (open() waits for it) ends its session at once.
    let session: WatchSession | undefined;
    let gone = false;
    res.on('close', () => {
      gone = true;
      session?.close();
    });
    // The session sends nothing before open() resolves (its first pump is a later turn), so the
    // headers written just after it always come first.
    session = await watches.open(
      specs,
      { token },
      {
      send(events) {
        let text = '';
        for (const ev of events) text += watchEventLine(ev);
        return res.write(text);
      },
      onDrain(cb) {
        res.once('drain', cb);
      },
      sizeOf(ev) {
        // Built once per shared event; the write below reuses the line.
        return ev.kind === 'change' || ev.kind === 'delete' ? watchEventLine(ev).length : 64;
      },
      end(error) {
        if (error) {
          const body = errorBody(error).error;
          res.end(`${JSON.stringify({ type: 'error', ...body })}\n`);
        } else res.end();
        // A reader that does not even take the end (stalled socket) is cut after a grace period.
        if (!res.writableFinished) {
          const cut = setTimeout(() => res.destroy(), WATCH_LIMITS.stalledEndGraceMs);
          cut.unref();
          res.once('finish', () => clearTimeout(cut));
          res.once('close', () => clearTimeout(cut));
        }
      },
      },
      { connection: req.connection, caller: { transport: 'http', method: 'POST /v1/watch', address: req.remoteAddress, token } },
    );
    if (gone) {
      session.close();
      return { status: 'streamed' };
    }
    // Headers go out at once, so a client sees the stream open even before the first event.
    res.writeHead(200, { 'content-type': 'application/json;stream=watch', 'cache-control': 'no-store', 'x-content-type-options': 'nosniff' });
    res.flushHeaders();
    return { status: 'streamed' };
  }, { access: 'service' });
}
