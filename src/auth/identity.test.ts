// Reading identities (identity.ts): only one well-formed cairn:// URI SAN counts.
import { X509Certificate } from 'node:crypto';
import t from 'tap';
import { callIdentity, clientIdentityUri, createCa, createNodeCert, formatIdentity, nodeIdentityUri, parseIdentityUri, peerIdentity } from './index.js';

t.test('parseIdentityUri accepts exactly the two forms', async (t) => {
  t.same(parseIdentityUri('cairn://node/n1'), { kind: 'node', id: 'n1' });
  t.same(parseIdentityUri('cairn://client/ops.alice_2'), { kind: 'client', name: 'ops.alice_2' });
  for (const bad of ['cairn://node/', 'cairn://node/N1', 'cairn://node/n1/x', 'cairn://node/n1?x', 'cairn://node/-n1', 'CAIRN://node/n1', 'cairn://nodes/n1', 'cairn://client/', 'cairn://client/a b', 'spiffe://node/n1', 'cairn://node/a.b']) {
    t.equal(parseIdentityUri(bad), undefined, bad);
  }
  t.equal(nodeIdentityUri('n1'), 'cairn://node/n1');
  t.equal(clientIdentityUri('alice'), 'cairn://client/alice');
  t.throws(() => nodeIdentityUri('a.b'), /not a lowercase DNS label/);
  t.equal(formatIdentity(undefined), 'anonymous');
  t.equal(formatIdentity({ kind: 'client', name: 'x' }), 'client x');
});

t.test('peerIdentity reads the DER handed over by TLS; nothing without it', async (t) => {
  const ca = await createCa({ name: 'CA' });
  const cert = new X509Certificate((await createNodeCert(ca, { nodeId: 'n7' })).certPem);
  t.same(peerIdentity({ raw: cert.raw, fingerprint256: cert.fingerprint256 }), { kind: 'node', id: 'n7' });
  t.same(peerIdentity({ raw: cert.raw, fingerprint256: cert.fingerprint256 }), { kind: 'node', id: 'n7' }, 'again, from the cache');
  t.same(peerIdentity({ raw: cert.raw }), { kind: 'node', id: 'n7' }, 'without a fingerprint: parsed, not cached');
  t.equal(peerIdentity(undefined), undefined);
  t.equal(peerIdentity(null), undefined);
  t.equal(peerIdentity({ raw: Buffer.alloc(0) }), undefined, 'Node gives an empty object for no certificate');
  t.equal(peerIdentity({ raw: Buffer.from('not DER') }), undefined);
  t.same(callIdentity({ getAuthContext: () => ({ sslPeerCertificate: { raw: cert.raw } }) }), { kind: 'node', id: 'n7' });
  t.equal(callIdentity({ getAuthContext: () => ({}) }), undefined, 'grpc-js gives {} for an unauthorized or plain connection');
});
