import t from 'tap';
import { mkdtemp, rm } from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { crc32 } from 'node:zlib';
import { monotonicFactory } from 'ulid';
import { CairnClient, isCairnClientError, type WatchEvent } from '../client/index.js';
import { createLogger } from '../platform/index.js';
import { startAgent } from './agent.js';
import { devConfig, waitUntil } from './testing/index.js';
import { SNAPSHOT_MAGIC } from '../api/index.js';
import type { Revision } from '../base/index.js';
import { Fsm } from '../fsm/index.js';
import { ResourceStore } from '../store/index.js';

/**
 * Issue 16's paging test: paging through 100,000 resources while writers run returns each
 * resource exactly once: exactly the resources that existed at the first page's revision,
 * each in its state at that revision. One dev agent in this process, through the public gRPC
 * API with the client library (`listPages`, 1,000 per page). Writers create (names that sort
 * before and after the cursor), update and delete concurrently, from before the first page
 * to after the last. The truth at the first page's revision comes from a watch that resumes
 * after the seed's revision (every change, with its revision), not from the server's
 * snapshots.
 *
 * Seeding: one operator restore (`PUT /v1/snapshot`, committed through Raft as one entry) of a
 * snapshot file holding the 100,000 resources, built here with the store's own code. Creating
 * them one by one through the API runs at about 200 writes/s on the CI machine (each commit
 * syncs the log), about 8 minutes: too slow for `make test`. The writers go through the API.
 */

const TOTAL = Number(process.env['CAIRN_PAGING_TEST_TOTAL'] ?? 100_000);
const PAGE = 1_000;
const WRITERS = 4;
const TYPE = 'demo.v1.Artist';
const NS = 'paging';

const seedName = (i: number): string => `s${String(i).padStart(6, '0')}`;

