// `cairn resource ...` against a real dev agent started in this process (demo types, free
// ports): the commands run through runCli with an in-memory io, and a few through the `cairn`
// executable in a child process (standard input, connection refused). Exit codes and messages
// are the contract (README.md "Exit codes").
import * as grpc from '@grpc/grpc-js';
import { spawn } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t, { type Test } from 'tap';
import type { AgentDeps } from './agent.js';
import { ExitCode } from './errors.js';
import { runCli } from './program.js';
import {
  buildWriteBody,
  displayName,
  formatList,
  parseBodyDocument,
  parseCondition,
  parseGrpcEndpoints,
  parseOwner,
  parseVersionArg,
  shortGeneration,
} from './resource.js';
import { closedPort, memoryIo, startCliTestAgent } from './testing.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const BIN = path.join(ROOT, 'bin', 'cairn');
const noAgent = (): Promise<AgentDeps> => Promise.reject(new Error('no agent in this test'));

interface Run {
  readonly code: number | null;
  readonly out: string;
  readonly err: string;
}

const { agent, dir } = await startCliTestAgent(t, 'cairn-cli-resource-');

/** `cairn <args> --endpoint <the agent>` in this process. */
async function cairn(args: readonly string[], env: Record<string, string> = {}, endpoint: string | null = agent.grpcAddress): Promise<Run> {
  const io = memoryIo(env, dir);
  const code = await runCli([...args, ...(endpoint === null ? [] : ['--endpoint', endpoint])], io, noAgent);
  return { code, out: io.out(), err: io.err() };
}

/** A command's --json output, parsed; fails the test if the command failed. */
async function json(t: Test, args: readonly string[]): Promise<Record<string, unknown>> {
  const r = await cairn([...args, '--json']);
  t.equal(r.code, 0, `${args.join(' ')}: ${r.err}`);
  return JSON.parse(r.out) as Record<string, unknown>;
}

type Json = Record<string, unknown>;
const resourceOf = (v: unknown): Json => v as Json;
const idOf = (r: Json): Json => r['id'] as Json;

/**
 * Runs `node bin/cairn` as a user would (see cli.test.ts): no CAIRN_* variables but `env`, and
 * without tap's NODE_OPTIONS (its loader hooks cannot load the extensionless ESM bin/cairn).
 */
