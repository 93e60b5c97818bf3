// The token and CA options every command that calls a node shares (README.md "Tokens"), run in
// this process (runCli, in-memory io) against fake agents: HTTP (operator, snapshot, acl) and
// gRPC (resource). Precedence, --token-file errors, the 401/403 hints, and that a secret never
// reaches stderr.
import * as grpc from '@grpc/grpc-js';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import type { AgentDeps } from './agent.js';
import { ExitCode } from './errors.js';
import { redact, runCli } from './program.js';
import { fakeAgent, memoryIo, type Canned, type Recorded } from './testing.js';

const noAgent = (): Promise<AgentDeps> => Promise.reject(new Error('no agent in this test'));
const tmp = mkdtempSync(path.join(os.tmpdir(), 'cairn-cli-token-'));

const secret = (n: string): string => `cairn_01jd7q3abcdefghjkmnpqrst${n}_${n.repeat(64).slice(0, 64)}`;
const FLAG = secret('a');
const FILE = secret('b');
const ENV = secret('c');
const ENV_FILE = secret('d');
const SELF = { accessor_id: '01jd7q3abcdefghjkmnpqrstva', roles: ['ops'], management: false, anonymous: false };

function tokenFile(name: string, text: string): string {
  const file = path.join(tmp, name);
  writeFileSync(file, text, { mode: 0o600 });
  return file;
}

async function run(args: readonly string[], respond: Canned | ((req: Recorded) => Canned), env: Record<string, string> = {}) {
  const agent = await fakeAgent((req) => (typeof respond === 'function' ? respond(req) : respond));
  try {
    const io = memoryIo(env, tmp);
    const code = await runCli([...args, '--endpoint', agent.endpoint], io, noAgent);
    return { code, out: io.out(), err: io.err(), requests: agent.requests };
  } finally {
    await agent.close();
  }
}

const auth = (r: { requests: Recorded[] }): string | undefined => r.requests[0]?.headers['authorization'];

t.test('precedence: --token > --token-file > CAIRN_TOKEN > CAIRN_TOKEN_FILE; none: no header', async (t) => {
  const file = tokenFile('flag-file', `${FILE}\n`);
  const envFile = tokenFile('env-file', `  ${ENV_FILE}\r\n\n`);
  const all = { CAIRN_TOKEN: ENV, CAIRN_TOKEN_FILE: envFile };
  const ok: Canned = { status: 200, body: SELF };
  const cases: Array<[string, string[], Record<string, string>, string | undefined]> = [
    ['--token wins over everything', ['--token', FLAG, '--token-file', file], all, FLAG],
    ['--token-file wins over the variables', ['--token-file', file], all, FILE],
    ['CAIRN_TOKEN wins over CAIRN_TOKEN_FILE', [], all, ENV],
    ['CAIRN_TOKEN_FILE, its blanks trimmed', [], { CAIRN_TOKEN_FILE: envFile }, ENV_FILE],
    ['an empty CAIRN_TOKEN counts as unset', [], { CAIRN_TOKEN: '', CAIRN_TOKEN_FILE: envFile }, ENV_FILE],
    ['no token anywhere', [], {}, undefined],
  ];
  for (const [name, flags, env, expected] of cases) {
    const r = await run(['acl', 'token', 'self', ...flags], ok, env);
    t.equal(r.code, 0, `${name}: ${r.err}`);
    t.equal(auth(r), expected === undefined ? undefined : `Bearer ${expected}`, name);
  }
  // The same options on the other HTTP commands.
  const peers = await run(['operator', 'raft', 'list-peers', '--token', FLAG], { status: 200, body: { index: 1, servers: [] } });
  t.equal(auth(peers), `Bearer ${FLAG}`, 'operator sends it');
  const snap = await run(['snapshot', 'save', path.join(tmp, 'snap.bin')], { status: 200, body: Buffer.from('x') }, { CAIRN_TOKEN: ENV });
  t.equal(snap.code, 0, snap.err);
  t.equal(auth(snap), `Bearer ${ENV}`, 'snapshot sends it');
});

