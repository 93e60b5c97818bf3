import { spawn } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import t from 'tap';
import { nodeId } from '../base/index.js';
import { DataDirError, LOCK_FILE, NODE_ID_FILE, openDataDir } from './data-dir.js';
import { LevelLogStore } from './level-log-store.js';
import { tempDir } from './testing/fs-faults.js';

const n1 = nodeId('n1');
const dataDirModule = pathToFileURL(path.join(path.dirname(fileURLToPath(import.meta.url)), 'data-dir.js')).href;

/** Starts another process that opens `dir` as n1 and holds it until killed. */
async function holder(dir: string): Promise<{ pid: number; kill: () => Promise<void> }> {
  const code = `import { openDataDir } from ${JSON.stringify(dataDirModule)};
await openDataDir({ path: ${JSON.stringify(dir)}, nodeId: 'n1' });
process.stdout.write('ready\\n');
setInterval(() => {}, 1000);`;
  const child = spawn(process.execPath, ['--input-type=module', '-e', code], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise<void>((resolve, reject) => {
    child.stdout.on('data', (b: Buffer) => {
      if (b.toString().includes('ready')) resolve();
    });
    child.on('exit', (c) => reject(new Error(`holder exited early with ${String(c)}`)));
  });
  const pid = child.pid;
  if (pid === undefined) throw new Error('no pid');
  return {
    pid,
    kill: () =>
      new Promise<void>((resolve) => {
        child.removeAllListeners('exit');
        child.on('exit', () => resolve());
        child.kill('SIGKILL');
      }),
  };
}

t.test('opening creates the dir, takes LOCK with our pid and stamps the node id', async (t) => {
  const { dir, remove } = await tempDir('dd');
  t.teardown(remove);
  const root = path.join(dir, 'a', 'b');
  const dd = await openDataDir({ path: root, nodeId: n1 });
  t.equal(dd.path, root);
  t.equal((await readFile(path.join(root, LOCK_FILE), 'utf8')).trim(), String(process.pid));
  t.equal((await readFile(path.join(root, NODE_ID_FILE), 'utf8')).trim(), 'n1');
  await dd.close();
  await t.rejects(readFile(path.join(root, LOCK_FILE)), { code: 'ENOENT' }, 'close releases the lock');
  await dd.close(); // idempotent
  const again = await openDataDir({ path: root, nodeId: n1 });
  await again.close();
});

t.test('a second open in the same process fails while the first holds the dir', async (t) => {
  const { dir, remove } = await tempDir('dd');
  t.teardown(remove);
  const first = await openDataDir({ path: dir, nodeId: n1 });
  await t.rejects(openDataDir({ path: dir, nodeId: n1 }), { name: 'DataDirError', problem: 'locked', message: /already open in this process/ });
  await first.close();
});

t.test('another live process holding the dir: refused with its pid; once it dies, its stale lock is taken over', async (t) => {
  const { dir, remove } = await tempDir('dd');
  t.teardown(remove);
  const other = await holder(dir);
  const err: unknown = await openDataDir({ path: dir, nodeId: n1 }).then(
    (d) => d.close(),
    (e: unknown) => e,
  );
  t.ok(err instanceof DataDirError && err.problem === 'locked', 'DataDirError locked');
  t.match((err as Error).message, new RegExp(`is locked by process ${other.pid} \\(.*LOCK\\); another agent is using it`));
  await other.kill(); // SIGKILL: no chance to clean up, the LOCK stays behind
  t.equal((await readFile(path.join(dir, LOCK_FILE), 'utf8')).trim(), String(other.pid), 'the dead holder left its LOCK');
  const dd = await openDataDir({ path: dir, nodeId: n1 });
  t.equal((await readFile(path.join(dir, LOCK_FILE), 'utf8')).trim(), String(process.pid), 'taken over');
  await dd.close();
});

t.test('a LOCK with garbage, or with our own pid left by an earlier incarnation, is stale', async (t) => {
  const { dir, remove } = await tempDir('dd');
  t.teardown(remove);
  await writeFile(path.join(dir, LOCK_FILE), '');
  const a = await openDataDir({ path: dir, nodeId: n1 });
  await a.close();
  await writeFile(path.join(dir, LOCK_FILE), `${process.pid}\n`);
  const b = await openDataDir({ path: dir, nodeId: n1 });
  await b.close();
});

t.test('a data dir owned by another node id is refused, and the lock is released', async (t) => {
  const { dir, remove } = await tempDir('dd');
  t.teardown(remove);
  await (await openDataDir({ path: dir, nodeId: n1 })).close();
  await t.rejects(openDataDir({ path: dir, nodeId: nodeId('n2') }), {
    name: 'DataDirError',
    problem: 'owned-by-another-node',
    message: /belongs to node "n1", not "n2"; refusing to start as a different node/,
  });
  const dd = await openDataDir({ path: dir, nodeId: n1 });
  await dd.close();
});

t.test("LevelDB's own lock backs the pid file up: a second log store on the same dir fails", async (t) => {
  const { dir, remove } = await tempDir('dd');
  t.teardown(remove);
  const a = await LevelLogStore.open({ dataDir: dir });
  t.teardown(() => a.close());
  await t.rejects(LevelLogStore.open({ dataDir: dir }), { name: 'StorageError', message: /open the raft log database in .* failed: .*lock/i });
});
