// `cairn tls ca create` / `cairn tls cert create` run in this process (runCli, in-memory io):
// the files, their modes, the refusal to overwrite, and that what they make verifies and carries
// the identity (checked with Node's X.509 and with src/auth's loader, as an agent would).
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { loadTlsMaterial } from '../auth/index.js';
import { runCli } from './program.js';
import type { AgentDeps } from './agent.js';
import { memoryIo } from './testing.js';

const noAgent = (): Promise<AgentDeps> => Promise.reject(new Error('no agent in this test'));

async function cairn(cwd: string, ...args: string[]): Promise<{ code: number; out: string; err: string }> {
  const io = memoryIo({}, cwd);
  const code = await runCli(args, io, noAgent);
  return { code, out: io.out(), err: io.err() };
}

const mode = (file: string): number => statSync(file).mode & 0o777;

t.test('ca create, then node and client certificates that verify and carry their identity', async (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'cairn-tls-'));
  const ca = await cairn(dir, 'tls', 'ca', 'create', '--name', 'Prod CA', '--days', '100');
  t.equal(ca.code, 0, ca.err);
  t.equal(ca.out, `wrote ${dir}/cairn-ca.pem (CA certificate)\nwrote ${dir}/cairn-ca-key.pem (CA private key: keep it secret)\n`);
  const caCert = new X509Certificate(readFileSync(path.join(dir, 'cairn-ca.pem')));
  t.equal(caCert.subject, 'CN=Prod CA');
  t.ok(caCert.ca);
  const daysLeft = (new Date(caCert.validTo).getTime() - Date.now()) / 86_400_000;
  t.ok(daysLeft > 99 && daysLeft <= 100, `--days 100 (${daysLeft})`);

  const node = await cairn(dir, 'tls', 'cert', 'create', '--node', 'n1', '--host', '10.0.0.1', '--host', 'n1.example,10.0.0.11');
  t.equal(node.code, 0, node.err);
  t.equal(node.out, `wrote ${dir}/node-n1.pem (node n1 certificate)\nwrote ${dir}/node-n1-key.pem (node n1 private key)\n`);
  const cert = new X509Certificate(readFileSync(path.join(dir, 'node-n1.pem')));
  t.ok(cert.checkIssued(caCert) && cert.verify(caCert.publicKey), 'the node certificate verifies against the CA');
  t.match(cert.subjectAltName, /IP Address:10\.0\.0\.1, DNS:n1\.example, IP Address:10\.0\.0\.11, URI:cairn:\/\/node\/n1$/);
  const material = await loadTlsMaterial({ caFile: path.join(dir, 'cairn-ca.pem'), certFile: path.join(dir, 'node-n1.pem'), keyFile: path.join(dir, 'node-n1-key.pem') }, { nodeId: 'n1' });
  t.same(material.identity, { kind: 'node', id: 'n1' }, 'an agent would load it');

  const client = await cairn(dir, 'tls', 'cert', 'create', '--client', 'alice', '--days', '7');
  t.equal(client.code, 0, client.err);
  const clientMaterial = await loadTlsMaterial({ caFile: path.join(dir, 'cairn-ca.pem'), certFile: path.join(dir, 'client-alice.pem'), keyFile: path.join(dir, 'client-alice-key.pem') }, { expect: 'client' });
  t.same(clientMaterial.identity, { kind: 'client', name: 'alice' });

  t.same(readdirSync(dir).sort(), ['cairn-ca-key.pem', 'cairn-ca.pem', 'client-alice-key.pem', 'client-alice.pem', 'node-n1-key.pem', 'node-n1.pem'], 'no partial files left');
  for (const f of readdirSync(dir)) t.equal(mode(path.join(dir, f)).toString(8), '600', `${f} is 0600`);
});

