/**
 * Making the cluster's certificates: a CA, node certificates, client certificates. ECDSA P-256
 * keys and SHA-256 signatures, made by Node's WebCrypto through @peculiar/x509 (README.md says
 * why that library); no ASN.1 is written by hand here.
 *
 * Profiles (RFC 5280):
 * - CA: basicConstraints cA=true pathLen=0 (critical), keyUsage keyCertSign+cRLSign (critical).
 * - node: cA=false, keyUsage digitalSignature, extKeyUsage serverAuth+clientAuth, SAN with
 *   DNS localhost, IP 127.0.0.1 and ::1, the given hosts, and URI `cairn://node/<id>`; CN=<id>.
 * - client: cA=false, keyUsage digitalSignature, extKeyUsage clientAuth only (it cannot serve),
 *   SAN URI `cairn://client/<name>`; CN=<name>.
 * Private keys are PKCS#8 PEM ("PRIVATE KEY"), which Node's TLS and grpc-js read.
 */
import { isIP } from 'node:net';
import { createPrivateKey, randomBytes, webcrypto, X509Certificate as NodeX509 } from 'node:crypto';
import type * as X509 from '@peculiar/x509';
import { x509Lib } from './x509-lib.js';
import { clientIdentityUri, nodeIdentityUri } from './identity.js';


const ALGORITHM = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;
/** Certificates start this long before "now", so a peer whose clock is a little behind accepts them. */
const BACKDATE_MS = 5 * 60_000;
const DAY_MS = 86_400_000;
export const DEFAULT_CA_DAYS = 1825;
export const DEFAULT_CERT_DAYS = 365;

export interface PemPair {
  /** The certificate, PEM. */
  readonly certPem: string;
  /** Its private key, PKCS#8 PEM. */
  readonly keyPem: string;
}

export interface CaOptions {
  /** The CA's common name. Default: `Cairn CA <8 random hex digits>`, so two clusters' CAs differ by name too. */
  readonly name?: string;
  /** Validity in days from now. Default 1825 (five years). */
  readonly days?: number;
  /** The time to start from (tests). Default: the current time. */
  readonly now?: Date;
}

export interface NodeCertOptions {
  /** The node's id (`--node-id`), a lowercase DNS label. */
  readonly nodeId: string;
  /** DNS names and IP addresses peers and clients dial this node by; loopback names are always added. */
  readonly hosts?: readonly string[];
  /** Validity in days. Default 365. */
  readonly days?: number;
  readonly now?: Date;
}

export interface ClientCertOptions {
  readonly name: string;
  /** Validity in days. Default 365. */
  readonly days?: number;
  readonly now?: Date;
}

const LOOPBACK_HOSTS = ['localhost', '127.0.0.1', '::1'] as const;

function checkDays(days: number | undefined, fallback: number): number {
  const d = days ?? fallback;
  if (!Number.isSafeInteger(d) || d < 1 || d > 36500) throw new TypeError(`days must be an integer from 1 to 36500, got ${String(days)}`);
  return d;
}

/** A positive 127-bit serial number (RFC 5280 §4.1.2.2: at most 20 octets, positive). */
function serialNumber(): string {
  const bytes = randomBytes(16);
  bytes[0] = bytes[0]! & 0x7f;
  return bytes.toString('hex');
}

