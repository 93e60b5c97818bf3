/**
 * What the security tests share: the cluster's PKI plus a foreign one (another CA), the flags
 * that start a node with TLS, and an attacker's raw gRPC client of the cluster service (the
 * service definitions of src/forwarding, i.e. exactly what the nodes speak).
 */
import * as grpc from '@grpc/grpc-js';
import { makeTestPki, type TestPki } from '../../src/auth/testing/index.js';
import { ClientPool, type ClusterClient, type ForwardRequestMsg, type ForwardResponseMsg, type HelloResponseMsg } from '../../src/forwarding/index.js';
import type { Test } from 'tap';
import { request, type ClusterNode, type ClusterTls } from './harness.js';

export interface Pkis {
  /** The cluster CA and its node certificates (written as node-<id>.pem on first use). */
  readonly cluster: TestPki;
  /** Another CA: certificates that are well-formed but not the cluster's. */
  readonly foreign: TestPki;
  /** TLS for `Cluster.start`: every node gets its own cluster-CA certificate. */
  readonly tls: ClusterTls;
}

/** Node certificates for n1..n5 from the cluster CA; a foreign CA; both removed at teardown. */
export async function makePkis(t: Test, nodeFlags?: (id: string, pkis: Omit<Pkis, 'tls'>) => readonly string[] | undefined): Promise<Pkis> {
  const cluster = await makeTestPki({ name: 'Cairn Cluster CA' });
  const foreign = await makeTestPki({ name: 'Some Other CA' });
  t.teardown(async () => {
    await cluster.cleanup();
    await foreign.cleanup();
  });
  const files = new Map<string, readonly string[]>();
  for (const id of ['n1', 'n2', 'n3', 'n4', 'n5']) {
    const f = await cluster.node(id);
    files.set(id, ['--tls-ca-file', f.caFile, '--tls-cert-file', f.certFile, '--tls-key-file', f.keyFile]);
  }
  const tls: ClusterTls = {
    caPem: cluster.ca.certPem,
    nodeFlags: (id) => nodeFlags?.(id, { cluster, foreign }) ?? files.get(id) ?? [],
  };
  return { cluster, foreign, tls };
}

/** mTLS with `cert`/`key` (or none), verifying the server against `ca`. */
export function credentials(ca: string, pair?: { readonly certPem: string; readonly keyPem: string }): grpc.ChannelCredentials {
  return grpc.credentials.createSsl(Buffer.from(ca), pair ? Buffer.from(pair.keyPem) : null, pair ? Buffer.from(pair.certPem) : null);
}

/** A cluster-service client with the given credentials (the pool is closed at teardown). */
export function attackerClient(t: Test, address: string, creds: grpc.ChannelCredentials): ClusterClient {
  const pool = new ClientPool(() => creds);
  t.teardown(() => pool.close());
  return pool.get(address);
}

export interface CallOutcome<T> {
  /** 0 (OK) or the gRPC status code of the call. */
  readonly code: number;
  readonly details: string;
  readonly res: T | undefined;
}

export function hello(client: ClusterClient, from: string, address = '127.0.0.1:1'): Promise<CallOutcome<HelloResponseMsg>> {
  return new Promise((resolve) => {
    client.hello({ clusterId: '', from, address, bootstrapExpect: 0 }, { deadline: Date.now() + 5000 }, (err, res) => resolve({ code: err?.code ?? 0, details: err?.details ?? 'OK', res }));
  });
}

export function forward(client: ClusterClient, req: Partial<ForwardRequestMsg> & { clusterId: string; from: string }): Promise<CallOutcome<ForwardResponseMsg>> {
  return new Promise((resolve) => {
    client.forward({ timeoutMs: 3000, ...req }, { deadline: Date.now() + 8000 }, (err, res) => resolve({ code: err?.code ?? 0, details: err?.details ?? 'OK', res }));
  });
}

export interface Batch {
  clusterId: string;
  from: string;
  to: string;
  messages: Uint8Array[];
}

/** One Raft stream carrying `batches`; resolves with the call's status and how many messages the node passed on. */
export function raftCall(client: ClusterClient, batches: readonly Batch[]): Promise<{ code: number; details: string; received: number | undefined }> {
  return new Promise((resolve) => {
    const call = client.raft((err, ack) => resolve({ code: err?.code ?? 0, details: err?.details ?? 'OK', received: ack?.received }));
    call.on('error', () => undefined);
    for (const b of batches) call.write(b);
    call.end();
  });
}

/** A labelled counter of a node's /metrics, summed over its label values and split by `label`. */
export async function counter(node: ClusterNode, name: string): Promise<{ total: number; by: Map<string, number> }> {
  const r = await request(`${node.url}/metrics`);
  const by = new Map<string, number>();
  let total = 0;
  if (typeof r.body === 'string') {
    for (const m of r.body.matchAll(new RegExp(`^${name}(?:\\{([^}]*)\\})? ([0-9.e+]+)$`, 'gm'))) {
      const v = Number(m[2]);
      by.set(m[1] ?? '', v);
      total += v;
    }
  }
  return { total, by };
}

export const describeCounter = (c: { total: number; by: Map<string, number> }): string => `${c.total} (${[...c.by].map(([k, v]) => `${k}=${v}`).join(', ')})`;