t.test('--token-file and CAIRN_TOKEN_FILE errors: clear, exit 2, nothing sent, no secret shown', async (t) => {
  const missing = path.join(tmp, 'no-such-token');
  const r1 = await run(['acl', 'token', 'self', '--token-file', missing], { status: 200, body: SELF });
  t.equal(r1.code, ExitCode.USAGE);
  t.equal(r1.err, `cairn: cannot read the token file ${missing} (--token-file): no such file; nothing was sent\n`);
  t.equal(r1.requests.length, 0);
  const r2 = await run(['acl', 'token', 'self'], { status: 200, body: SELF }, { CAIRN_TOKEN_FILE: tmp });
  t.equal(r2.code, ExitCode.USAGE);
  t.equal(r2.err, `cairn: cannot read the token file ${tmp} (from CAIRN_TOKEN_FILE): it is a directory; nothing was sent\n`);
  const empty = tokenFile('empty', '\n\n');
  const r3 = await run(['acl', 'token', 'self', '--token-file', empty], { status: 200, body: SELF });
  t.equal(r3.code, ExitCode.USAGE);
  t.match(r3.err, /^cairn: the token file .*empty is empty: expected a token secret/);
  const twoLines = tokenFile('two-lines', `${FILE}\nsecond line ${FLAG}\n`);
  const r4 = await run(['acl', 'token', 'self', '--token-file', twoLines], { status: 200, body: SELF });
  t.equal(r4.code, ExitCode.USAGE);
  t.match(r4.err, /does not hold a token secret: it has spaces, control or non-ASCII characters/);
  t.notMatch(r4.err, /cairn_01/, 'the file content is not shown');
  t.equal(r4.requests.length, 0);
  const r5 = await run(['acl', 'token', 'self', '--token', 'bad token'], { status: 200, body: SELF });
  t.equal(r5.code, ExitCode.USAGE);
  t.notMatch(r5.err, /bad token/);
});

t.test('401 and 403: the server message, a hint, exit 7; the secret is never on stderr', async (t) => {
  const none = await run(['acl', 'token', 'list'], { status: 401, body: { error: { code: 'UNAUTHENTICATED', message: 'a token is required' } } });
  t.equal(none.code, ExitCode.AUTH);
  t.equal(none.err, 'cairn: UNAUTHENTICATED: a token is required; no token was sent: set CAIRN_TOKEN or --token (or --token-file)\n');

  // A hostile (or careless) server that echoes the token back: it is redacted.
  const echoed = await run(['acl', 'token', 'list'], (req) => ({ status: 401, body: { error: { code: 'UNAUTHENTICATED', message: `unknown token ${String(req.headers['authorization'])}` } } }), {
    CAIRN_TOKEN: ENV,
  });
  t.equal(echoed.code, ExitCode.AUTH);
  t.notOk(echoed.err.includes(ENV), 'the secret is not printed');
  t.equal(echoed.err, 'cairn: UNAUTHENTICATED: unknown token Bearer <redacted>; the token was refused (unknown, expired or deleted): set CAIRN_TOKEN or --token to a current one\n');

  const accessor = await run(['acl', 'token', 'list', '--token', SELF.accessor_id], { status: 401, body: { error: { code: 'UNAUTHENTICATED', message: 'unknown token' } } });
  t.match(accessor.err, /an accessor id is not a secret/, 'an accessor id passed as the token gets a hint');

  const denied = await run(['operator', 'raft', 'list-peers', '--token', FLAG], {
    status: 403,
    body: { error: { code: 'PERMISSION_DENIED', message: 'token lacks "admin" on operator' } },
  });
  t.equal(denied.code, ExitCode.AUTH);
  t.equal(denied.err, 'cairn: PERMISSION_DENIED: token lacks "admin" on operator; the token\'s roles do not grant this (`cairn acl token self` lists them)\n');

  const bare = await run(['acl', 'role', 'list'], { status: 403, body: 'Forbidden' });
  t.equal(bare.code, ExitCode.AUTH);
  t.match(bare.err, /^cairn: HTTP_403: .*; no token was sent, so the request ran as anonymous: set CAIRN_TOKEN/);
});

t.test('RATE_LIMITED (429): exit 5 with the wait the server asked for; NO_SPACE: exit 4', async (t) => {
  const limited = await run(['acl', 'role', 'list'], { status: 429, body: { error: { code: 'RATE_LIMITED', message: 'too many requests from this token' } }, headers: { 'retry-after': '3' } });
  t.equal(limited.code, ExitCode.UNAVAILABLE);
  t.equal(limited.err, 'cairn: RATE_LIMITED: too many requests from this token; retry after 3 s\n');
  const full = await run(['acl', 'token', 'create', '--role', 'ops'], { status: 507, body: { error: { code: 'NO_SPACE', message: 'the data quota is reached' } } });
  t.equal(full.code, ExitCode.CONFLICT);
});

