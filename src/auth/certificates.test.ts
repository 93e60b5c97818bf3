// The certificate profiles (certificates.ts): what a CA, a node and a client certificate hold,
// read back with Node's own X.509 parser, not the library that wrote them.
import { X509Certificate, createPrivateKey } from 'node:crypto';
import t from 'tap';
import { createCa, createClientCert, createNodeCert, identityOfDer, nodeSubjectAltNames } from './index.js';

const SERVER_AUTH = '1.3.6.1.5.5.7.3.1';
const CLIENT_AUTH = '1.3.6.1.5.5.7.3.2';

t.test('createCa: a self-signed CA certificate with the name and validity asked for', async (t) => {
  const now = new Date('2026-01-01T00:00:00Z');
  const ca = await createCa({ name: 'Test CA, one', days: 10, now });
  const cert = new X509Certificate(ca.certPem);
  t.ok(cert.ca, 'basicConstraints cA');
  t.equal(cert.subject, 'CN=Test CA\\, one', 'the name, escaped');
  t.ok(cert.checkIssued(cert) && cert.verify(cert.publicKey), 'self-signed');
  t.equal(new Date(cert.validTo).getTime(), now.getTime() + 10 * 86_400_000);
  t.ok(new Date(cert.validFrom).getTime() < now.getTime(), 'backdated a little for clock skew');
  t.equal(cert.publicKey.asymmetricKeyDetails?.namedCurve, 'prime256v1', 'ECDSA P-256');
  t.ok(cert.checkPrivateKey(createPrivateKey(ca.keyPem)), 'the key is the certificate\'s');
  t.match(ca.keyPem, /^-----BEGIN PRIVATE KEY-----/, 'PKCS#8');
  const other = await createCa();
  t.match(new X509Certificate(other.certPem).subject, /^CN=Cairn CA [0-9a-f]{8}$/, 'default name is unique per CA');
});

t.test('createNodeCert: signed by the CA, server and client auth, loopback + hosts + identity in the SAN', async (t) => {
  const ca = await createCa({ name: 'CA' });
  const node = await createNodeCert(ca, { nodeId: 'n1', hosts: ['10.0.0.1', 'n1.cairn.internal', 'localhost', '[fd00::1]'] });
  const cert = new X509Certificate(node.certPem);
  const caCert = new X509Certificate(ca.certPem);
  t.ok(cert.checkIssued(caCert) && cert.verify(caCert.publicKey), 'chains to the CA');
  t.notOk(cert.ca, 'not a CA');
  t.equal(cert.subject, 'CN=n1');
  t.same(cert.keyUsage?.sort(), [SERVER_AUTH, CLIENT_AUTH].sort(), 'extKeyUsage serverAuth + clientAuth');
  t.equal(
    cert.subjectAltName,
    'DNS:localhost, IP Address:127.0.0.1, IP Address:0:0:0:0:0:0:0:1, IP Address:10.0.0.1, DNS:n1.cairn.internal, IP Address:FD00:0:0:0:0:0:0:1, URI:cairn://node/n1',
    'localhost once, IPs as IPs, the identity URI last',
  );
  t.same(identityOfDer(cert.raw), { kind: 'node', id: 'n1' });
  t.ok(cert.checkHost('n1.cairn.internal') && cert.checkIP('10.0.0.1') && cert.checkIP('127.0.0.1'));
  t.ok(cert.checkPrivateKey(createPrivateKey(node.keyPem)));
  t.not(new X509Certificate((await createNodeCert(ca, { nodeId: 'n1' })).certPem).serialNumber, cert.serialNumber, 'random serials');
});

t.test('createClientCert: client auth only, identity cairn://client/<name>', async (t) => {
  const ca = await createCa({ name: 'CA' });
  const cert = new X509Certificate((await createClientCert(ca, { name: 'ops.alice' })).certPem);
  t.ok(cert.verify(new X509Certificate(ca.certPem).publicKey));
  t.same(cert.keyUsage, [CLIENT_AUTH], 'cannot serve TLS');
  t.equal(cert.subjectAltName, 'URI:cairn://client/ops.alice');
  t.same(identityOfDer(cert.raw), { kind: 'client', name: 'ops.alice' });
});

t.test('bad input is refused with a message naming it', async (t) => {
  const ca = await createCa({ name: 'CA' });
  await t.rejects(createNodeCert(ca, { nodeId: 'N1' }), /node id "N1" is not a lowercase DNS label/);
  await t.rejects(createNodeCert(ca, { nodeId: 'n1', hosts: ['a b'] }), /host "a b" is neither an IP address nor a DNS name/);
  await t.rejects(createClientCert(ca, { name: '-x' }), /client name "-x"/);
  await t.rejects(createCa({ days: 0 }), /days must be an integer from 1 to 36500, got 0/);
  const leaf = await createNodeCert(ca, { nodeId: 'n1' });
  await t.rejects(createNodeCert(leaf, { nodeId: 'n2' }), /is not a CA certificate/, 'a node certificate cannot issue');
  t.throws(() => nodeSubjectAltNames('n1', ['']), /must not be empty/);
  const other = await createCa({ name: 'Other' });
  await t.rejects(createNodeCert({ certPem: ca.certPem, keyPem: other.keyPem }, { nodeId: 'n1' }), /the CA key does not belong to the CA certificate \(CN=CA\)/);
});