function spawnCairn(args: readonly string[], opts: { env?: Record<string, string>; stdin?: string } = {}): Promise<Run> {
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('CAIRN_')));
  const child = spawn('env', ['-u', 'NODE_OPTIONS', process.execPath, BIN, ...args], {
    env: { ...base, ...opts.env },
    cwd: dir,
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout.on('data', (b: Buffer) => (out += b.toString()));
  child.stderr.on('data', (b: Buffer) => (err += b.toString()));
  child.stdin.end(opts.stdin ?? '');
  return new Promise((resolve) => child.on('close', (code) => resolve({ code, out, err })));
}

t.test('write from --data creates; --version 0 again is a CAS conflict, exit 4, with a hint', async (t) => {
  const created = await cairn(['resource', 'write', 'demo.v1.Artist', 'korn', '--data', '{"name":"Korn"}', '--metadata', 'team=a', '--version', '0']);
  t.equal(created.code, 0, created.err);
  t.match(created.out, /^demo\.v1\.Artist default\/default\/korn written: version \d+, generation [0-9A-Z]{26}, uid [0-9A-Z]{26}\n$/);
  const { resource } = await json(t, ['resource', 'read', 'demo.v1.Artist', 'korn']);
  const r = resourceOf(resource);
  t.same(r['data'], { name: 'Korn', genre: 'unknown' }, 'the mutate hook filled the default genre');
  t.same(r['metadata'], { team: 'a' });

  const again = await cairn(['resource', 'write', 'demo.v1.Artist', 'korn', '--data', '{"name":"Korn"}', '--version', '0']);
  t.equal(again.code, ExitCode.CONFLICT);
  t.equal(again.out, '');
  t.match(
    again.err,
    new RegExp(
      `^cairn: CAS_FAILED: write demo\\.v1\\.Artist default/default/korn: expected version 0 but the stored version is ${r['version']} \\(127\\.0\\.0\\.1:\\d+\\); it already exists \\(version ${r['version']}\\): leave out --version to replace it, or pass --version ${r['version']}\\n$`,
    ),
  );

  const cas = await cairn(['resource', 'write', 'demo.v1.Artist', 'korn', '--data', '{"name":"Korn","genre":"metal"}', '--version', String(r['version'])]);
  t.equal(cas.code, 0, cas.err);
  const stale = await cairn(['resource', 'write', 'demo.v1.Artist', 'korn', '--data', '{"name":"Korn"}', '--version', String(r['version'])]);
  t.equal(stale.code, ExitCode.CONFLICT, 'the version read before the last write is stale');
  t.match(stale.err, /^cairn: CAS_FAILED: .*expected version \d+ but the stored version is \d+ .*; it changed since that version: read it again and retry with its current version\n$/);
  const absent = await cairn(['resource', 'write', 'demo.v1.Artist', 'nobody', '--data', '{"name":"N"}', '--version', '5']);
  t.equal(absent.code, ExitCode.CONFLICT);
  t.match(absent.err, /does not exist \(.*\); it does not exist: --version 0 creates it\n$/);

  const unchanged = await cairn(['resource', 'write', 'demo.v1.Artist', 'korn', '--data', '{"name":"Korn","genre":"metal"}']);
  t.equal(unchanged.code, 0, 'an unconditional write of the same content');
  const now = resourceOf((await json(t, ['resource', 'read', 'demo.v1.Artist', 'korn']))['resource']);
  t.same(now['metadata'], { team: 'a' }, 'metadata left out is kept');
  const same = await cairn(['resource', 'write', 'demo.v1.Artist', 'korn', '--data', '{"name":"Korn","genre":"metal"}', '--version', String(now['version'])]);
  t.equal(same.out, `demo.v1.Artist default/default/korn unchanged: the write changed nothing (version ${now['version']})\n`);
});

t.test('write from a YAML file and from standard input; the flags override the file', async (t) => {
  const file = path.join(dir, 'label.yaml');
  await writeFile(
    file,
    ['# a record label', 'data:', '  name: Acme', 'metadata:', '  tier: "1"', 'finalizers:', '  - cleanup.example.com/files', 'version: 0', ''].join('\n'),
  );
  const w = await cairn(['resource', 'write', 'demo.v1.RecordLabel', 'acme', '--partition', 'p1', '-f', 'label.yaml', '--metadata', 'region=eu']);
  t.equal(w.code, 0, w.err);
  t.match(w.out, /^demo\.v1\.RecordLabel p1\/acme written: /, 'a partition-scoped name has no namespace');
  const r = resourceOf((await json(t, ['resource', 'read', 'demo.v1.RecordLabel', 'acme', '--partition', 'p1']))['resource']);
  t.same(r['data'], { name: 'Acme' });
  t.same(r['metadata'], { tier: '1', region: 'eu' }, '--metadata adds to the file');
  t.same(r['finalizers'], ['cleanup.example.com/files']);

  const over = await cairn(['resource', 'write', 'demo.v1.RecordLabel', 'acme', '--partition', 'p1', '-f', file, '--data', '{"name":"Acme Records"}', '--version', String(r['version'])]);
  t.equal(over.code, 0, `--data and --version replace the file's: ${over.err}`);

  const piped = await spawnCairn(['resource', 'write', 'demo.v1.Executive', 'bob', '-f', '-', '--endpoint', agent.grpcAddress], {
    stdin: '{"data": {"name": "Bob", "position": "CEO"}, "metadata": {"x": "y"}}',
  });
  t.equal(piped.code, 0, piped.err);
  t.match(piped.out, /^demo\.v1\.Executive bob written: /, 'a cluster-scoped name is the name alone');
  const read = await spawnCairn(['resource', 'read', 'demo.v1.Executive', 'bob'], { env: { CAIRN_GRPC_ADDR: agent.grpcAddress } });
  t.equal(read.code, 0, `CAIRN_GRPC_ADDR supplies the endpoint: ${read.err}`);
  t.match(read.out, /^type: +demo\.v1\.Executive\nname: +bob\n/);
});

t.test('read: fields, data and --stale freshness; --json; --uid; errors', async (t) => {
  const w = await json(t, ['resource', 'write', 'demo.v2.Artist', 'tool', '-n', 'prog', '--data', '{"name":"Tool","members":4}']);
  const id = idOf(w);
  const table = await cairn(['resource', 'read', 'demo.v2.Artist', 'tool', '-n', 'prog']);
  t.equal(table.code, 0, table.err);
  t.equal(
    table.out,
    [
      'type:        demo.v2.Artist',
      'partition:   default',
      'namespace:   prog',
      'name:        tool',
      `uid:         ${id['uid']}`,
      `version:     ${w['version']}`,
      `generation:  ${w['generation']}`,
      'owner:       -',
      'metadata:    -',
      'finalizers:  -',
      'data:',
      '  {',
      '    "genre": "unknown",',
      '    "members": 4,',
      '    "name": "Tool"',
      '  }',
      '',
    ].join('\n'),
  );
  const stale = await cairn(['resource', 'read', 'demo.v2.Artist', 'tool', '-n', 'prog', '--stale']);
  t.match(stale.out, /\nrevision: +\d+\nleader contact: +0 ms ago \(this node leads\)\ndata:\n/, 'a stale read says how fresh it is');
  const j = await json(t, ['resource', 'read', 'demo.v2.Artist', 'tool', '-n', 'prog', '--stale']);
  t.same(Object.keys(j), ['resource', 'revision', 'last_leader_contact_ms']);
  t.same(j['resource'], w);
  t.match(j['revision'], /^\d+$/);
  t.equal(j['last_leader_contact_ms'], 0);

  t.equal((await cairn(['resource', 'read', 'demo.v2.Artist', 'tool', '-n', 'prog', '--uid', String(id['uid'])])).code, 0);
  const other = await cairn(['resource', 'read', 'demo.v2.Artist', 'tool', '-n', 'prog', '--uid', '01ARZ3NDEKTSV4RRFFQ69G5FAV']);
  t.equal(other.code, ExitCode.NOT_FOUND, 'another incarnation is not found');
  const missing = await cairn(['resource', 'read', 'demo.v2.Artist', 'nope', '-n', 'prog']);
  t.equal(missing.code, ExitCode.NOT_FOUND);
  t.match(missing.err, /^cairn: NOT_FOUND: read demo\.v2\.Artist default\/prog\/nope: no such resource \(127\.0\.0\.1:\d+\)\n$/);
  const gv = await cairn(['resource', 'read', 'demo.v1.Artist', 'tool', '-n', 'prog']);
  t.equal(gv.code, ExitCode.INVALID);
  t.match(gv.err, /^cairn: GROUP_VERSION_MISMATCH: .*stored as demo\.v2\.Artist .*; use demo\.v2\.Artist\n$/);
});

t.test('list: table with the revision, wildcards, every version, prefix, owner, --json', async (t) => {
  for (const [ns, name] of [
    ['east', 'abba'],
    ['east', 'clash'],
    ['west', 'blur'],
  ] as const) {
    const r = await cairn(['resource', 'write', 'demo.v1.Artist', name, '-n', ns, '--data', JSON.stringify({ name })]);
    t.equal(r.code, 0, r.err);
  }
  t.equal((await cairn(['resource', 'write', 'demo.v2.Artist', 'cure', '-n', 'west', '--data', '{"name":"cure","members":5}'])).code, 0);

  const east = await cairn(['resource', 'list', 'demo.v1.Artist', '-n', 'east']);
  t.equal(east.code, 0, east.err);
  const lines = east.out.split('\n');
  t.equal(lines[0], 'TYPE             PARTITION   NAMESPACE   NAME    VERSION   GENERATION');
  t.match(lines[1], /^demo\.v1\.Artist +default +east +abba +\d+ +[0-9A-Z]{8}$/);
  t.match(lines[2], /^demo\.v1\.Artist +default +east +clash +\d+ +[0-9A-Z]{8}$/);
  t.match(lines[3], /^2 resources at revision \d+$/);

  const all = await json(t, ['resource', 'list', 'demo.Artist', '-n', '*', '--prefix', 'c']);
  const names = (all['resources'] as Json[]).map((r) => `${String(idOf(r)['type'])} ${String((idOf(r)['tenancy'] as Json)['namespace'])}/${String(idOf(r)['name'])}`);
  t.same(names, ['demo.v1.Artist east/clash', 'demo.v2.Artist west/cure'], 'demo.Artist lists every version; * any namespace; sorted by namespace and name');
  t.match(all['revision'], /^\d+$/);
  t.equal(all['last_leader_contact_ms'], 0);

  const paged = await json(t, ['resource', 'list', 'demo.Artist', '-n', '*', '--limit', '1']);
  const whole = await json(t, ['resource', 'list', 'demo.Artist', '-n', '*']);
  const ids = (j: Json): string[] => (j['resources'] as Json[]).map((r) => `${String((idOf(r)['tenancy'] as Json)['namespace'])}/${String(idOf(r)['name'])}`);
  t.ok(ids(whole).length >= 4);
  t.same(ids(paged), ids(whole), '--limit 1 reads one resource per request and still lists them all, in order');
  t.equal(paged['revision'], whole['revision'], 'at one revision');
  const badLimit = await cairn(['resource', 'list', 'demo.v1.Artist', '--limit', '0']);
  t.equal(badLimit.code, ExitCode.USAGE, '--limit must be positive');
  const partitions = await cairn(['resource', 'list', 'demo.v1.Artist', '--partition', '*', '--namespace', '*', '--prefix', 'b']);
  t.match(partitions.out, /default +west +blur/);
  const stale = await cairn(['resource', 'list', 'demo.v1.Artist', '-n', 'nowhere', '--stale']);
  t.match(stale.out, /^no resources at revision \d+; this node's last leader contact: 0 ms ago \(this node leads\)\n$/);

  // Ownership: a partition-scoped owner (TYPE/PARTITION//NAME/UID), children listed by owner uid, and a cascading delete.
  const label = await json(t, ['resource', 'write', 'demo.v1.RecordLabel', 'emi', '--partition', 'p2', '--data', '{"name":"EMI"}']);
  const uid = String(idOf(label)['uid']);
  const child = await cairn(['resource', 'write', 'demo.v1.Album', 'help', '-n', 'west', '--data', '{"title":"Help!"}', '--owner', `demo.v1.RecordLabel/p2//emi/${uid}`]);
  t.equal(child.code, 0, child.err);
  const owned = await json(t, ['resource', 'list', 'demo.v1.Album', '-n', '*', '--owner-uid', uid]);
  t.same((owned['resources'] as Json[]).map((r) => [idOf(r)['name'], (r['owner'] as Json)['uid']]), [['help', uid]]);
  const gone = await cairn(['resource', 'delete', 'demo.v1.RecordLabel', 'emi', '--partition', 'p2']);
  t.equal(gone.out, `demo.v1.RecordLabel p2/emi deleted (uid ${uid}), with everything it owned\n`);
  t.same((await json(t, ['resource', 'list', 'demo.v1.Album', '-n', '*', '--owner-uid', uid]))['resources'], [], 'the child went with its owner');
});

t.test('delete: by version, absent, held back by finalizers until the last is removed', async (t) => {
  const w = await json(t, ['resource', 'write', 'demo.v1.Album', 'kid-a', '--data', '{"title":"Kid A"}', '--finalizer', 'example.com/backup']);
  const v = String(w['version']);
  const wrong = await cairn(['resource', 'delete', 'demo.v1.Album', 'kid-a', '--version', String(Number(v) - 1)]);
  t.equal(wrong.code, ExitCode.CONFLICT);
  t.match(wrong.err, /^cairn: CAS_FAILED: delete demo\.v1\.Album default\/default\/kid-a: expected version/);

  const marked = await cairn(['resource', 'delete', 'demo.v1.Album', 'kid-a', '--version', v]);
  t.equal(marked.code, 0, marked.err);
  t.match(marked.out, /^demo\.v1\.Album default\/default\/kid-a is marked for deletion \(since \S+, version \d+\); it goes once these finalizers are removed: example\.com\/backup\n$/);
  const r = resourceOf((await json(t, ['resource', 'read', 'demo.v1.Album', 'kid-a']))['resource']);
  t.not(r['deletion_timestamp'], null);
  t.not(r['generation'], w['generation'], 'marking for deletion is a new generation (src/store/README.md)');

  const file = path.join(dir, 'unfinalize.json');
  await writeFile(file, JSON.stringify({ data: r['data'], finalizers: [] }));
  const last = await cairn(['resource', 'write', 'demo.v1.Album', 'kid-a', '-f', file]);
  t.equal(last.code, 0, last.err);
  t.match(last.out, /^demo\.v1\.Album default\/default\/kid-a deleted: its last finalizer was removed \(version \d+\)\n$/);
  t.equal((await cairn(['resource', 'read', 'demo.v1.Album', 'kid-a'])).code, ExitCode.NOT_FOUND);

  const absent = await cairn(['resource', 'delete', 'demo.v1.Album', 'kid-a']);
  t.equal(absent.code, 0, 'deleting what does not exist succeeds');
  t.equal(absent.out, 'demo.v1.Album kid-a does not exist: nothing to delete\n');
  t.same(await json(t, ['resource', 'delete', 'demo.v1.Album', 'kid-a']), { deleted: false });
});

t.test('status: sets one key with conditions; the generation stays; --uid is required', async (t) => {
  const w = await json(t, ['resource', 'write', 'demo.v1.Artist', 'muse', '--data', '{"name":"Muse"}']);
  const uid = String(idOf(w)['uid']);
  const gen = String(w['generation']);
  const set = await cairn([
    'resource', 'status', 'demo.v1.Artist', 'muse', 'demo.v1.artist-controller',
    '--uid', uid, '--observed-generation', gen,
    '--condition', 'Accepted=TRUE:Ok', '--condition', 'Ready=false:Waiting:for: the label', '--version', String(w['version']),
  ]);
  t.equal(set.code, 0, set.err);
  t.match(set.out, new RegExp(`^demo\\.v1\\.Artist default/default/muse status demo\\.v1\\.artist-controller set: version \\d+ \\(generation unchanged: ${gen}\\)\\n$`));
  const r = resourceOf((await json(t, ['resource', 'read', 'demo.v1.Artist', 'muse']))['resource']);
  const status = (r['status'] as Json)['demo.v1.artist-controller'] as Json;
  t.same(status['conditions'], [
    { type: 'Accepted', state: 'TRUE', reason: 'Ok', message: '' },
    { type: 'Ready', state: 'FALSE', reason: 'Waiting', message: 'for: the label' },
  ]);
  t.equal(r['generation'], gen);
  const table = await cairn(['resource', 'read', 'demo.v1.Artist', 'muse']);
  t.match(table.out, /\nstatus demo\.v1\.artist-controller: +Accepted=TRUE \(Ok\), Ready=FALSE \(Waiting: for: the label\); generation current; updated \S+\n/);

  const noUid = await cairn(['resource', 'status', 'demo.v1.Artist', 'muse', 'k', '--observed-generation', gen]);
  t.equal(noUid.code, ExitCode.USAGE);
  t.match(noUid.err, /^cairn: required option '--uid <uid>' not specified\n$/);
  const wrongUid = await cairn(['resource', 'status', 'demo.v1.Artist', 'muse', 'k', '--uid', '01ARZ3NDEKTSV4RRFFQ69G5FAV', '--observed-generation', gen]);
  t.equal(wrongUid.code, ExitCode.NOT_FOUND, 'a status write names one incarnation');
  const badCondition = await cairn(['resource', 'status', 'demo.v1.Artist', 'muse', 'k', '--uid', uid, '--observed-generation', gen, '--condition', 'Ready=MAYBE']);
  t.equal(badCondition.code, ExitCode.USAGE);
  t.equal(badCondition.err, "cairn: --condition 'Ready=MAYBE': the state must be TRUE, FALSE or UNKNOWN, got 'MAYBE'\n");
});

t.test('bad input: exit 2 when nothing was sent, exit 6 when the server refused it', async (t) => {
  const usage: [string[], RegExp][] = [
    [['resource', 'write', 'demo.v1.Artist', 'x'], /^cairn: a write needs the resource's data: --data/],
    [['resource', 'write', 'demo.v1.Artist', 'x', '--data', '{nope'], /^cairn: --data is not valid JSON: /],
    [['resource', 'write', 'demo.v1.Artist', 'x', '--data', '{}', '--version', 'v1'], /^cairn: --version must be a version: a decimal number such as 0 or 42, got "v1"\n$/],
    [['resource', 'write', 'demo.v1.Artist', 'x', '--data', '{}', '--metadata', 'novalue'], /^cairn: --metadata must be KEY=VALUE, got 'novalue'\n$/],
    [['resource', 'write', 'demo.v1.Artist', 'x', '--data', '{}', '--owner', 'demo.v1.Artist/x'], /^cairn: --owner must be TYPE\/NAME\/UID, /],
    [['resource', 'write', 'demo.v1.Artist', 'x', '-f', 'missing.yaml'], /^cairn: cannot read .*missing\.yaml: ENOENT/],
    [['resource', 'list', 'demo.v1.Artist', '--timeout', '0'], /^cairn: option '--timeout <ms>' argument '0' is invalid/],
    [['resource', 'read', 'demo.v1.Artist'], /^cairn: missing required argument 'name'/],
  ];
  for (const [args, err] of usage) {
    const r = await cairn(args);
    t.equal(r.code, ExitCode.USAGE, args.join(' '));
    t.match(r.err, err);
  }
  const unknownField = path.join(dir, 'unknown.yaml');
  await writeFile(unknownField, 'data: {name: X}\nlabels: {a: b}\n');
  const u = await cairn(['resource', 'write', 'demo.v1.Artist', 'x', '-f', unknownField]);
  t.equal(u.code, ExitCode.USAGE);
  t.equal(u.err, `cairn: unknown field 'labels' in ${unknownField} (allowed: data, metadata, owner, finalizers, version, status, lease)\n`);
  const badEndpoint = await cairn(['resource', 'list', 'demo.v1.Artist'], {}, 'http://127.0.0.1:7500');
  t.equal(badEndpoint.code, ExitCode.USAGE);
  t.equal(badEndpoint.err, "cairn: --endpoint must be host:port (a node's gRPC host:port, not a URL), got 'http://127.0.0.1:7500'\n");
  const badEnv = await cairn(['resource', 'list', 'demo.v1.Artist'], { CAIRN_GRPC_ADDR: 'nowhere' }, null);
  t.equal(badEnv.err, "cairn: --endpoint (from CAIRN_GRPC_ADDR) must be host:port, got 'nowhere'\n");

  const invalid: [string[], RegExp][] = [
    [['resource', 'write', 'demo.v1.Artist', 'Bad_Name', '--data', '{"name":"x"}'], /^cairn: INVALID_ARGUMENT: name "Bad_Name" must be a lowercase DNS label/],
    [['resource', 'write', 'demo.v1.Artist', 'x', '--data', '{"name":"x","genre":"polka"}'], /^cairn: INVALID_ARGUMENT: data does not match the schema of demo\.v1\.Artist: \/genre must be equal to one of the allowed values/],
    [['resource', 'write', 'demo.v9.Nope', 'x', '--data', '{}'], /^cairn: INVALID_ARGUMENT: unknown resource type demo\.v9\.Nope; registered: /],
    [['resource', 'list', 'demo.v1.Executive', '-n', 'x'], /^cairn: INVALID_ARGUMENT: type demo\.v1\.Executive is cluster-scoped: namespace must be empty, got "x"/],
  ];
  for (const [args, err] of invalid) {
    const r = await cairn(args);
    t.equal(r.code, ExitCode.INVALID, args.join(' '));
    t.match(r.err, err);
  }
});

t.test('unreachable: connection refused exits 5; a write says nothing was sent', async (t) => {
  const port = await closedPort();
  // 2 s, not less: on a loaded machine a shorter deadline can pass before the refusal is seen.
  const read = await spawnCairn(['resource', 'read', 'demo.v1.Artist', 'korn', '--endpoint', `127.0.0.1:${port}`, '--timeout', '2000']);
  t.equal(read.code, ExitCode.UNAVAILABLE);
  t.equal(
    read.err,
    `cairn: UNAVAILABLE: cannot connect to 127.0.0.1:${port} within 2000 ms (ECONNREFUSED); is a cairn agent's gRPC API listening there? Set --endpoint or CAIRN_GRPC_ADDR\n`,
  );
  const write = await cairn(['resource', 'write', 'demo.v1.Artist', 'korn', '--data', '{"name":"K"}', '--timeout', '2000'], {}, `127.0.0.1:${port}`);
  t.equal(write.code, ExitCode.UNAVAILABLE);
  t.match(write.err, /; nothing was sent\n$/);
});

t.test('failover: a dead endpoint first, then the agent', async (t) => {
  const port = await closedPort();
  const r = await cairn(['resource', 'list', 'demo.v1.Artist', '-n', '*'], {}, `127.0.0.1:${port},${agent.grpcAddress}`);
  t.equal(r.code, 0, r.err);
  t.match(r.out, /resources? at revision \d+\n$/);
});

t.test('a write that times out: the outcome is unknown, exit 5; a read that times out: exit 5', async (t) => {
  // A gRPC server that takes every Write and Read and never answers.
  const server = new grpc.Server();
  const raw = (name: string): grpc.MethodDefinition<Buffer, Buffer> => ({
    path: `/cairn.resource.v1.ResourceService/${name}`,
    requestStream: false,
    responseStream: false,
    requestSerialize: (b: Buffer) => b,
    requestDeserialize: (b: Buffer) => b,
    responseSerialize: (b: Buffer) => b,
    responseDeserialize: (b: Buffer) => b,
  });
  server.addService({ write: raw('Write'), read: raw('Read') }, { write: () => undefined, read: () => undefined });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))),
  );
  t.teardown(() => server.forceShutdown());
  const write = await cairn(['resource', 'write', 'demo.v1.Artist', 'korn', '--data', '{"name":"K"}', '--timeout', '300'], {}, `127.0.0.1:${port}`);
  t.equal(write.code, ExitCode.UNAVAILABLE);
  t.match(write.err, /^cairn: TIMEOUT: Write not confirmed within 300 ms .*; the outcome is unknown: the change may or may not have been applied: read the resource before retrying\n$/);
  const read = await cairn(['resource', 'read', 'demo.v1.Artist', 'korn', '--timeout', '300'], {}, `127.0.0.1:${port}`);
  t.equal(read.code, ExitCode.UNAVAILABLE);
  t.match(read.err, /^cairn: TIMEOUT: .* \(--timeout 300 ms\)\n$/);
  t.notMatch(read.err, /outcome/, 'a read has no outcome to be unsure of');
});

