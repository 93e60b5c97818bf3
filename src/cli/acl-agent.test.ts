// `cairn acl ...` and the token options against a real dev agent with ACLs on (--acl), started
// in this process: bootstrap once, a role and a scoped token, a write it may and one it may not
// make (HTTP and gRPC), and a watch that ends when its token is deleted.
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import type { AgentDeps } from './agent.js';
import { ExitCode } from './errors.js';
import { runCli } from './program.js';
import { memoryIo, startCliTestAgent } from './testing.js';

const noAgent = (): Promise<AgentDeps> => Promise.reject(new Error('no agent in this test'));

const { agent, dir } = await startCliTestAgent(t, 'cairn-cli-acl-agent-', { acl: true });

const env = { CAIRN_HTTP_ADDR: agent.httpAddress, CAIRN_GRPC_ADDR: agent.grpcAddress };
async function cairn(args: string[], extraEnv: Record<string, string> = {}) {
  const io = memoryIo({ ...env, ...extraEnv }, dir);
  const code = await runCli(args, io, noAgent);
  return { code, out: io.out(), err: io.err() };
}

t.test('bootstrap, a role, a scoped token; what it may and may not do; a watch ended by deleting it', async (t) => {
  const anonymous = await cairn(['acl', 'token', 'list']);
  t.equal(anonymous.code, ExitCode.AUTH);
  t.match(anonymous.err, /^cairn: UNAUTHENTICATED: .*; no token was sent: set CAIRN_TOKEN or --token/);

  const boot = await cairn(['acl', 'bootstrap', '--json']);
  t.equal(boot.code, 0, boot.err);
  const mgmt = (JSON.parse(boot.out) as { secret_id: string }).secret_id;
  t.match(mgmt, /^cairn_[a-z0-9-]+_[0-9a-f]{64}$/);
  const again = await cairn(['acl', 'bootstrap']);
  t.equal(again.code, ExitCode.AUTH, 'bootstrap works once');

  const mgmtFile = path.join(dir, 'mgmt.token');
  await writeFile(mgmtFile, `${mgmt}\n`, { mode: 0o600 });
  const asMgmt = { CAIRN_TOKEN_FILE: mgmtFile };
  const self = await cairn(['acl', 'token', 'self'], asMgmt);
  t.match(self.out, /management: +yes/);

  const role = await cairn(['acl', 'role', 'create', 'team-a-writer', '--rule', 'verbs=read,list,watch,write;types=demo.*;namespaces=team-a'], asMgmt);
  t.equal(role.code, 0, role.err);
  t.equal((await cairn(['acl', 'role', 'create', 'team-a-writer', '--rule', 'verbs=read;types=*'], asMgmt)).code, ExitCode.CONFLICT);
  const updated = await cairn(['acl', 'role', 'update', 'team-a-writer', '--description', 'team a'], asMgmt);
  t.equal(updated.code, 0, updated.err);
  t.match(updated.out, /description: +team a\nrule 1: +read,list,watch,write on demo\.\* in partitions \* namespaces team-a\n$/);

  const created = await cairn(['acl', 'token', 'create', '--role', 'team-a-writer', '--description', 'ci', '--expires-in', '1h', '--json'], asMgmt);
  t.equal(created.code, 0, created.err);
  const ci = JSON.parse(created.out) as { accessor_id: string; secret_id: string; expires_at: string };
  const list = await cairn(['acl', 'token', 'list'], asMgmt);
  t.match(list.out, new RegExp(`^${ci.accessor_id} +team-a-writer +${ci.expires_at.replace(/\./g, '\\.')} `, 'm'));
  t.notMatch(list.out, /cairn_/, 'no secret in a list');

  const asCi = { CAIRN_TOKEN: ci.secret_id };
  const ok = await cairn(['resource', 'write', 'demo.v1.Artist', 'korn', '-n', 'team-a', '--data', '{"name":"Korn"}'], asCi);
  t.equal(ok.code, 0, ok.err);
  const denied = await cairn(['resource', 'write', 'demo.v1.Artist', 'tool', '--data', '{"name":"Tool"}'], asCi);
  t.equal(denied.code, ExitCode.AUTH);
  t.match(denied.err, /^cairn: PERMISSION_DENIED: .*lacks "write" on demo\.v1\.Artist.*; the token's roles do not grant this/);
  t.notOk(denied.err.includes(ci.secret_id));
  const adminDenied = await cairn(['operator', 'raft', 'list-peers'], asCi);
  t.equal(adminDenied.code, ExitCode.AUTH);

  // A watch with the token, ended when the token is deleted.
  const watchIo = memoryIo({ ...env, ...asCi }, dir);
  const watching = runCli(['resource', 'watch', 'demo.v1.Artist', '-n', 'team-a'], watchIo, noAgent);
  for (const end = Date.now() + 10_000; !watchIo.out().includes('tail'); ) {
    if (Date.now() > end) {
      t.fail(`the watch showed no tail within 10 s: ${watchIo.err()}`);
      break;
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  t.match(watchIo.out(), /change +default\/team-a\/korn/);
  const del = await cairn(['acl', 'token', 'delete', ci.accessor_id], asMgmt);
  t.equal(del.out, `deleted token ${ci.accessor_id}\n`);
  // (Were it not to end, tap's per-file timeout would stop the run: the failure still shows.)
  const ended = await Promise.race([watching, new Promise<string>((r) => setTimeout(() => r('still running after 10 s'), 10_000).unref())]);
  t.equal(ended, ExitCode.AUTH, 'the watch ended with an auth error');
  t.match(watchIo.err(), /PERMISSION_DENIED|UNAUTHENTICATED/);
  t.notOk(watchIo.err().includes(ci.secret_id));

  const gone = await cairn(['resource', 'read', 'demo.v1.Artist', 'korn', '-n', 'team-a'], asCi);
  t.equal(gone.code, ExitCode.AUTH);
  t.match(gone.err, /; the token was refused \(unknown, expired or deleted\)/);
});
