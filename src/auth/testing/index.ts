/**
 * Test helpers: a throwaway cluster PKI in a temporary directory. For tests only (never shipped
 * code): the server's and the cluster tests' TLS setups can use it too.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createCa, createClientCert, createNodeCert, type PemPair } from '../certificates.js';
import type { TlsFiles } from '../material.js';

export interface TestPki {
  readonly dir: string;
  readonly ca: PemPair;
  /** The CA certificate's file. */
  readonly caFile: string;
  /** Issues a node certificate and writes it as `<prefix>.pem` / `<prefix>-key.pem` (prefix default `node-<id>`). */
  node(nodeId: string, options?: { hosts?: string[]; prefix?: string; now?: Date; days?: number }): Promise<TlsFiles & PemPair>;
  /** Issues a client certificate and writes it as `client-<name>.pem` / `client-<name>-key.pem`. */
  client(name: string): Promise<TlsFiles & PemPair>;
  /** Removes the directory. */
  cleanup(): Promise<void>;
}

export async function makeTestPki(options: { name?: string; dir?: string } = {}): Promise<TestPki> {
  const dir = options.dir ?? (await mkdtemp(path.join(tmpdir(), 'cairn-pki-')));
  const ca = await createCa({ name: options.name ?? 'Cairn Test CA', days: 3650 });
  const caFile = path.join(dir, 'ca.pem');
  await writeFile(caFile, ca.certPem, { mode: 0o600 });
  const write = async (prefix: string, pair: PemPair): Promise<TlsFiles & PemPair> => {
    const certFile = path.join(dir, `${prefix}.pem`);
    const keyFile = path.join(dir, `${prefix}-key.pem`);
    await writeFile(certFile, pair.certPem, { mode: 0o600 });
    await writeFile(keyFile, pair.keyPem, { mode: 0o600 });
    return { caFile, certFile, keyFile, ...pair };
  };
  return {
    dir,
    ca,
    caFile,
    node: async (nodeId, o = {}) =>
      write(o.prefix ?? `node-${nodeId}`, await createNodeCert(ca, { nodeId, hosts: o.hosts ?? [], days: o.days ?? 30, ...(o.now ? { now: o.now } : {}) })),
    client: async (name) => write(`client-${name}`, await createClientCert(ca, { name, days: 30 })),
    cleanup: () => rm(dir, { recursive: true, force: true }),
  };
}
export { refAuthorize, refPatternsNaming, refSomeItemVisible, type RefIdentity, type RefRule, type RefTarget, type RefUniverse } from './acl-reference.js';
