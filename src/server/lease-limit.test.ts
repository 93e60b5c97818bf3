/**
 * `--lease-max-attached` through a running dev node (docs/api.md "Leases", review finding 7):
 * the node stamps its limit into every write that attaches, the state machine refuses the one
 * that would attach one more (TOO_LARGE, 413), and a leader lowers a forwarded command's limit
 * to its own (or sets it when a follower of an older version sent none).
 */
import t from 'tap';
import { mkdtemp, rm } from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { CommandType, type PutCommand, type TxnCommand } from '../fsm/index.js';
import { createLogger } from '../platform/index.js';
import { startAgent } from './agent.js';
import { devConfig, waitUntil } from './testing/index.js';

const ARTIST = 'demo.v1.Artist';
/** The node's quota, stamped into the forwarded commands below so only the attachment limit is clamped. */
const QUOTA = 64 * 1024 * 1024;

t.test('a dev node with --lease-max-attached 2: the third attachment is TOO_LARGE (PUT, CAS, transaction); re-attaching and detaching are not', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'cairn-lease-limit-'));
  const agent = await startAgent(devConfig(dir, { demoTypes: true, leaseMaxAttached: 2, quotaBytes: QUOTA }), { logger: createLogger({ level: 'silent', nodeId: 'dev' }) });
  t.teardown(async () => {
    await agent.close();
    await rm(dir, { recursive: true, force: true });
  });
  await agent.ready;
  await waitUntil(() => agent.coordinator()?.status().role === 'leader', 10_000, 'the dev node to lead');
  const http = async (method: string, p: string, body?: unknown): Promise<{ status: number; json: Record<string, unknown> }> => {
    const res = await fetch(`http://${agent.httpAddress}${p}`, { method, ...(body !== undefined ? { body: JSON.stringify(body), headers: { 'content-type': 'application/json' } } : {}) });
    const text = await res.text();
    return { status: res.status, json: (text === '' ? {} : JSON.parse(text)) as Record<string, unknown> };
  };
  const errorOf = (r: { json: Record<string, unknown> }): Record<string, unknown> => (r.json['error'] ?? {}) as Record<string, unknown>;

  t.equal((await http('POST', '/v1/leases', { ttl_seconds: 600, id: 'svc' })).status, 200);
  t.equal((await http('PUT', `/v1/resource/${ARTIST}/a`, { data: { name: 'a' }, lease: 'svc' })).status, 200);
  t.equal((await http('PUT', `/v1/resource/${ARTIST}/b`, { data: { name: 'b' }, lease: 'svc', version: '0' })).status, 200);
  const third = await http('PUT', `/v1/resource/${ARTIST}/c`, { data: { name: 'c' }, lease: 'svc' });
  t.equal(third.status, 413, 'the third attachment is refused');
  t.equal(errorOf(third)['code'], 'TOO_LARGE');
  t.match(errorOf(third)['message'], /lease svc has 2 resources attached, the most --lease-max-attached \(2\) allows/);
  t.equal((await http('PUT', `/v1/resource/${ARTIST}/c`, { data: { name: 'c' }, lease: 'svc', version: '0' })).status, 413, 'a compare-and-swap too');
  const txn = await http('POST', '/v1/txn', { then: [{ op: 'write', type: ARTIST, name: 'd', data: { name: 'd' } }, { op: 'write', type: ARTIST, name: 'c', data: { name: 'c' }, lease: 'svc' }] });
  t.equal(txn.status, 413, 'a transaction attaching a third');
  t.equal((await http('GET', `/v1/resource/${ARTIST}/d`)).status, 404, 'the transaction applied nothing');
  t.equal((await http('GET', `/v1/resource/${ARTIST}/c`)).status, 404, 'c was never written');
  t.equal((await http('PUT', `/v1/resource/${ARTIST}/a`, { data: { name: 'a2' }, lease: 'svc' })).status, 200, 're-attaching a is not one more');
  t.equal((await http('PUT', `/v1/resource/${ARTIST}/b`, { data: { name: 'b' }, lease: '' })).status, 200, 'detaching b');
  t.equal((await http('PUT', `/v1/resource/${ARTIST}/c`, { data: { name: 'c' }, lease: 'svc' })).status, 200, 'then c fits');
  const revoked = await http('DELETE', '/v1/leases/svc');
  t.equal(revoked.json['deleted'], 2);

  // A forwarded command (checkCommand): the leader's limit replaces a larger one or none; a smaller one stays.
  const c = agent.coordinator();
  if (c === undefined) throw new Error('not running');
  const head = { time: new Date(0).toISOString(), uid: 'u-fwd', generation: 'g-fwd', quotaBytes: QUOTA };
  const put = (extra: Partial<PutCommand>): PutCommand => ({ ...head, id: { type: { group: 'demo', groupVersion: 'v1', kind: 'Artist' }, tenancy: { partition: 'default', namespace: 'default' }, name: 'f' }, data: { name: 'f' }, ...extra });
  const checked = async (cmd: PutCommand): Promise<unknown> => (await c.read('stale', (s) => agent.resources.checkCommand({ type: CommandType.ResourcePut, kind: 'put', cmd }, s))).value?.body;
  t.match(await checked(put({ lease: 'svc' })), { leaseMaxAttached: 2 }, 'none (an older follower): the leader\'s');
  t.match(await checked(put({ lease: 'svc', leaseMaxAttached: 50_000 })), { leaseMaxAttached: 2 }, 'a larger one: the leader\'s');
  t.equal(await checked(put({ lease: 'svc', leaseMaxAttached: 1 })), undefined, 'a smaller one stays');
  t.equal(await checked(put({ lease: '' })), undefined, 'detaching: nothing to stamp');
  const tx: TxnCommand = { ...head, compare: [], then: [{ op: 'write', id: put({}).id, data: { name: 'f' }, lease: 'svc' }], else: [], thenUids: ['01ARZ3NDEKTSV4RRFFQ69G5FAV'], elseUids: [] };
  const txChecked = (await c.read('stale', (s) => agent.resources.checkCommand({ type: CommandType.Txn, kind: 'txn', cmd: tx }, s))).value?.body;
  t.match(txChecked, { leaseMaxAttached: 2 }, 'a forwarded transaction that attaches: the leader\'s');
});
