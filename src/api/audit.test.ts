import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import t, { type Test } from 'tap';
import { AUDIT_DENIED_PER_SECOND, AuditLog } from './audit.js';

/**
 * The audit log (docs/security.md "Audit log"): denied requests and admin actions as JSON
 * lines in their own file, the caller named by address and accessor id, never by secret;
 * the file rotated by size; a flood of denials summarized rather than written line by line.
 */

class ManualClock {
  ms = 0;
  monotonicMs(): number {
    return this.ms;
  }
}

const SECRET = '0123456789abcdef'.repeat(4);
const TOKEN = `cairn_ops1_${SECRET}`;

async function dir(t: Test): Promise<string> {
  const d = await mkdtemp(path.join(os.tmpdir(), 'cairn-audit-'));
  t.teardown(() => rm(d, { recursive: true, force: true }));
  return d;
}

const lines = async (file: string): Promise<Record<string, unknown>[]> =>
  (await readFile(file, 'utf8'))
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as Record<string, unknown>);

t.test('a denied request is recorded with the accessor id, never the secret; other codes are not', async (t) => {
  const file = path.join(await dir(t), 'audit.log');
  const audit = AuditLog.open({ destination: file, maxBytes: 0, nodeId: 'n1', clock: new ManualClock() });
  audit.denied({ transport: 'http', method: 'PUT /v1/resource/demo.v1.Artist/a', address: '10.0.0.7', token: TOKEN, code: 'PERMISSION_DENIED', message: `token ${TOKEN} may not write demo.v1.Artist` });
  audit.denied({ transport: 'grpc', method: '/cairn.resource.v1.ResourceService/Read', address: '10.0.0.8', token: 'opaque-secret', code: 'RATE_LIMITED', message: 'too many' });
  audit.denied({ transport: 'http', method: 'GET /x', address: '10.0.0.9', code: 'NOT_FOUND', message: 'no such endpoint' });
  audit.admin({ transport: 'http', action: 'snapshot.restore', method: 'PUT /v1/snapshot', address: '10.0.0.7', token: TOKEN, outcome: 'ok' });
  audit.close();
  const text = await readFile(file, 'utf8');
  t.notMatch(text, SECRET, 'no secret anywhere in the file');
  t.notMatch(text, 'opaque-secret');
  const got = await lines(file);
  t.equal(got.length, 3, 'NOT_FOUND is not a denial');
  t.match(got[0], { kind: 'denied', audit: true, node: 'n1', transport: 'http', method: 'PUT /v1/resource/demo.v1.Artist/a', address: '10.0.0.7', accessor: 'ops1', token: 'given', code: 'PERMISSION_DENIED', message: 'token [redacted] may not write demo.v1.Artist' });
  t.match(got[0], { time: /^\d{4}-\d\d-\d\dT/ });
  t.match(got[1], { kind: 'denied', transport: 'grpc', accessor: null, code: 'RATE_LIMITED' });
  t.match(got[2], { kind: 'admin', action: 'snapshot.restore', outcome: 'ok', accessor: 'ops1' });
});

t.test('rotation: past maxBytes the file becomes <file>.1 and a new one starts; no file grows past the cap', async (t) => {
  const file = path.join(await dir(t), 'audit.log');
  const audit = AuditLog.open({ destination: file, maxBytes: 4096, nodeId: 'n1', clock: new ManualClock() });
  for (let i = 0; i < 200; i++) audit.admin({ transport: 'http', action: 'raft.transfer-leader', method: 'POST /v1/operator/raft/transfer-leader', address: '127.0.0.1', outcome: 'ok', target: { i } });
  audit.close();
  const cur = await stat(file);
  const old = await stat(`${file}.1`);
  t.ok(cur.size <= 4096, `current ${cur.size} bytes`);
  t.ok(old.size <= 4096 && old.size > 3000, `rotated ${old.size} bytes`);
  const last = (await lines(file)).at(-1);
  t.match(last, { target: { i: 199 } }, 'the newest record is in the current file');
  // Reopening appends to the current file and keeps counting its size.
  const again = AuditLog.open({ destination: file, maxBytes: 4096, nodeId: 'n1', clock: new ManualClock() });
  for (let i = 0; i < 50; i++) again.admin({ transport: 'http', action: 'x', method: 'y', address: 'z', outcome: 'ok' });
  again.close();
  t.ok((await stat(file)).size <= 4096);
});

t.test('a flood of denials: at most AUDIT_DENIED_PER_SECOND records a second, then one count', async (t) => {
  const file = path.join(await dir(t), 'audit.log');
  const clock = new ManualClock();
  const audit = AuditLog.open({ destination: file, maxBytes: 0, nodeId: 'n1', clock });
  for (let i = 0; i < 1000; i++) audit.denied({ transport: 'http', method: 'GET /v1/resources/x', address: '10.0.0.1', code: 'RATE_LIMITED', message: 'too many' });
  clock.ms += 1000;
  audit.denied({ transport: 'http', method: 'GET /v1/resources/x', address: '10.0.0.1', code: 'RATE_LIMITED', message: 'too many' });
  audit.close();
  const got = await lines(file);
  t.equal(got.filter((l) => l['kind'] === 'denied').length, AUDIT_DENIED_PER_SECOND + 1);
  t.match(
    got.find((l) => l['kind'] === 'denied-suppressed'),
    { count: 1000 - AUDIT_DENIED_PER_SECOND },
  );
});

t.test('off records nothing', async (t) => {
  const audit = AuditLog.open({ destination: 'off', maxBytes: 0, nodeId: 'n1', clock: new ManualClock() });
  t.equal(audit.enabled, false);
  audit.denied({ transport: 'http', method: 'GET /', address: 'x', code: 'PERMISSION_DENIED', message: 'm' });
  audit.close();
});