t.test(`paging through ${TOTAL} resources while ${WRITERS} writers run returns each resource of the first page's revision exactly once`, async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'cairn-paging-'));
  const cfg = devConfig(dir);
  const agent = await startAgent(cfg, { logger: createLogger({ level: 'error', nodeId: cfg.nodeId }) });
  const client = new CairnClient({ endpoints: [agent.grpcAddress], timeoutMs: 30_000 });
  t.teardown(async () => {
    client.close();
    await agent.close();
    await rm(dir, { recursive: true, force: true });
  });
  await agent.ready;
  await waitUntil(() => agent.coordinator()?.status().role === 'leader', 10_000, 'the dev node to lead');

  // Seed: the operator's restore (PUT /v1/snapshot) of a snapshot holding the resources.
  const seedStart = Date.now();
  const seeded = new ResourceStore();
  const nextUid = monotonicFactory();
  const time = new Date().toISOString();
  for (let i = 0; i < TOTAL; i++) {
    // Every seed resource at revision 1: the restore puts the store at its own (later) log index.
    const r = seeded.write(
      { id: { type: { group: 'demo', groupVersion: 'v1', kind: 'Artist' }, tenancy: { partition: 'default', namespace: NS }, name: seedName(i) }, data: { name: `seed ${i}`, genre: 'unknown' } },
      { revision: 1 as Revision, time, newUid: nextUid(), newGeneration: nextUid() },
    );
    if (!r.ok) throw r.error;
  }
  // The file `cairn snapshot save` writes: magic, the FSM's snapshot frames, crc32.
  const fsm = new Fsm();
  fsm.store = seeded;
  const frames = Buffer.concat([...fsm.snapshot().chunks()]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(frames) >>> 0);
  const body = Buffer.concat([SNAPSHOT_MAGIC, frames, crc]);
  const restored = await fetch(`http://${agent.httpAddress}/v1/snapshot`, { method: 'PUT', headers: { 'content-type': 'application/octet-stream' }, body });
  const restoredJson = (await restored.json()) as { revision?: string; resources?: number };
  t.equal(restored.status, 200, `the restore is accepted: ${JSON.stringify(restoredJson)}`);
  t.equal(restoredJson.resources, TOTAL);
  const seedRevision = Number(restoredJson.revision);
  const seedMs = Date.now() - seedStart;
  t.comment(`seeded ${TOTAL} resources (${body.length} bytes) by a restore in ${seedMs} ms, at revision ${seedRevision}`);

  // Every change after the seed, with its revision: the independent truth.
  const events: Array<{ type: 'change' | 'delete'; name: string; revision: number; version: string }> = [];
  let watched = 0;
  const watch = client.watch({ type: TYPE, namespace: NS, gtRevision: String(seedRevision) });
  const watching = (async () => {
    for await (const ev of watch as AsyncIterable<WatchEvent>) {
      if (ev.type === 'change' || ev.type === 'delete') {
        events.push({ type: ev.type, name: ev.resource.id.name, revision: Number(ev.revision), version: ev.resource.version });
        watched = Math.max(watched, Number(ev.revision));
      } else if (ev.type === 'bookmark' || ev.type === 'tail') {
        watched = Math.max(watched, Number(ev.revision));
      } else if (ev.type === 'reset') {
        throw new Error(`the truth watch was reset (${ev.reason}): ${ev.message}`);
      }
    }
  })();

  // Writers: creates that sort before the cursor (a-) and after it (z-), updates and deletes of seeded resources.
  let stop = false;
  let ops = 0;
  const writers = Array.from({ length: WRITERS }, async (_, k) => {
    for (let i = 0; !stop; i++) {
      const target = seedName((k + WRITERS * i * 7919) % TOTAL);
      switch (i % 4) {
        case 0:
          await client.write({ type: TYPE, tenancy: { namespace: NS }, name: `a${k}-${i}` }, { data: { name: 'created before the cursor' } });
          break;
        case 1:
          await client.write({ type: TYPE, tenancy: { namespace: NS }, name: `z${k}-${i}` }, { data: { name: 'created after the cursor' } });
          break;
        case 2:
          await client.write({ type: TYPE, tenancy: { namespace: NS }, name: target }, { data: { name: `updated by ${k} at ${i}` } });
          break;
        default:
          await client.delete({ type: TYPE, tenancy: { namespace: NS }, name: seedName((k * 31 + i * 613) % TOTAL) });
      }
      ops++;
    }
  });
  await waitUntil(() => ops >= 50, 20_000, 'the writers to get going');

  // Page through.
  const pageStart = Date.now();
  const seen = new Map<string, string>();
  let duplicates = 0;
  let pages = 0;
  let revision = '';
  const opsAtFirstPage = { value: 0 };
  for await (const page of client.listPages(TYPE, { namespace: NS, limit: PAGE })) {
    if (pages === 0) {
      revision = page.revision;
      opsAtFirstPage.value = ops;
    }
    if (page.revision !== revision) t.fail(`page ${pages} answered revision ${page.revision}, not ${revision}`);
    if (page.resources.length > PAGE) t.fail(`page ${pages} holds ${page.resources.length} resources`);
    for (const r of page.resources) {
      if (seen.has(r.id.name)) duplicates++;
      seen.set(r.id.name, r.version);
    }
    pages++;
  }
  const pageMs = Date.now() - pageStart;
  const opsDuringPaging = ops - opsAtFirstPage.value;
  stop = true;
  await Promise.all(writers);
  t.comment(`read ${seen.size} resources in ${pages} pages in ${pageMs} ms at revision ${revision}; the writers made ${opsDuringPaging} changes meanwhile (${ops} in all)`);
  t.ok(opsDuringPaging > 20, `writers ran while the pages were read (${opsDuringPaging} changes)`);

  // The truth at the first page's revision: the seed, then every watched change up to it.
  const rev = Number(revision);
  await waitUntil(() => watched >= rev, 20_000, `the truth watch to reach revision ${rev}`);
  watch.close();
  await watching.catch((e: unknown) => {
    if (!isCairnClientError(e)) throw e;
  });
  const truth = new Map<string, string>();
  for (let i = 0; i < TOTAL; i++) truth.set(seedName(i), '');
  let changesBefore = 0;
  for (const ev of events) {
    if (ev.revision > rev) continue;
    changesBefore++;
    if (ev.type === 'delete') truth.delete(ev.name);
    else truth.set(ev.name, ev.version);
  }
  t.ok(changesBefore > 20, `writers changed things before the first page too (${changesBefore} changes)`);
  t.ok(events.some((e) => e.revision > rev), 'and after it');

  t.equal(duplicates, 0, 'no resource was returned twice');
  const missing = [...truth.keys()].filter((n) => !seen.has(n));
  const extra = [...seen.keys()].filter((n) => !truth.has(n));
  t.same(missing.slice(0, 10), [], `no resource of revision ${rev} is missing (${missing.length} missing)`);
  t.same(extra.slice(0, 10), [], `no resource outside revision ${rev} is returned (${extra.length} extra)`);
  const wrongVersion = [...truth].filter(([n, v]) => v !== '' && seen.get(n) !== v);
  t.same(wrongVersion.slice(0, 10), [], 'each changed resource is returned in its state at that revision');
  t.ok([...seen.values()].every((v) => Number(v) <= rev), 'no returned state is newer than the revision');
  t.equal(seen.size, truth.size, `exactly the ${truth.size} resources of revision ${rev}`);
});