t.test('redact: every secret, longest first, anywhere in the text', async (t) => {
  t.equal(redact('a SECRET b SECRETX c', new Set(['SECRET', 'SECRETX'])), 'a <redacted> b <redacted> c');
  t.equal(redact('abc', new Set(['', 'a'])), 'abc', 'too short to redact safely');
});

// ---- gRPC: cairn resource ... ------------------------------------------------------------------

t.test('resource commands send the token over gRPC; UNAUTHENTICATED gets the hint, exit 7', async (t) => {
  const seen: Array<string | undefined> = [];
  const server = new grpc.Server();
  const raw: grpc.MethodDefinition<Buffer, Buffer> = {
    path: '/cairn.resource.v1.ResourceService/Read',
    requestStream: false,
    responseStream: false,
    requestSerialize: (b: Buffer) => b,
    requestDeserialize: (b: Buffer) => b,
    responseSerialize: (b: Buffer) => b,
    responseDeserialize: (b: Buffer) => b,
  };
  server.addService(
    { read: raw },
    {
      read: (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => {
        const a = call.metadata.get('authorization')[0];
        seen.push(typeof a === 'string' ? a : undefined);
        // The known token gets past authentication (to a NOT_FOUND); any other is refused.
        const known = a === `Bearer ${FLAG}`;
        const metadata = new grpc.Metadata();
        metadata.set('cairn-error-code', known ? 'NOT_FOUND' : 'UNAUTHENTICATED');
        metadata.set('cairn-error-details-json', '{}');
        cb({ code: known ? grpc.status.NOT_FOUND : grpc.status.UNAUTHENTICATED, details: known ? 'no demo.v1.Artist korn' : `unknown token ${String(a)}`, metadata });
      },
    },
  );
  const port = await new Promise<number>((resolve, reject) => server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))));
  t.teardown(() => server.forceShutdown());
  const cairn = async (args: string[], env: Record<string, string> = {}) => {
    const io = memoryIo(env, tmp);
    const code = await runCli([...args, '--endpoint', `127.0.0.1:${port}`, '--timeout', '3000'], io, noAgent);
    return { code, out: io.out(), err: io.err() };
  };
  const ok = await cairn(['resource', 'read', 'demo.v1.Artist', 'korn', '--json'], { CAIRN_TOKEN: FLAG });
  t.equal(ok.code, ExitCode.NOT_FOUND, ok.err);
  t.equal(seen.at(-1), `Bearer ${FLAG}`);
  const refused = await cairn(['resource', 'read', 'demo.v1.Artist', 'korn', '--token-file', tokenFile('grpc', ENV)]);
  t.equal(refused.code, ExitCode.AUTH);
  t.equal(seen.at(-1), `Bearer ${ENV}`);
  t.equal(seen.length, 2, 'UNAUTHENTICATED is not retried');
  t.notOk(refused.err.includes(ENV), 'the secret the server echoed is redacted');
  t.match(refused.err, /^cairn: UNAUTHENTICATED: .*unknown token Bearer <redacted>.*; the token was refused \(unknown, expired or deleted\)/);
  const anonymous = await cairn(['resource', 'read', 'demo.v1.Artist', 'korn']);
  t.equal(seen.at(-1), undefined);
  t.match(anonymous.err, /; no token was sent: set CAIRN_TOKEN or --token/);
});

// ---- --ca-file ---------------------------------------------------------------------------------