/** One X.500 name value: RFC 4514 escaping of the characters that would change its structure. */
function escapeDn(value: string): string {
  return value.replace(/[\\,+"<>;=]/g, (c) => `\\${c}`).replace(/^[ #]/, (c) => `\\${c}`).replace(/ $/, '\\ ');
}

function validity(now: Date | undefined, days: number): { notBefore: Date; notAfter: Date } {
  const start = (now ?? new Date()).getTime();
  return { notBefore: new Date(start - BACKDATE_MS), notAfter: new Date(start + days * DAY_MS) };
}

async function generateKeys(): Promise<webcrypto.CryptoKeyPair> {
  return (await webcrypto.subtle.generateKey(ALGORITHM, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
}

async function keyPem(key: webcrypto.CryptoKey): Promise<string> {
  const x509 = x509Lib();
  const der = await webcrypto.subtle.exportKey('pkcs8', key);
  return x509.PemConverter.encode(der, 'PRIVATE KEY');
}

/** Creates a self-signed cluster CA. */
export async function createCa(options: CaOptions = {}): Promise<PemPair> {
  const x509 = x509Lib();
  const days = checkDays(options.days, DEFAULT_CA_DAYS);
  const name = options.name ?? `Cairn CA ${randomBytes(4).toString('hex')}`;
  if (name.trim() === '' || name.length > 64) throw new TypeError(`the CA name must be 1 to 64 characters, got ${JSON.stringify(name)}`);
  const keys = await generateKeys();
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: serialNumber(),
    name: `CN=${escapeDn(name)}`,
    ...validity(options.now, days),
    keys,
    signingAlgorithm: ALGORITHM,
    extensions: [
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
  return { certPem: cert.toString('pem'), keyPem: await keyPem(keys.privateKey) };
}

interface Issuer {
  readonly cert: X509.X509Certificate;
  readonly key: webcrypto.CryptoKey;
}

async function loadIssuer(ca: PemPair): Promise<Issuer> {
  const x509 = x509Lib();
  let cert: X509.X509Certificate;
  try {
    cert = new x509.X509Certificate(ca.certPem);
  } catch (e) {
    throw new TypeError(`the CA certificate is not a PEM X.509 certificate: ${(e as Error).message}`);
  }
  if (!new NodeX509(ca.certPem).ca) throw new TypeError(`the CA certificate (${cert.subject}) is not a CA certificate (basicConstraints cA is not set)`);
  let key: webcrypto.CryptoKey;
  try {
    key = (await webcrypto.subtle.importKey('pkcs8', x509.PemConverter.decodeFirst(ca.keyPem), ALGORITHM, false, ['sign'])) as webcrypto.CryptoKey;
  } catch (e) {
    throw new TypeError(`the CA key is not a PKCS#8 PEM ECDSA P-256 private key: ${(e as Error).message}`);
  }
  let matches = false;
  try {
    matches = new NodeX509(ca.certPem).checkPrivateKey(createPrivateKey(ca.keyPem));
  } catch {
    matches = false;
  }
  if (!matches) throw new TypeError(`the CA key does not belong to the CA certificate (${cert.subject})`);
  return { cert, key };
}

async function issue(
  ca: PemPair,
  subject: string,
  days: number,
  now: Date | undefined,
  usages: readonly string[],
  names: readonly X509.JsonGeneralName[],
): Promise<PemPair> {
  const x509 = x509Lib();
  const issuer = await loadIssuer(ca);
  const keys = await generateKeys();
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: serialNumber(),
    subject: `CN=${escapeDn(subject)}`,
    issuer: issuer.cert.subject,
    ...validity(now, days),
    publicKey: keys.publicKey,
    signingKey: issuer.key,
    signingAlgorithm: ALGORITHM,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension([...usages]),
      new x509.SubjectAlternativeNameExtension([...names]),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
      await x509.AuthorityKeyIdentifierExtension.create(issuer.cert),
    ],
  });
  return { certPem: cert.toString('pem'), keyPem: await keyPem(keys.privateKey) };
}

/** The SAN entries for a node: loopback names, then the given hosts (deduplicated), then its identity URI. */
export function nodeSubjectAltNames(nodeId: string, hosts: readonly string[] = []): X509.JsonGeneralName[] {
  const names: X509.JsonGeneralName[] = [];
  const seen = new Set<string>();
  for (const raw of [...LOOPBACK_HOSTS, ...hosts]) {
    const host = raw.trim().replace(/^\[(.*)\]$/, '$1');
    if (host === '') throw new TypeError('a host must not be empty');
    const ip = isIP(host) !== 0;
    if (!ip && !/^(\*\.)?[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$/.test(host)) {
      throw new TypeError(`host ${JSON.stringify(raw)} is neither an IP address nor a DNS name`);
    }
    const key = ip ? `ip:${host}` : `dns:${host.toLowerCase()}`;
    if (seen.has(key)) continue;
    seen.add(key);
    names.push(ip ? { type: 'ip', value: host } : { type: 'dns', value: host.toLowerCase() });
  }
  names.push({ type: 'url', value: nodeIdentityUri(nodeId) });
  return names;
}

/** Issues a node certificate (server and client authentication) signed by `ca`. */
export async function createNodeCert(ca: PemPair, options: NodeCertOptions): Promise<PemPair> {
  const x509 = x509Lib();
  const names = nodeSubjectAltNames(options.nodeId, options.hosts);
  return issue(ca, options.nodeId, checkDays(options.days, DEFAULT_CERT_DAYS), options.now, [x509.ExtendedKeyUsage.serverAuth, x509.ExtendedKeyUsage.clientAuth], names);
}

/** Issues a client certificate (client authentication only) signed by `ca`. */
export async function createClientCert(ca: PemPair, options: ClientCertOptions): Promise<PemPair> {
  const x509 = x509Lib();
  const uri = clientIdentityUri(options.name);
  return issue(ca, options.name, checkDays(options.days, DEFAULT_CERT_DAYS), options.now, [x509.ExtendedKeyUsage.clientAuth], [{ type: 'url', value: uri }]);
}
