// The one multiplexed port with TLS (credentials.ts), on a real grpc-js server on 127.0.0.1:0:
// client certificates are requested but not required; only a certificate from the cluster CA
// gives the handler an identity; new material after reload() serves new connections.
import { writeFile } from 'node:fs/promises';
import type { PeerCertificate } from 'node:tls';
import * as grpc from '@grpc/grpc-js';
import t, { type Test } from 'tap';
import {
  apiChannelCredentials,
  callIdentity,
  createNodeCert,
  nodeChannelCredentials,
  serverCredentials,
  TlsMaterialStore,
  type PeerIdentity,
} from './index.js';
import { makeTestPki, type TestPki } from './testing/index.js';

const identity = (b: Buffer): Buffer => b;
/** One unary method that answers with the caller's identity as the server sees it. */
const WHO_AM_I = {
  path: '/cairn.test.Auth/WhoAmI',
  requestStream: false,
  responseStream: false,
  requestSerialize: identity,
  requestDeserialize: identity,
  responseSerialize: identity,
  responseDeserialize: identity,
} as const;

async function startServer(t: Test, creds: grpc.ServerCredentials): Promise<string> {
  const server = new grpc.Server();
  server.addService({ whoAmI: WHO_AM_I } as grpc.ServiceDefinition, {
    whoAmI: (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => {
      cb(null, Buffer.from(JSON.stringify(callIdentity(call) ?? null)));
    },
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', creds, (err, p) => (err ? reject(err) : resolve(p))),
  );
  t.teardown(() => new Promise<void>((resolve) => server.tryShutdown(() => resolve())));
  return `127.0.0.1:${port}`;
}

/** Calls WhoAmI on a fresh channel (its own subchannel pool: a new connection every time). */
function whoAmI(address: string, creds: grpc.ChannelCredentials): Promise<PeerIdentity | null> {
  const client = new grpc.Client(address, creds, { 'grpc.use_local_subchannel_pool': 1 });
  return new Promise<PeerIdentity | null>((resolve, reject) => {
    client.makeUnaryRequest(WHO_AM_I.path, identity, identity, Buffer.alloc(0), { deadline: Date.now() + 5000 }, (err, res) => {
      client.close();
      if (err) reject(err);
      else resolve(JSON.parse((res ?? Buffer.from('null')).toString()) as PeerIdentity | null);
    });
  });
}

interface Cluster {
  readonly pki: TestPki;
  readonly server: TlsMaterialStore;
  readonly address: string;
}

async function cluster(t: Test): Promise<Cluster> {
  const pki = await makeTestPki();
  t.teardown(() => pki.cleanup());
  const server = await TlsMaterialStore.open(await pki.node('n1'), { nodeId: 'n1' });
  const address = await startServer(t, serverCredentials(server));
  return { pki, server, address };
}

t.test('(i) a node certificate from the cluster CA: the handler sees the node', async (t) => {
  const { pki, address } = await cluster(t);
  const n2 = await TlsMaterialStore.open(await pki.node('n2'), { nodeId: 'n2' });
  t.same(await whoAmI(address, nodeChannelCredentials(n2)), { kind: 'node', id: 'n2' });
  t.same(await whoAmI(address, nodeChannelCredentials(n2, { expectNodeId: 'n1' })), { kind: 'node', id: 'n2' }, 'and the channel checked the server is n1');
  await t.rejects(whoAmI(address, nodeChannelCredentials(n2, { expectNodeId: 'n3' })), { code: grpc.status.UNAVAILABLE }, 'a channel expecting another node refuses the server');
  const alice = await pki.client('alice');
  t.same(
    await whoAmI(address, apiChannelCredentials({ ca: Buffer.from(pki.ca.certPem), cert: Buffer.from(alice.certPem), key: Buffer.from(alice.keyPem) })),
    { kind: 'client', name: 'alice' },
    'a client certificate gives a client identity',
  );
});

t.test('(ii) no client certificate: the call succeeds and the handler sees no identity', async (t) => {
  const { pki, address } = await cluster(t);
  t.equal(await whoAmI(address, apiChannelCredentials({ ca: Buffer.from(pki.ca.certPem) })), null);
});

t.test('(iii) a client certificate from another CA: the call succeeds anonymously', async (t) => {
  const { pki, address } = await cluster(t);
  const other = await makeTestPki({ name: 'Cairn Test CA' }); // even the same name: the signature decides
  t.teardown(() => other.cleanup());
  const impostor = await other.node('n1');
  t.equal(
    await whoAmI(address, apiChannelCredentials({ ca: Buffer.from(pki.ca.certPem), cert: Buffer.from(impostor.certPem), key: Buffer.from(impostor.keyPem) })),
    null,
    'a certificate claiming n1 from another CA carries no identity',
  );
  await t.rejects(
    whoAmI(address, apiChannelCredentials({ ca: Buffer.from(other.ca.certPem) })),
    { code: grpc.status.UNAVAILABLE },
    'and a client trusting only the other CA does not accept the server',
  );
});

t.test('(iii) an expired certificate from the cluster CA: anonymous too (TLS verification includes validity)', async (t) => {
  const { pki, address } = await cluster(t);
  const expired = await pki.node('n2', { now: new Date(Date.now() - 10 * 86_400_000), days: 1 });
  t.equal(
    await whoAmI(address, apiChannelCredentials({ ca: Buffer.from(pki.ca.certPem), cert: Buffer.from(expired.certPem), key: Buffer.from(expired.keyPem) })),
    null,
  );
});

t.test('(iv) rotation: after reload(), new connections get the new server certificate and CA', async (t) => {
  const { pki, server, address } = await cluster(t);
  const seen: string[] = [];
  const watching = (ca: string): grpc.ChannelCredentials =>
    grpc.credentials.createSsl(Buffer.from(ca), null, null, {
      checkServerIdentity: (_host: string, cert: PeerCertificate) => {
        seen.push(cert.fingerprint256);
        return undefined;
      },
    });
  await whoAmI(address, watching(pki.ca.certPem));
  t.same(seen, [server.current.fingerprint256], 'the first certificate is served');

  // Same CA, new certificate (routine renewal).
  const renewed = await createNodeCert(pki.ca, { nodeId: 'n1', hosts: ['n1.example'] });
  await writeFile(server.current.files.certFile, renewed.certPem);
  await writeFile(server.current.files.keyFile, renewed.keyPem);
  const r = await server.reload();
  t.ok(r.ok && r.changed);
  await whoAmI(address, watching(pki.ca.certPem));
  t.equal(seen.length, 2);
  t.equal(seen[1], server.current.fingerprint256, 'a new connection gets the renewed certificate');
  t.not(seen[1], seen[0]);

  // A new CA altogether: the server's certificate and the CA it verifies clients against change.
  const next = await makeTestPki({ name: 'Cairn Test CA 2' });
  t.teardown(() => next.cleanup());
  const nextN1 = await next.node('n1');
  const nextN2 = await TlsMaterialStore.open(await next.node('n2'));
  await t.rejects(whoAmI(address, apiChannelCredentials({ ca: Buffer.from(next.ca.certPem) })), { code: grpc.status.UNAVAILABLE }, 'before: a client of the new CA refuses the server');
  t.equal(await whoAmI(address, nodeChannelCredentials(nextN2)).catch(() => 'refused'), 'refused', 'before: a node of the new CA is refused by its channel');
  const oldN2 = await TlsMaterialStore.open(await pki.node('n2', { prefix: 'old-n2' })); // before the shared CA file changes
  await writeFile(server.current.files.caFile, next.ca.certPem);
  await writeFile(server.current.files.certFile, nextN1.certPem);
  await writeFile(server.current.files.keyFile, nextN1.keyPem);
  t.ok((await server.reload()).ok);
  t.same(await whoAmI(address, nodeChannelCredentials(nextN2)), { kind: 'node', id: 'n2' }, 'after: a node of the new CA is served and identified');
  await t.rejects(whoAmI(address, nodeChannelCredentials(oldN2)), { code: grpc.status.UNAVAILABLE }, 'after: a node of the old CA no longer accepts the server');
  t.equal(
    await whoAmI(address, apiChannelCredentials({ ca: Buffer.from(next.ca.certPem), cert: Buffer.from(oldN2.current.cert), key: Buffer.from(oldN2.current.key) })),
    null,
    'after: a client certificate of the old CA carries no identity',
  );

  // A bad reload keeps serving the last good material.
  await writeFile(server.current.files.certFile, 'garbage');
  const bad = await server.reload();
  t.notOk(bad.ok);
  t.same(await whoAmI(address, nodeChannelCredentials(nextN2)), { kind: 'node', id: 'n2' }, 'still served after a failed reload');
});

t.test('node channels rotate too: a reload changes the certificate presented on new connections', async (t) => {
  const { pki, address } = await cluster(t);
  const files = await pki.node('n2');
  const n2 = await TlsMaterialStore.open(files);
  t.same(await whoAmI(address, nodeChannelCredentials(n2)), { kind: 'node', id: 'n2' });
  // Same files now hold n3's certificate (a store opened without nodeId accepts any node).
  const n3 = await createNodeCert(pki.ca, { nodeId: 'n3' });
  await writeFile(files.certFile, n3.certPem);
  await writeFile(files.keyFile, n3.keyPem);
  t.ok((await n2.reload()).ok);
  t.same(await whoAmI(address, nodeChannelCredentials(n2)), { kind: 'node', id: 'n3' });
});

t.test('why not ServerCredentials.createSsl: it cannot request a client certificate without requiring one', async (t) => {
  const pki = await makeTestPki();
  t.teardown(() => pki.cleanup());
  const n1 = await pki.node('n1');
  const pair = [{ cert_chain: Buffer.from(n1.certPem), private_key: Buffer.from(n1.keyPem) }];
  const ca = Buffer.from(pki.ca.certPem);
  const requiring = await startServer(t, grpc.ServerCredentials.createSsl(ca, pair, true));
  await t.rejects(whoAmI(requiring, apiChannelCredentials({ ca })), { code: grpc.status.UNAVAILABLE }, 'checkClientCertificate=true: a client without a certificate is refused');
  const notAsking = await startServer(t, grpc.ServerCredentials.createSsl(ca, pair, false));
  const n2 = await TlsMaterialStore.open(await pki.node('n2'));
  t.equal(await whoAmI(notAsking, nodeChannelCredentials(n2)), null, 'checkClientCertificate=false: a node certificate is never asked for');
});