t.test('--ca-file and CAIRN_CA_FILE are aliases of --tls-ca-file: HTTPS checked against that CA', async (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'cairn-cli-ca-'));
  for (const args of [['tls', 'ca', 'create'], ['tls', 'cert', 'create', '--node', 'n1']]) {
    const io = memoryIo({}, dir);
    t.equal(await runCli(args, io, noAgent), 0, io.err());
  }
  const headers: Array<string | undefined> = [];
  const server = createHttpsServer({ cert: readFileSync(path.join(dir, 'node-n1.pem')), key: readFileSync(path.join(dir, 'node-n1-key.pem')) }, (req, res) => {
    headers.push(req.headers['authorization']);
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify(SELF));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const endpoint = `127.0.0.1:${(server.address() as AddressInfo).port}`;
  const ca = path.join(dir, 'cairn-ca.pem');
  const cairn = async (args: string[], env: Record<string, string> = {}) => {
    const io = memoryIo(env, dir);
    const code = await runCli(['acl', 'token', 'self', '--endpoint', endpoint, ...args], io, noAgent);
    return { code, out: io.out(), err: io.err() };
  };
  const flag = await cairn(['--ca-file', ca, '--token', FLAG]);
  t.equal(flag.code, 0, flag.err);
  t.match(flag.out, /^accessor: +01jd7q3abcdefghjkmnpqrstva\nroles: +ops\nmanagement: +no\n$/);
  t.equal(headers.at(-1), `Bearer ${FLAG}`, 'the token goes over HTTPS too');
  t.equal((await cairn([], { CAIRN_CA_FILE: ca })).code, 0, 'CAIRN_CA_FILE');
  t.equal((await cairn(['--tls-ca-file', ca])).code, 0, '--tls-ca-file still works');
  t.equal((await cairn(['--tls-ca-file', ca, '--ca-file', ca])).code, 0, 'both naming the same file');
  const both = await cairn(['--tls-ca-file', ca, '--ca-file', path.join(dir, 'node-n1.pem')]);
  t.equal(both.code, ExitCode.USAGE);
  t.match(both.err, /--tls-ca-file and --ca-file name different files/);
  const envs = await cairn([], { CAIRN_CA_FILE: ca, CAIRN_TLS_CA_FILE: path.join(dir, 'x.pem') });
  t.equal(envs.code, ExitCode.USAGE);
  t.match(envs.err, /CAIRN_TLS_CA_FILE and CAIRN_CA_FILE name different files/);
  const unreadable = await cairn([], { CAIRN_CA_FILE: path.join(dir, 'missing.pem') });
  t.equal(unreadable.code, ExitCode.USAGE);
  t.match(unreadable.err, /^cairn: cannot read --ca-file \(from CAIRN_CA_FILE\) .*missing\.pem/);
  const untrusted = await cairn(['--ca-file', path.join(dir, 'node-n1.pem')]);
  t.equal(untrusted.code, ExitCode.UNAVAILABLE, 'a CA the server certificate does not chain to is refused');
});

t.test('a token about to travel in the clear to another machine gets a warning; loopback does not', async (t) => {
  const cairn = async (args: string[], env: Record<string, string> = {}) => {
    const io = memoryIo(env, tmp);
    const code = await runCli([...args, '--timeout', '200'], io, noAgent);
    return { code, err: io.err() };
  };
  // 192.0.2.0/24 is TEST-NET-1: never routed, so these requests fail (quickly, by --timeout).
  const http = await cairn(['acl', 'token', 'self', '--endpoint', '192.0.2.1:7501'], { CAIRN_TOKEN: ENV });
  t.match(http.err, /^cairn: warning: the token is sent without TLS to 192\.0\.2\.1: anyone on the path can read it; give --ca-file/);
  t.notOk(http.err.includes(ENV));
  const grpcRemote = await cairn(['resource', 'read', 'demo.v1.Artist', 'korn', '--endpoint', '192.0.2.1:7500,127.0.0.1:1'], { CAIRN_TOKEN: ENV });
  t.match(grpcRemote.err, /^cairn: warning: the token is sent without TLS to 192\.0\.2\.1:/, 'only the remote endpoint is named');
  const noToken = await cairn(['acl', 'token', 'self', '--endpoint', '192.0.2.1:7501']);
  t.notMatch(noToken.err, /warning/, 'no token, nothing to warn about');
  const local = await run(['acl', 'token', 'self'], { status: 200, body: SELF }, { CAIRN_TOKEN: ENV });
  t.equal(local.err, '', 'loopback: no warning');
});

t.test('a CA file that holds no certificate is a usage error, for HTTP and gRPC commands alike', async (t) => {
  const empty = tokenFile('empty-ca.pem', '');
  for (const args of [
    ['acl', 'token', 'self', '--ca-file', empty, '--endpoint', '127.0.0.1:1'],
    ['resource', 'read', 'demo.v1.Artist', 'korn', '--ca-file', empty, '--endpoint', '127.0.0.1:1'],
  ]) {
    const io = memoryIo({}, tmp);
    const code = await runCli(args, io, noAgent);
    t.equal(code, ExitCode.USAGE, args.join(' '));
    t.equal(io.err(), `cairn: --ca-file ${empty} holds no PEM certificate (-----BEGIN CERTIFICATE-----): give the cluster CA, cairn-ca.pem\n`);
  }
});
