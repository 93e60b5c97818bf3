// Loading TLS material (material.ts): every check fails with an error naming the file and the
// problem, and the store keeps the old material when a reload finds bad files.
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import t, { type Test } from 'tap';
import { createCa, createClientCert, createNodeCert, loadTlsMaterial, TlsMaterialError, TlsMaterialStore, type TlsFiles } from './index.js';
import { makeTestPki } from './testing/index.js';

async function expectError(t: Test, files: TlsFiles, code: string, file: string, message: RegExp, options = {}): Promise<void> {
  try {
    await loadTlsMaterial(files, options);
    t.fail(`expected ${code}`);
  } catch (e) {
    t.ok(e instanceof TlsMaterialError, String(e));
    const err = e as TlsMaterialError;
    t.equal(err.code, code);
    t.equal(err.file, file, 'names the file');
    t.ok(err.message.startsWith(`${file}: `), err.message);
    t.match(err.message, message);
  }
}

t.test('good node material loads with its identity', async (t) => {
  const pki = await makeTestPki();
  t.teardown(() => pki.cleanup());
  const files = await pki.node('n1', { hosts: ['10.0.0.1'] });
  const m = await loadTlsMaterial(files, { nodeId: 'n1' });
  t.same(m.identity, { kind: 'node', id: 'n1' });
  t.equal(m.cert.toString(), files.certPem);
  t.match(m.fingerprint256, /^([0-9A-F]{2}:){31}[0-9A-F]{2}$/);
  t.ok(m.notAfter.getTime() > Date.now());
  const client = await pki.client('alice');
  t.same((await loadTlsMaterial(client, { expect: 'client' })).identity, { kind: 'client', name: 'alice' });
  t.same((await loadTlsMaterial(client, { expect: 'any' })).identity, { kind: 'client', name: 'alice' });
});

t.test('each problem names its file', async (t) => {
  const pki = await makeTestPki();
  t.teardown(() => pki.cleanup());
  const n1 = await pki.node('n1');
  const other = await makeTestPki({ name: 'Other CA' });
  t.teardown(() => other.cleanup());
  const foreign = await other.node('n1');

  await expectError(t, { ...n1, caFile: path.join(pki.dir, 'missing.pem') }, 'TLS_FILE_UNREADABLE', path.join(pki.dir, 'missing.pem'), /cannot read: ENOENT/);
  await expectError(t, { ...n1, caFile: n1.keyFile }, 'TLS_NOT_PEM', n1.keyFile, /is not a PEM certificate .*expected the cluster CA certificate/);
  await expectError(t, { ...n1, caFile: n1.certFile }, 'TLS_NOT_CA', n1.certFile, /\(CN=n1\) is not a CA certificate/);
  await expectError(t, { ...n1, certFile: foreign.certFile }, 'TLS_NOT_ISSUED_BY_CA', foreign.certFile, /is not signed by the CA in .*ca\.pem \(CN=Cairn Test CA\)/);
  await expectError(t, { ...n1, keyFile: foreign.keyFile }, 'TLS_KEY_MISMATCH', foreign.keyFile, /the key does not belong to the certificate in .*node-n1\.pem/);
  await expectError(t, { ...n1, keyFile: n1.certFile }, 'TLS_NOT_PEM', n1.certFile, /is not a PEM private key/);
  await expectError(t, n1, 'TLS_EXPIRED', n1.certFile, /the certificate \(CN=n1\) expired at/, { now: () => new Date(Date.now() + 31 * 86_400_000), expect: 'node' });
  await expectError(t, n1, 'TLS_NOT_YET_VALID', pki.caFile, /not valid before .*clock/, { now: () => new Date(Date.now() - 86_400_000) });
  await expectError(t, n1, 'TLS_WRONG_IDENTITY', n1.certFile, /is for node n1, but this node is n2/, { nodeId: 'n2' });
  const client = await pki.client('alice');
  await expectError(t, client, 'TLS_WRONG_IDENTITY', client.certFile, /is for client alice, but a node certificate is needed here/);
});

t.test('a certificate whose SAN has no cairn:// URI has no identity', async (t) => {
  // Two identities would be ambiguous; none is "not a Cairn certificate". Both are refused.
  const pki = await makeTestPki();
  t.teardown(() => pki.cleanup());
  const { X509CertificateGenerator, BasicConstraintsExtension, SubjectAlternativeNameExtension, X509Certificate, PemConverter, cryptoProvider } = await import('@peculiar/x509');
  const crypto = cryptoProvider.get();
  const alg = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' };
  const caKey = await crypto.subtle.importKey('pkcs8', PemConverter.decodeFirst(pki.ca.keyPem), alg, false, ['sign']);
  const make = async (uris: string[], file: string): Promise<TlsFiles> => {
    const keys = (await crypto.subtle.generateKey(alg, true, ['sign', 'verify'])) as { publicKey: unknown; privateKey: unknown };
    const cert = await X509CertificateGenerator.create({
      serialNumber: '0a',
      subject: 'CN=n9',
      issuer: new X509Certificate(pki.ca.certPem).subject,
      notBefore: new Date(Date.now() - 60_000),
      notAfter: new Date(Date.now() + 86_400_000),
      publicKey: keys.publicKey as never,
      signingKey: caKey,
      signingAlgorithm: alg,
      extensions: [new BasicConstraintsExtension(false), new SubjectAlternativeNameExtension([{ type: 'dns', value: 'localhost' }, ...uris.map((value) => ({ type: 'url' as const, value }))])],
    });
    const certFile = path.join(pki.dir, `${file}.pem`);
    const keyFile = path.join(pki.dir, `${file}-key.pem`);
    await writeFile(certFile, cert.toString('pem'));
    await writeFile(keyFile, PemConverter.encode(await crypto.subtle.exportKey('pkcs8', keys.privateKey as never), 'PRIVATE KEY'));
    return { caFile: pki.caFile, certFile, keyFile };
  };
  const none = await make(['spiffe://example/n9'], 'none');
  await expectError(t, none, 'TLS_NO_IDENTITY', none.certFile, /carries no Cairn identity/);
  const two = await make(['cairn://node/n1', 'cairn://node/n2'], 'two');
  await expectError(t, two, 'TLS_NO_IDENTITY', two.certFile, /carries no Cairn identity/);
  const bad = await make(['cairn://node/N1'], 'bad');
  await expectError(t, bad, 'TLS_NO_IDENTITY', bad.certFile, /carries no Cairn identity/);
  const good = await make(['cairn://node/n9'], 'good');
  t.same((await loadTlsMaterial(good)).identity, { kind: 'node', id: 'n9' }, 'the same construction with one URI is accepted');
});

