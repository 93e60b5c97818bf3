// `cairn txn -f FILE` against a real dev agent started in this process (demo types, free
// ports), through runCli with an in-memory io: YAML and JSON files, both branches, an op that
// fails (exit 4, nothing applied), and files the parser refuses before anything is sent.
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import type { AgentDeps } from './agent.js';
import { ExitCode } from './errors.js';
import { runCli } from './program.js';
import { parseTxnDocument } from './txn.js';
import { memoryIo, startCliTestAgent } from './testing.js';

const noAgent = (): Promise<AgentDeps> => Promise.reject(new Error('no agent in this test'));
const { agent, dir } = await startCliTestAgent(t, 'cairn-cli-txn-');

async function cairn(args: readonly string[]): Promise<{ code: number; out: string; err: string }> {
  const io = memoryIo({}, dir);
  const code = await runCli([...args, '--endpoint', agent.grpcAddress], io, noAgent);
  return { code, out: io.out(), err: io.err() };
}

let files = 0;
async function file(text: string, ext = 'yaml'): Promise<string> {
  const p = path.join(dir, `txn-${++files}.${ext}`);
  await writeFile(p, text);
  return p;
}

const names = async (): Promise<string[]> => {
  const c = agent.coordinator();
  if (c === undefined) throw new Error('not running');
  return (await c.read('linearizable', (s) => [...s.all()].map((r) => `${r.id.name}@${r.version}`))).value;
};

t.test('a YAML transaction: the then branch, one revision; again: the else branch', async (t) => {
  const doc = `
compare:
  - {target: absent, type: demo.v1.Artist, name: korn}
then:
  - {op: write, type: demo.v1.Artist, name: korn, data: {name: Korn}, metadata: {team: a}}
  - {op: write, type: demo.v1.Artist, name: tool, data: {name: Tool}, version: 0}
else:
  - {op: delete, type: demo.v1.Artist, name: tool}
`;
  const f = await file(doc);
  const first = await cairn(['txn', '-f', f]);
  t.equal(first.code, 0, first.err);
  const rev = /applied at revision (\d+)/.exec(first.out)?.[1];
  // Each op's line names its resource (uid, version, generation): results carry no bodies.
  t.match(
    first.out,
    /^succeeded: every comparison held; the then branch applied at revision (\d+)\n  0: write demo\.v1\.Artist default\/default\/korn \(uid [0-9A-Z]{26}\): version \1, generation [0-9A-Z]{26}\n  1: write demo\.v1\.Artist default\/default\/tool \(uid [0-9A-Z]{26}\): version \1, generation [0-9A-Z]{26}\n$/,
  );
  t.same(await names(), [`korn@${rev}`, `tool@${rev}`], 'both at one revision');
  const second = await cairn(['txn', '-f', f, '--json']);
  t.equal(second.code, 0, second.err);
  const r = JSON.parse(second.out) as { succeeded: boolean; failedComparison: number; results: Array<{ op: string; deleted: boolean }> };
  t.same([r.succeeded, r.failedComparison, r.results.map((x) => [x.op, x.deleted])], [false, 0, [['delete', true]]]);
  t.same(await names(), [`korn@${rev}`]);
});

t.test('a JSON transaction whose second op fails: exit 4 (CONFLICT), the op named, nothing applied', async (t) => {
  const before = await names();
  const f = await file(JSON.stringify({ then: [{ op: 'write', type: 'demo.v1.Artist', name: 'new', data: { name: 'n' } }, { op: 'delete', type: 'demo.v1.Artist', name: 'korn', version: '1' }] }), 'json');
  const r = await cairn(['txn', '-f', f]);
  t.equal(r.code, ExitCode.CONFLICT, r.err);
  t.match(r.err, /CAS_FAILED|then\[1\]/);
  t.same(await names(), before);
});

