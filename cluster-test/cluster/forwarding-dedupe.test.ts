/**
 * Forwarding across leader changes applies no write twice.
 *
 * Writers talk only to one follower F, which forwards every write to the leader, while
 * leadership is moved back and forth between the two other nodes (POST
 * /v1/operator/raft/transfer-leader, itself sent to F and forwarded). A write whose answer is
 * lost in a transfer is retried, by F's coordinator and then by the client, with the same
 * Idempotency-Key.
 *
 * The workload makes a double apply visible: one Album, "ledger", whose `tracks` list is a log
 * of operations. Each operation appends its own element by read-modify-write: read the ledger
 * (linearizable), PUT tracks+[element] with `version` = the version read (compare-and-swap)
 * and Idempotency-Key `<element>#<round>`. Any answer other than 200 or 409 (no answer, 5xx)
 * repeats that same PUT with the same key. 409 CAS_FAILED means this round was not applied
 * (someone else appended first), so the operation re-reads and tries round+1 with a new key.
 * A naive client like this one re-appends after a CAS failure without looking, so if a retried
 * PUT were applied twice (or a key's earlier apply were forgotten and the retry answered
 * CAS_FAILED), the element would appear twice in the ledger. At the end the ledger is read
 * from every node: every acknowledged element exactly once, nothing else (set checker).
 */
import t from 'tap';
import { checkSet, type SetAdd } from '../checker/set-checker.js';
import { ALBUM, Cluster, describeResult, field, get, now, put, request, retryable, sleep, until, type ClusterNode, type HttpResult } from './harness.js';

const TRANSFERS = Number(process.env['DEDUPE_TRANSFERS'] ?? 20);
const WORKERS = 4;
const LEDGER = 'ledger';

t.test('writes forwarded across leadership transfers are applied exactly once', async (t) => {
  const cluster = await Cluster.start(t, { size: 3 });
  const { leader, followers } = await cluster.roles();
  const f = followers[0] as ClusterNode;
  const created = await put(leader, { type: ALBUM, name: LEDGER, key: 'ledger-create', version: '0', data: { title: 'ledger', tracks: [] } });
  t.equal(created.status, 200, `the ledger is created (${describeResult(created)})`);

  const errors = new Map<string, number>();
  const tally = (what: string, r: HttpResult): void => {
    const msg = field(field(r.body, "error"), "message");
    const k = `${what}: ${describeResult(r)}${typeof msg === "string" ? ` (${msg.replace(/[0-9]+/g, "N")})` : ""}`;
    errors.set(k, (errors.get(k) ?? 0) + 1);
  };
  const adds: SetAdd[] = [];
  let casRetries = 0;
  let sameKeyRetries = 0;
  let transfersDone = false;

  /** Reads the ledger through F until it answers: its version and tracks. */
  async function readLedger(): Promise<{ version: string; tracks: string[] }> {
    for (;;) {
      const r = await get(f, ALBUM, LEDGER, { timeoutMs: 15_000 });
      if (r.status === 200) {
        const tracks = field(field(r.body, 'data'), 'tracks');
        const version = field(r.body, 'version');
        if (!Array.isArray(tracks) || typeof version !== 'string') throw new Error(`unexpected ledger ${JSON.stringify(r.body)}`);
        return { version, tracks: tracks as string[] };
      }
      if (!retryable(r)) throw new Error(`reading the ledger through ${f.id}: ${describeResult(r)} ${JSON.stringify(r.body)}`);
      tally('read', r);
      await sleep(20);
    }
  }

  /** Appends `element` once; resolves with the outcome. */
  async function append(element: string): Promise<'ok' | 'info'> {
    const deadline = now() + 60_000;
    for (let round = 0; now() < deadline; round++) {
      const { version, tracks } = await readLedger();
      const spec = { type: ALBUM, name: LEDGER, version, key: `${element}#${round}`, data: { title: 'ledger', tracks: [...tracks, element] } };
      let r = await put(f, spec, 15_000);
      while (retryable(r) && now() < deadline) {
        tally('write', r);
        sameKeyRetries++;
        await sleep(20);
        r = await put(f, spec, 15_000);
      }
      if (r.status === 200) return 'ok';
      if (r.status === 409 && r.error === 'CAS_FAILED') {
        casRetries++;
        continue;
      }
      if (retryable(r)) break;
      throw new Error(`append ${element} round ${round}: ${describeResult(r)} ${JSON.stringify(r.body)}`);
    }
    return 'info';
  }

  const workers = Array.from({ length: WORKERS }, async (_, w) => {
    for (let i = 0; !transfersDone || i < 10; i++) {
      const element = `w${w}-${i}`;
      adds.push({ element, status: await append(element) });
    }
  });

  // Move leadership back and forth between the two nodes other than F, asking through F.
  const transfers: string[] = [];
  try {
    for (let i = 0; i < TRANSFERS; i++) {
      const current = await cluster.waitForLeader();
      const target = cluster.nodes.find((n) => n !== f && n !== current) as ClusterNode;
      const started = now();
      const r = await request(`${f.url}/v1/operator/raft/transfer-leader`, { method: 'POST', body: { id: target.id }, timeoutMs: 15_000 });
      if (r.status !== 200) {
        transfers.push(`${current.id}->${target.id} refused: ${describeResult(r)}`);
        continue;
      }
      const next = await until(`${target.id} to lead`, 15_000, async () => {
        const s = await target.self();
        return s?.role === 'leader' ? target : undefined;
      });
      transfers.push(`${current.id}->${next.id} ${Math.round(now() - started)} ms`);
      await sleep(150 + ((i * 97) % 300));
    }
  } finally {
    transfersDone = true;
  }
  await Promise.all(workers);

  const ok = adds.filter((a) => a.status === 'ok').length;
  t.comment(`leadership transfers through ${f.id}: ${transfers.join(', ')}`);
  t.comment(`${adds.length} appends by ${WORKERS} writers through ${f.id}: ${ok} acknowledged, ${adds.length - ok} unknown; ${casRetries} compare-and-swap conflicts re-read; ${sameKeyRetries} PUTs repeated with the same key after ${[...errors].map(([k, v]) => `${k} x${v}`).join(', ') || 'no error'}`);
  t.ok(transfers.filter((x) => x.includes(' ms')).length >= TRANSFERS - 1, `at least ${TRANSFERS - 1} of ${TRANSFERS} leadership transfers completed`);
  t.equal(ok, adds.length, 'every append was eventually acknowledged');

  for (const n of cluster.running()) {
    const r = await get(n, ALBUM, LEDGER);
    const tracks = field(field(r.body, 'data'), 'tracks');
    t.ok(Array.isArray(tracks), `${n.id} returns the ledger`);
    if (!Array.isArray(tracks)) continue;
    const res = checkSet(adds, tracks as string[]);
    t.ok(res.valid, `${n.id}: each of the ${res.ok} acknowledged elements appears in the ledger exactly once (duplicated: ${JSON.stringify(res.duplicated)}, lost: ${JSON.stringify(res.lost)}, unexpected: ${JSON.stringify(res.unexpected)}); ${tracks.length} elements in all`);
  }
});