t.test('TlsMaterialStore.reload: new good files replace, bad files keep the old material', async (t) => {
  const pki = await makeTestPki();
  t.teardown(() => pki.cleanup());
  const files = await pki.node('n1');
  const store = await TlsMaterialStore.open(files, { nodeId: 'n1' });
  const first = store.current;
  const updates: string[] = [];
  const listener = (u: { certificate: Buffer } | null): void => void updates.push(u?.certificate.toString() ?? 'null');
  store.addIdentityCertificateListener(listener);
  await new Promise((r) => process.nextTick(r));
  t.same(updates, [files.certPem], 'a new listener gets the current material on the next tick');

  let r = await store.reload();
  t.ok(r.ok && !r.changed, 'same files: ok, unchanged');
  t.equal(updates.length, 1, 'no update for unchanged files');

  // Rotate: a new certificate for the same node.
  const next = await createNodeCert(pki.ca, { nodeId: 'n1', hosts: ['n1.example'] });
  await writeFile(files.certFile, next.certPem);
  await writeFile(files.keyFile, next.keyPem);
  r = await store.reload();
  t.ok(r.ok && r.changed, 'rotated');
  t.equal(store.current.cert.toString(), next.certPem);
  t.same(updates, [files.certPem, next.certPem], 'listeners get the new certificate');

  // Half-written rotation: a new certificate with the old key on disk. Rejected, nothing changes.
  const half = await createNodeCert(pki.ca, { nodeId: 'n1' });
  await writeFile(files.certFile, half.certPem);
  r = await store.reload();
  t.notOk(r.ok);
  if (!r.ok) {
    t.match(r.error.message, /the key does not belong to the certificate/);
    t.equal(r.kept.cert.toString(), next.certPem, 'reports what it kept');
  }
  t.equal(store.current.cert.toString(), next.certPem, 'still serving the last good material');
  t.equal(updates.length, 2, 'no update for bad files');

  // A certificate for another node is refused too (the store was opened for n1).
  const n2 = await createNodeCert(pki.ca, { nodeId: 'n2' });
  await writeFile(files.certFile, n2.certPem);
  await writeFile(files.keyFile, n2.keyPem);
  r = await store.reload();
  t.notOk(r.ok, 'wrong node id refused');
  store.removeIdentityCertificateListener(listener);
  t.not(first, store.current);
});

t.test('TlsMaterialStore.open throws on bad files', async (t) => {
  const pki = await makeTestPki();
  t.teardown(() => pki.cleanup());
  const other = await createCa({ name: 'x' });
  const c = await createClientCert(other, { name: 'x' });
  const files = await pki.node('n1');
  await writeFile(files.certFile, c.certPem);
  await t.rejects(TlsMaterialStore.open(files), { name: 'TlsMaterialError', code: 'TLS_NOT_ISSUED_BY_CA' });
});

t.test('a CA file may hold several CA certificates (moving to a new CA): a certificate of either loads', async (t) => {
  const oldPki = await makeTestPki({ name: 'Old CA' });
  const newPki = await makeTestPki({ name: 'New CA' });
  t.teardown(async () => {
    await oldPki.cleanup();
    await newPki.cleanup();
  });
  const bundle = path.join(newPki.dir, 'bundle.pem');
  await writeFile(bundle, `${oldPki.ca.certPem}${newPki.ca.certPem}`);
  const fromOld = await oldPki.node('n1');
  const fromNew = await newPki.node('n1');
  t.same((await loadTlsMaterial({ ...fromOld, caFile: bundle }, { nodeId: 'n1' })).identity, { kind: 'node', id: 'n1' }, 'issued by the first CA of the bundle');
  t.same((await loadTlsMaterial({ ...fromNew, caFile: bundle }, { nodeId: 'n1' })).identity, { kind: 'node', id: 'n1' }, 'issued by the second');
  const third = await makeTestPki({ name: 'Third CA' });
  t.teardown(() => third.cleanup());
  const stranger = await third.node('n1');
  await t.rejects(loadTlsMaterial({ ...stranger, caFile: bundle }, { nodeId: 'n1' }), /not signed by the CA/, 'issued by neither');
  const notCa = path.join(newPki.dir, 'bundle-with-leaf.pem');
  await writeFile(notCa, `${newPki.ca.certPem}${fromNew.certPem}`);
  await t.rejects(loadTlsMaterial({ ...fromNew, caFile: notCa }, { nodeId: 'n1' }), /is not a CA certificate/, 'a leaf in the CA file is refused');
});