t.test('existing files are not overwritten without --force; nothing is written', async (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'cairn-tls-'));
  t.equal((await cairn(dir, 'tls', 'ca', 'create')).code, 0);
  const caBefore = readFileSync(path.join(dir, 'cairn-ca.pem'), 'utf8');
  const again = await cairn(dir, 'tls', 'ca', 'create');
  t.equal(again.code, 2);
  t.equal(again.err, `cairn: ${dir}/cairn-ca.pem and ${dir}/cairn-ca-key.pem already exist; nothing was written (pass --force to replace, or --dir to write elsewhere)\n`);
  t.equal(readFileSync(path.join(dir, 'cairn-ca.pem'), 'utf8'), caBefore);

  writeFileSync(path.join(dir, 'node-n1-key.pem'), 'precious', { mode: 0o644 });
  const node = await cairn(dir, 'tls', 'cert', 'create', '--node', 'n1');
  t.equal(node.code, 2);
  t.match(node.err, /node-n1-key\.pem already exists; nothing was written/);
  t.throws(() => statSync(path.join(dir, 'node-n1.pem')), 'not even the file that did not exist');

  const forced = await cairn(dir, 'tls', 'cert', 'create', '--node', 'n1', '--force');
  t.equal(forced.code, 0, forced.err);
  t.match(readFileSync(path.join(dir, 'node-n1-key.pem'), 'utf8'), /^-----BEGIN PRIVATE KEY-----/);
  t.equal(mode(path.join(dir, 'node-n1-key.pem')).toString(8), '600', '--force leaves 0600, not the old 0644');
  const forcedCa = await cairn(dir, 'tls', 'ca', 'create', '--force');
  t.equal(forcedCa.code, 0);
  t.not(readFileSync(path.join(dir, 'cairn-ca.pem'), 'utf8'), caBefore);
});

t.test('--dir, --ca and --ca-key', async (t) => {
  const root = mkdtempSync(path.join(os.tmpdir(), 'cairn-tls-'));
  t.equal((await cairn(root, 'tls', 'ca', 'create', '--dir', 'ca')).code, 0);
  t.equal(mode(path.join(root, 'ca')).toString(8), '700', 'a missing --dir is created, private');
  const ok = await cairn(root, 'tls', 'cert', 'create', '--node', 'n2', '--dir', 'n2', '--ca', 'ca/cairn-ca.pem', '--ca-key', 'ca/cairn-ca-key.pem');
  t.equal(ok.code, 0, ok.err);
  const made = path.join(root, 'n2');
  const other = await cairn(root, 'tls', 'cert', 'create', '--node', 'n3', '--dir', 'n3', '--ca', 'ca/cairn-ca.pem', '--ca-key', 'n2/node-n2-key.pem');
  t.equal(other.code, 2, 'a CA key that is not the CA certificate\'s');
  t.match(other.err, /the CA key does not belong to the CA certificate/);
  t.same(readdirSync(made).sort(), ['node-n2-key.pem', 'node-n2.pem']);
});

t.test('usage errors: exit 2, one line, nothing written', async (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'cairn-tls-'));
  const cases: [string[], RegExp][] = [
    [['tls', 'cert', 'create', '--node', 'n1'], /cannot read the CA certificate .*cairn-ca\.pem: ENOENT.*cairn tls ca create/],
    [['tls', 'cert', 'create'], /give exactly one of --node <id> or --client <name>/],
    [['tls', 'cert', 'create', '--node', 'n1', '--client', 'a'], /give exactly one of/],
    [['tls', 'cert', 'create', '--client', 'a', '--host', 'x'], /--host applies to node certificates only/],
    [['tls', 'cert', 'create', '--node', 'N_1'], /--node must be a node id: a lowercase DNS label.*got 'N_1'/],
    [['tls', 'ca', 'create', '--days', '0'], /must be a number of days from 1 to 36500, got '0'/],
  ];
  for (const [args, message] of cases) {
    const r = await cairn(dir, ...args);
    t.equal(r.code, 2, args.join(' '));
    t.match(r.err, message, args.join(' '));
  }
  t.equal((await cairn(dir, 'tls', 'ca', 'create')).code, 0);
  const badHost = await cairn(dir, 'tls', 'cert', 'create', '--node', 'n1', '--host', 'not a host');
  t.equal(badHost.code, 2);
  t.match(badHost.err, /host "not a host" is neither an IP address nor a DNS name/);
  t.same(readdirSync(dir).sort(), ['cairn-ca-key.pem', 'cairn-ca.pem']);
});