t.test('help lists the commands; --version after a command word is the command\'s', async (t) => {
  const help = await cairn(['resource', '--help'], {}, null);
  t.equal(help.code, 0);
  for (const c of ['write', 'read', 'delete', 'list', 'status']) t.match(help.out, new RegExp(`^  ${c}\\b`, 'm'), c);
  t.match(help.out, /gRPC address/);
  const version = await cairn(['--version'], {}, null);
  t.match(version.out, /^\d+\.\d+\.\d+\n$/, 'the program --version still works before the command');
});

// ---- The parsers, without an agent ------------------------------------------------------------

t.test('parsers: endpoints, versions, owners, conditions, bodies', async (t) => {
  t.same(parseGrpcEndpoints(['a:1,b:2', 'a:1', '[::1]:7500'], '--endpoint'), ['a:1', 'b:2', '[::1]:7500'], 'repeated and comma lists, deduplicated');
  t.throws(() => parseGrpcEndpoints(['a:0'], '--endpoint'), { message: "--endpoint must be host:port, got 'a:0'" });
  t.throws(() => parseGrpcEndpoints([','], '--endpoint'), { message: '--endpoint names no address' });
  t.equal(parseVersionArg(42, 'version'), '42');
  t.equal(parseVersionArg('0', 'version'), '0');
  t.throws(() => parseVersionArg('007', 'v'));
  t.throws(() => parseVersionArg(-1, 'v'));
  t.same(parseOwner('demo.v1.Artist/korn/U', 'o'), { type: 'demo.v1.Artist', tenancy: { partition: '', namespace: '' }, name: 'korn', uid: 'U' });
  t.same(parseOwner('demo.v1.Artist/ns/korn/U', 'o'), { type: 'demo.v1.Artist', tenancy: { partition: '', namespace: 'ns' }, name: 'korn', uid: 'U' });
  t.same(parseOwner('demo.v1.Artist/p/ns/korn/U', 'o'), { type: 'demo.v1.Artist', tenancy: { partition: 'p', namespace: 'ns' }, name: 'korn', uid: 'U' });
  t.same(parseOwner('{"type":"demo.v1.Executive","name":"bob","uid":"U"}', 'o'), { type: 'demo.v1.Executive', tenancy: { partition: '', namespace: '' }, name: 'bob', uid: 'U' });
  t.throws(() => parseOwner('{"type":"t","name":"n","uid":"U","extra":1}', 'o'), { message: "unknown field 'extra' in o (allowed: type, tenancy, name, uid)" });
  t.throws(() => parseOwner('t/n/', 'o'));
  t.same(parseCondition('Ready=true'), { type: 'Ready', state: 'TRUE', reason: '', message: '' });
  t.same(parseCondition('Ready=UNKNOWN:Why:a:b'), { type: 'Ready', state: 'UNKNOWN', reason: 'Why', message: 'a:b' });
  t.throws(() => parseCondition('=TRUE'));

  t.same(parseBodyDocument('data: {n: 1}\nowner: null\nstatus: {}\nversion: 7\n', 'f'), { data: { n: 1 }, version: '7' }, 'null owner and empty status are left out');
  t.same(parseBodyDocument('{"data": null}', 'f'), { data: null }, 'JSON when it starts with {');
  t.throws(() => parseBodyDocument('data: 1\ndata: 2\n', 'f'), { message: /^f is not valid YAML: / }, 'duplicate keys');
  t.throws(() => parseBodyDocument('- 1\n', 'f'), { message: /^f must hold an object/ });
  t.throws(() => parseBodyDocument('data: {}\nmetadata: {tier: 1}\n', 'f'), { message: 'f: metadata.tier must be a string (quote it in YAML), got 1' });
  t.throws(() => parseBodyDocument('data: {}\nstatus: {c: {observed_generation: g, conditions: [], updated_at: t, extra: 1}}\n', 'f'), {
    message: "unknown field 'extra' in f: status.c (allowed: observed_generation, conditions, updated_at)",
  });
  const status = parseBodyDocument('data: {}\nstatus: {c: {observed_generation: g, conditions: [{type: Ready, state: "TRUE"}], updated_at: t}}\n', 'f').status;
  t.same(status, { c: { observed_generation: 'g', conditions: [{ type: 'Ready', state: 'TRUE', reason: '', message: '' }], updated_at: 't' } });

  t.same(
    buildWriteBody({ data: { a: 1 }, metadata: { k: 'file' }, finalizers: ['f1'], version: '3' }, { data: '{"b":2}', metadata: ['k=flag', 'e='], finalizer: ['f1', 'f2'], version: '4' }),
    { data: { b: 2 }, metadata: { k: 'flag', e: '' }, finalizers: ['f1', 'f2'], version: '4' },
  );
  t.same(buildWriteBody(undefined, { data: '[1]' }), { data: [1] }, 'absent metadata and finalizers stay absent (keep the stored ones)');
});

t.test('output helpers', async (t) => {
  t.equal(displayName({ type: 'demo.v1.Executive', tenancy: { partition: '', namespace: '' }, name: 'bob', uid: 'U' }), 'demo.v1.Executive bob');
  t.equal(shortGeneration('01JD7Q4ABCDEFGHJKMNPQRSTVW'), 'NPQRSTVW', 'the random tail, not the time prefix');
  t.equal(shortGeneration('7'), '7');
  t.equal(formatList([], '9'), 'no resources at revision 9\n');
  t.equal(formatList([], '9', undefined, true), "no resources at revision 9; this node's last leader contact: no leader known\n");
});