t.test('files refused before anything is sent (exit 2), and server refusals (exit 6)', async (t) => {
  const before = await names();
  const bad: Array<[string, string, RegExp]> = [
    ['an unknown top-level field', 'then: []\nwhen: []\n', /unknown field 'when'/],
    ['an unknown field in an op', 'then:\n  - {op: delete, type: demo.v1.Artist, name: korn, ttl: 3}\n', /unknown field 'ttl' in .*then\[0\]/],
    ['an unknown op', 'then:\n  - {op: rename, type: demo.v1.Artist, name: korn}\n', /then\[0\]\.op must be write, delete or status/],
    ['an unknown target', 'compare:\n  - {target: newer, type: demo.v1.Artist, name: korn}\n', /compare\[0\]\.target must be/],
    ['a bad version', 'compare:\n  - {target: version, type: demo.v1.Artist, name: korn, version: -1}\n', /must be a version/],
    ['not YAML', 'then: [\n', /is not valid YAML/],
    ['a status write without uid', 'then:\n  - {op: status, type: demo.v1.Artist, name: korn, key: k}\n', /uid is required/],
  ];
  for (const [what, text, msg] of bad) {
    const r = await cairn(['txn', '-f', await file(text)]);
    t.equal(r.code, ExitCode.USAGE, `${what}: exit 2 (${r.err})`);
    t.match(r.err, msg, `${what}: says why`);
  }
  const dup = await cairn(['txn', '-f', await file('then:\n  - {op: delete, type: demo.v1.Artist, name: korn}\n  - {op: delete, type: demo.v1.Artist, name: korn}\n')]);
  t.equal(dup.code, ExitCode.INVALID, `a name twice: the server refuses it (${dup.err})`);
  t.match(dup.err, /then\[1\]/);
  const missing = await cairn(['txn', '-f', path.join(dir, 'no-such.yaml')]);
  t.equal(missing.code, ExitCode.USAGE);
  t.match(missing.err, /cannot read/);
  t.equal((await cairn(['txn'])).code, ExitCode.USAGE, '-f is required');
  t.same(await names(), before, 'nothing changed');
});

t.test('parseTxnDocument: versions as numbers or strings, tenancy, status ops', async (t) => {
  const spec = parseTxnDocument(
    'compare:\n  - {target: version, type: demo.v1.Artist, namespace: x, name: a, version: 7}\n  - {target: uid, type: demo.v1.Artist, name: b, uid: U1}\nthen:\n  - {op: status, type: demo.v1.Artist, name: b, uid: U1, key: demo.v1.c, observed_generation: g, conditions: [{type: Ready, state: "TRUE"}]}\n',
    'f',
  );
  t.same(spec.compare, [
    { target: 'version', ref: { type: 'demo.v1.Artist', name: 'a', tenancy: { namespace: 'x' } }, version: '7' },
    { target: 'uid', ref: { type: 'demo.v1.Artist', name: 'b', tenancy: {} }, uid: 'U1' },
  ]);
  t.same(spec.then, [{ op: 'status', ref: { type: 'demo.v1.Artist', name: 'b', tenancy: {}, uid: 'U1' }, key: 'demo.v1.c', body: { observed_generation: 'g', conditions: [{ type: 'Ready', state: 'TRUE', reason: '', message: '' }] } }]);
  t.same(spec.else, []);
});

t.test('a runaway list is refused before anything is built or spread into a call (RangeError near 100,000 items)', async (t) => {
  const huge = Array.from({ length: 150_000 }, () => ({ target: 'exists', type: 'demo.v1.Artist', name: 'a' }));
  t.throws(() => parseTxnDocument(JSON.stringify({ compare: huge }), 'big.json'), { message: /^big\.json: compare has 150000 items; at most 10000 are sent/ });
  const ops = Array.from({ length: 10_001 }, (_, i) => ({ op: 'delete', type: 'demo.v1.Artist', name: `n${i}` }));
  t.throws(() => parseTxnDocument(JSON.stringify({ else: ops }), 'big.json'), { message: /^big\.json: else has 10001 items/ });
});
