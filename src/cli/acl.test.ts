// `cairn acl ...` run in this process (runCli, in-memory io) against a fake agent API: the
// requests each command makes, its table and --json output, and that bad input is refused
// before anything is sent (README.md "cairn acl").
import { mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { parseDuration, parseExpiresAt, parseRule, ruleText } from './acl.js';
import type { AgentDeps } from './agent.js';
import { ExitCode } from './errors.js';
import { runCli } from './program.js';
import { fakeAgent, memoryIo, type Canned, type Recorded } from './testing.js';

const noAgent = (): Promise<AgentDeps> => Promise.reject(new Error('no agent in this test'));
const tmp = mkdtempSync(path.join(os.tmpdir(), 'cairn-cli-acl-'));

const SECRET = `cairn_01jd7q3abcdefghjkmnpqrstvw_${'0123456789abcdef'.repeat(4)}`;
const MGMT = `cairn_01jd7q3abcdefghjkmnpqrstvx_${'fedcba9876543210'.repeat(4)}`;
const TOKEN = {
  accessor_id: '01jd7q3abcdefghjkmnpqrstvw',
  secret_id: SECRET,
  roles: ['team-a-writer'],
  description: 'ci',
  expires_at: null,
  created_at: '2026-11-27T06:00:00.000Z',
};
const ROLE = {
  name: 'team-a-writer',
  description: 'writes team-a',
  rules: [{ verbs: ['read', 'list', 'watch', 'write'], types: ['demo.*'], partitions: ['*'], namespaces: ['team-a'], name_prefix: '' }],
};

async function run(args: readonly string[], respond: Canned | ((req: Recorded) => Canned), env: Record<string, string> = { CAIRN_TOKEN: MGMT }) {
  const agent = await fakeAgent((req) => (typeof respond === 'function' ? respond(req) : respond));
  try {
    const io = memoryIo(env, tmp);
    const code = await runCli([...args, '--endpoint', agent.endpoint], io, noAgent);
    return { code, out: io.out(), err: io.err(), requests: agent.requests };
  } finally {
    await agent.close();
  }
}

const bodyOf = (r: Recorded | undefined): unknown => JSON.parse(r?.body.toString() ?? 'null');
const notFound: Canned = { status: 404, body: { error: { code: 'NOT_FOUND', message: 'no role team-a-writer' } } };

t.test('bootstrap: POST {} without a token, prints the accessor, the secret and how to store it', async (t) => {
  const reply: Canned = { status: 200, body: { accessor_id: 'a1', secret_id: MGMT, roles: ['global-management'], description: 'bootstrap token' } };
  const r = await run(['acl', 'bootstrap'], reply, { CAIRN_TOKEN: SECRET });
  t.equal(r.code, 0, r.err);
  t.equal(r.requests[0]?.method, 'POST');
  t.equal(r.requests[0]?.url, '/v1/acl/bootstrap');
  t.same(bodyOf(r.requests[0]), {});
  t.equal(r.requests[0]?.headers['authorization'], undefined, 'a stale CAIRN_TOKEN is not sent');
  t.match(r.out, /^accessor: +a1\nsecret: +cairn_01jd7q3abcdefghjkmnpqrstvx_fedcba/);
  t.match(r.out, /roles: +global-management\n/);
  t.match(r.out, /The secret is shown only now\. Store it where only you can read it/);
  t.equal(r.err, '');
  const json = await run(['acl', 'bootstrap', '--json'], reply);
  t.same(JSON.parse(json.out), reply.body);

  const again = await run(['acl', 'bootstrap'], { status: 403, body: { error: { code: 'PERMISSION_DENIED', message: 'bootstrap refused' } } });
  t.equal(again.code, ExitCode.AUTH);
  t.equal(again.err, "cairn: PERMISSION_DENIED: bootstrap refused; the cluster's ACLs are already bootstrapped (bootstrap works once): use the management token, or a token from its holder\n");
  const said = await run(['acl', 'bootstrap'], { status: 403, body: { error: { code: 'PERMISSION_DENIED', message: 'ACL bootstrap has already been done' } } });
  t.equal(said.err, 'cairn: PERMISSION_DENIED: ACL bootstrap has already been done\n', 'a server that says why needs no hint (and no token hint: none was sent on purpose)');
});

t.test('token create: roles, description, expiry; the secret shown once; --json', async (t) => {
  const r = await run(['acl', 'token', 'create', '--role', 'team-a-writer', '--role', 'reader,team-a-writer', '--description', 'ci', '--expires-at', '2026-12-01T00:00:00+01:00'], {
    status: 200,
    body: TOKEN,
  });
  t.equal(r.code, 0, r.err);
  t.equal(r.requests[0]?.method, 'POST');
  t.equal(r.requests[0]?.url, '/v1/acl/tokens');
  t.equal(r.requests[0]?.headers['authorization'], `Bearer ${MGMT}`);
  t.same(bodyOf(r.requests[0]), { roles: ['team-a-writer', 'reader'], description: 'ci', expires_at: '2026-11-30T23:00:00.000Z' });
  t.equal(
    r.out,
    [
      'accessor:     01jd7q3abcdefghjkmnpqrstvw',
      `secret:       ${SECRET}`,
      'roles:        team-a-writer',
      'description:  ci',
      'expires:      never',
      'created:      2026-11-27T06:00:00.000Z',
      '',
      'The secret is shown only now. Store it where only you can read it, e.g. in a file with mode 0600,',
      'and use it with --token-file FILE or CAIRN_TOKEN_FILE=FILE (or CAIRN_TOKEN).',
      '',
    ].join('\n'),
  );
  const before = Date.now();
  const inDay = await run(['acl', 'token', 'create', '--role', 'r', '--expires-in', '24h', '--json'], { status: 200, body: TOKEN });
  const sent = bodyOf(inDay.requests[0]) as { expires_at: string };
  const ms = Date.parse(sent.expires_at) - before;
  t.ok(ms >= 86_400_000 && ms < 86_400_000 + 60_000, `--expires-in 24h: ${sent.expires_at}`);
  t.same(JSON.parse(inDay.out), TOKEN);
});

t.test('token create refuses bad input before sending anything', async (t) => {
  const cases: Array<[string[], RegExp]> = [
    [['acl', 'token', 'create'], /give at least one --role/],
    [['acl', 'token', 'create', '--role', 'r', '--expires-in', '1h', '--expires-at', '2026-12-01T00:00:00Z'], /--expires-in or --expires-at, not both/],
    [['acl', 'token', 'create', '--role', 'r', '--expires-in', 'tomorrow'], /must be a positive duration/],
    [['acl', 'token', 'create', '--role', 'r', '--expires-at', '2026-12-01'], /ISO-8601 time with a zone/],
  ];
  for (const [args, message] of cases) {
    const r = await run(args, { status: 200, body: TOKEN });
    t.equal(r.code, ExitCode.USAGE, args.join(' '));
    t.match(r.err, message);
    t.equal(r.requests.length, 0, 'nothing sent');
  }
});

t.test('token list, read, delete, self', async (t) => {
  const older = { ...TOKEN, accessor_id: 'a0', secret_id: undefined, roles: ['global-management'], description: '', created_at: '2026-11-27T05:00:00.000Z', expires_at: '2027-01-01T00:00:00.000Z' };
  const list = await run(['acl', 'token', 'list'], { status: 200, body: { tokens: [{ ...TOKEN, secret_id: undefined }, older] } });
  t.equal(list.code, 0, list.err);
  t.equal(list.requests[0]?.url, '/v1/acl/tokens');
  t.equal(
    list.out,
    [
      'ACCESSOR                     ROLES               EXPIRES                    CREATED                    DESCRIPTION',
      'a0                           global-management   2027-01-01T00:00:00.000Z   2026-11-27T05:00:00.000Z   -',
      '01jd7q3abcdefghjkmnpqrstvw   team-a-writer       never                      2026-11-27T06:00:00.000Z   ci',
      '',
    ].join('\n'),
  );
  t.equal((await run(['acl', 'token', 'list'], { status: 200, body: { tokens: [] } })).out, 'no tokens\n');
  const revoked = { ...older, accessor_id: 'bootstrap', revoked: true };
  t.match((await run(['acl', 'token', 'list'], { status: 200, body: { tokens: [revoked] } })).out, /^bootstrap +global-management +revoked /m, 'a revoked bootstrap token says so');
  t.match((await run(['acl', 'token', 'read', 'bootstrap'], { status: 200, body: revoked })).out, /^revoked: +yes: deleted, refused on every call\n$/m);
  const malformed = await run(['acl', 'token', 'list'], { status: 200, body: { tokens: [{ roles: 'x' }] } });
  t.equal(malformed.code, ExitCode.GENERIC);
  t.match(malformed.err, /unexpected response .*tokens\[0\] is malformed/);

  const read = await run(['acl', 'token', 'read', 'a0'], { status: 200, body: older });
  t.equal(read.requests[0]?.url, '/v1/acl/tokens/a0');
  t.match(read.out, /^accessor: +a0\nroles: +global-management\n/);
  t.notMatch(read.out, /secret/);

  const del = await run(['acl', 'token', 'delete', 'a0'], { status: 200, body: { deleted: true } });
  t.equal(del.requests[0]?.method, 'DELETE');
  t.equal(del.out, 'deleted token a0\n');
  t.equal((await run(['acl', 'token', 'delete', 'a0'], { status: 200, body: { deleted: false } })).out, 'no token a0: nothing deleted\n');

  const self = await run(['acl', 'token', 'self'], { status: 200, body: { accessor_id: null, roles: [], management: false, anonymous: true } }, {});
  t.equal(self.requests[0]?.url, '/v1/acl/token/self');
  t.equal(self.out, 'accessor:    anonymous (no token)\nroles:       -\nmanagement:  no\n');
});

t.test('a secret given where an accessor id goes is refused, not sent and not printed', async (t) => {
  for (const cmd of ['read', 'delete']) {
    const r = await run(['acl', 'token', cmd, SECRET], { status: 200, body: { deleted: true } });
    t.equal(r.code, ExitCode.USAGE);
    t.equal(r.requests.length, 0);
    t.notOk(r.err.includes(SECRET), 'not printed');
    t.match(r.err, /that is a token secret, not an accessor id/);
  }
  const bad = await run(['acl', 'token', 'read', '../roles'], { status: 200, body: TOKEN });
  t.equal(bad.code, ExitCode.USAGE);
  t.equal(bad.requests.length, 0);
});

t.test('role create: PUTs the rules create-only (version "0"); an existing role is not overwritten', async (t) => {
  const r = await run(
    ['acl', 'role', 'create', 'team-a-writer', '--rule', 'verbs=read,list,watch,write;types=demo.*;namespaces=team-a', '--rule', 'verb=read;type=demo.v1.RecordLabel;partition=default;name_prefix=a-', '--description', 'writes team-a'],
    (req) => ({ status: 200, body: { name: 'team-a-writer', ...(bodyOf(req) as object), version: '5' } }),
  );
  t.equal(r.code, 0, r.err);
  t.same(
    r.requests.map((q) => `${q.method} ${q.url}`),
    ['PUT /v1/acl/roles/team-a-writer'],
  );
  t.same(bodyOf(r.requests[0]), {
    rules: [
      { verbs: ['read', 'list', 'watch', 'write'], types: ['demo.*'], namespaces: ['team-a'] },
      { verbs: ['read'], types: ['demo.v1.RecordLabel'], partitions: ['default'], name_prefix: 'a-' },
    ],
    description: 'writes team-a',
    version: '0',
  });
  t.equal(
    r.out,
    [
      'created role team-a-writer',
      'name:         team-a-writer',
      'description:  writes team-a',
      'rule 1:       read,list,watch,write on demo.* in partitions * namespaces team-a',
      'rule 2:       read on demo.v1.RecordLabel in partitions default namespaces *, names a-*',
      '',
    ].join('\n'),
  );

  const exists = await run(['acl', 'role', 'create', 'team-a-writer', '--rule', 'verbs=read;types=*'], { status: 409, body: { error: { code: 'CAS_FAILED', message: 'version 5, not 0', expected: '0', actual: '5' } } });
  t.equal(exists.code, ExitCode.CONFLICT);
  t.equal(exists.err, 'cairn: role team-a-writer already exists: use `cairn acl role update team-a-writer` to change it; nothing was changed\n');
});

t.test('role create/update refuse bad rules before sending anything', async (t) => {
  const badFile = path.join(tmp, 'bad-rules.json');
  writeFileSync(badFile, JSON.stringify([{ verbs: ['read'], types: ['demo.*'], tenants: ['x'] }]));
  const cases: Array<[string[], RegExp]> = [
    [['acl', 'role', 'create', 'r'], /give the role its rules/],
    [['acl', 'role', 'create', 'r', '--rule', 'verbs=read'], /'types' is required/],
    [['acl', 'role', 'create', 'r', '--rule', 'verbs=read,fly;types=*'], /unknown verb 'fly' \(verbs: read, list, watch, write, delete, write-status, admin\)/],
    [['acl', 'role', 'create', 'r', '--rule', 'verbs=read;types=*;colour=red'], /unknown key 'colour'/],
    [['acl', 'role', 'create', 'r', '--rule', 'verbs=read;types=*;verbs=write'], /'verbs' is given twice/],
    [['acl', 'role', 'create', 'r', '--rule', 'verbs read'], /is not key=value/],
    [['acl', 'role', 'create', 'r', '--rules-file', badFile], /rule 1: unknown field 'tenants'/],
    [['acl', 'role', 'create', 'r', '--rules-file', path.join(tmp, 'missing.json')], /cannot read the rules file/],
    [['acl', 'role', 'create', 'r', '--rules-file', badFile, '--rule', 'verbs=read;types=*'], /--rule or --rules-file, not both/],
    [['acl', 'role', 'update', 'r'], /nothing to change/],
  ];
  for (const [args, message] of cases) {
    const r = await run(args, { status: 200, body: ROLE });
    t.equal(r.code, ExitCode.USAGE, args.join(' '));
    t.match(r.err, message, args.join(' '));
    t.equal(r.requests.length, 0, 'nothing sent');
  }
});

t.test('role update keeps what is not given; --rules-file takes a list or {rules, description}', async (t) => {
  const echo = (req: Recorded): Canned => (req.method === 'GET' ? { status: 200, body: { ...ROLE, version: '7' } } : { status: 200, body: { name: 'team-a-writer', ...(bodyOf(req) as object) } });
  const desc = await run(['acl', 'role', 'update', 'team-a-writer', '--description', 'new words'], echo);
  t.equal(desc.code, 0, desc.err);
  t.same(bodyOf(desc.requests[1]), { rules: [{ verbs: ['read', 'list', 'watch', 'write'], types: ['demo.*'], partitions: ['*'], namespaces: ['team-a'] }], description: 'new words', version: '7' }, 'CAS on the version read');
  const raced = await run(['acl', 'role', 'update', 'team-a-writer', '--description', 'x'], (req) =>
    req.method === 'GET' ? { status: 200, body: { ...ROLE, version: '7' } } : { status: 409, body: { error: { code: 'CAS_FAILED', message: 'version 8, not 7' } } },
  );
  t.equal(raced.code, ExitCode.CONFLICT);
  t.match(raced.err, /role team-a-writer changed while it was being updated/);
  t.match(desc.out, /^updated role team-a-writer\n/);

  const file = path.join(tmp, 'rules.json');
  writeFileSync(file, JSON.stringify({ description: 'from the file', rules: [{ verbs: ['admin'], types: ['*'] }] }));
  const fromFile = await run(['acl', 'role', 'update', 'team-a-writer', '--rules-file', file, '--json'], echo);
  t.same(bodyOf(fromFile.requests[1]), { rules: [{ verbs: ['admin'], types: ['*'] }], description: 'from the file', version: '7' });
  t.same(JSON.parse(fromFile.out), { name: 'team-a-writer', rules: [{ verbs: ['admin'], types: ['*'] }], description: 'from the file', version: '7' });

  const missing = await run(['acl', 'role', 'update', 'nope', '--description', 'x'], notFound);
  t.equal(missing.code, ExitCode.NOT_FOUND);
  t.same(
    missing.requests.map((q) => q.method),
    ['GET'],
  );
});

t.test('role list, read, delete', async (t) => {
  const list = await run(['acl', 'role', 'list'], { status: 200, body: { roles: [ROLE, { name: 'global-management', description: 'every right', rules: [{ verbs: ['admin'], types: ['*'] }] }] } });
  t.equal(list.code, 0, list.err);
  t.equal(list.out, ['NAME                RULES   DESCRIPTION', 'global-management       1   every right', 'team-a-writer           1   writes team-a', ''].join('\n'));
  const read = await run(['acl', 'role', 'read', 'team-a-writer'], { status: 200, body: ROLE });
  t.equal(read.requests[0]?.url, '/v1/acl/roles/team-a-writer');
  t.match(read.out, /rule 1: +read,list,watch,write on demo\.\* in partitions \* namespaces team-a\n$/);
  const del = await run(['acl', 'role', 'delete', 'team-a-writer'], { status: 200, body: { deleted: true } });
  t.equal(del.requests[0]?.method, 'DELETE');
  t.equal(del.out, 'deleted role team-a-writer\n');
  const denied = await run(['acl', 'role', 'delete', 'x'], { status: 403, body: { error: { code: 'PERMISSION_DENIED', message: 'token lacks "admin" on acl' } } });
  t.equal(denied.code, ExitCode.AUTH);
  t.match(denied.err, /PERMISSION_DENIED: token lacks "admin" on acl; the token's roles do not grant this/);
});

t.test('parsers', async (t) => {
  t.equal(parseDuration('90s'), 90_000);
  t.equal(parseDuration('1h30m'), 5_400_000);
  t.equal(parseDuration('7d'), 604_800_000);
  for (const bad of ['', '0s', '5', 'h', '1h 30m', '1x', '-1h']) t.throws(() => parseDuration(bad), bad);
  t.equal(parseExpiresAt('2026-12-01T00:00:00Z'), '2026-12-01T00:00:00.000Z');
  t.throws(() => parseExpiresAt('2026-13-01T00:00:00Z'));
  t.same(parseRule(' verbs = read , list ; types = demo.* ; '), { verbs: ['read', 'list'], types: ['demo.*'] });
  t.equal(ruleText({ verbs: ['read'], types: ['*'] }), 'read on * in partitions * namespaces *');
});
