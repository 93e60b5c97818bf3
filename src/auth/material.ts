/**
 * A node's TLS material on disk: the cluster CA certificate, its own certificate and key.
 * `loadTlsMaterial` reads and checks them (each error names the file and the problem);
 * `TlsMaterialStore` holds the current material, reloads it on demand (SIGHUP) keeping the old
 * material when the new files are wrong, and feeds grpc-js credentials built from it
 * (credentials.ts), so new connections use new certificates without a restart.
 *
 * Checks use Node's own X.509 (`crypto.X509Certificate`): the certificate is issued and signed
 * by the CA (one level: Cairn's CA signs node certificates directly, no intermediates), the key
 * is the certificate's, both are inside their validity period, the CA is a CA, and the
 * certificate carries the expected Cairn identity.
 */
import { readFile } from 'node:fs/promises';
import { createPrivateKey, X509Certificate, type KeyObject } from 'node:crypto';
import type { CaCertificateUpdateListener, IdentityCertificateUpdateListener } from './grpc-types.js';
import { formatIdentity, identityOfDer, type PeerIdentity } from './identity.js';

export interface TlsFiles {
  /** The cluster CA certificate (PEM). */
  readonly caFile: string;
  /** This node's (or client's) certificate (PEM; the first certificate is the leaf). */
  readonly certFile: string;
  /** Its private key (PEM, PKCS#8 or SEC1). */
  readonly keyFile: string;
}

export interface LoadOptions {
  /** Which identity the certificate must carry. Default 'node'. */
  readonly expect?: 'node' | 'client' | 'any';
  /** If set, a node certificate must name exactly this node id (the agent's --node-id). */
  readonly nodeId?: string;
  /** The time to check validity against. Default: the current time. */
  readonly now?: () => Date;
}

export interface TlsMaterial {
  readonly files: TlsFiles;
  /** The files' contents as read (PEM). */
  readonly ca: Buffer;
  readonly cert: Buffer;
  readonly key: Buffer;
  readonly identity: PeerIdentity;
  readonly notAfter: Date;
  /** SHA-256 fingerprint of the certificate, for logs ("AB:CD:..."). */
  readonly fingerprint256: string;
}

export const TlsMaterialErrorCode = {
  UNREADABLE: 'TLS_FILE_UNREADABLE',
  NOT_PEM: 'TLS_NOT_PEM',
  NOT_CA: 'TLS_NOT_CA',
  NOT_ISSUED_BY_CA: 'TLS_NOT_ISSUED_BY_CA',
  KEY_MISMATCH: 'TLS_KEY_MISMATCH',
  EXPIRED: 'TLS_EXPIRED',
  NOT_YET_VALID: 'TLS_NOT_YET_VALID',
  NO_IDENTITY: 'TLS_NO_IDENTITY',
  WRONG_IDENTITY: 'TLS_WRONG_IDENTITY',
} as const;
export type TlsMaterialErrorCode = (typeof TlsMaterialErrorCode)[keyof typeof TlsMaterialErrorCode];

/** What is wrong with which file. */
export class TlsMaterialError extends Error {
  override readonly name = 'TlsMaterialError';
  readonly code: TlsMaterialErrorCode;
  readonly file: string;

  constructor(code: TlsMaterialErrorCode, file: string, message: string, options?: { cause?: unknown }) {
    super(`${file}: ${message}`, options);
    this.code = code;
    this.file = file;
  }
}

async function readOne(file: string): Promise<Buffer> {
  try {
    return await readFile(file);
  } catch (e) {
    throw new TlsMaterialError(TlsMaterialErrorCode.UNREADABLE, file, `cannot read: ${(e as Error).message}`, { cause: e });
  }
}

/** The PEM certificate blocks of a file, in order. */
function splitPem(pem: Buffer): Buffer[] {
  return [...pem.toString('latin1').matchAll(/-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g)].map((m) => Buffer.from(`${m[0]}\n`, 'latin1'));
}

function parseCert(file: string, pem: Buffer, what: string): X509Certificate {
  if (!pem.includes('-----BEGIN CERTIFICATE-----')) {
    throw new TlsMaterialError(TlsMaterialErrorCode.NOT_PEM, file, `is not a PEM certificate (no "BEGIN CERTIFICATE" block); expected the ${what}`);
  }
  try {
    return new X509Certificate(pem);
  } catch (e) {
    throw new TlsMaterialError(TlsMaterialErrorCode.NOT_PEM, file, `cannot parse the ${what}: ${(e as Error).message}`, { cause: e });
  }
}

function checkValidity(file: string, cert: X509Certificate, what: string, now: Date): void {
  const from = new Date(cert.validFrom);
  const to = new Date(cert.validTo);
  if (now.getTime() > to.getTime()) {
    throw new TlsMaterialError(TlsMaterialErrorCode.EXPIRED, file, `the ${what} (${cert.subject.replace(/\n/g, ', ')}) expired at ${to.toISOString()}`);
  }
  if (now.getTime() < from.getTime()) {
    throw new TlsMaterialError(TlsMaterialErrorCode.NOT_YET_VALID, file, `the ${what} (${cert.subject.replace(/\n/g, ', ')}) is not valid before ${from.toISOString()} (is this machine's clock right?)`);
  }
}

/** Reads and checks the files; throws a `TlsMaterialError` naming the file at the first problem. */
export async function loadTlsMaterial(files: TlsFiles, options: LoadOptions = {}): Promise<TlsMaterial> {
  const [ca, cert, key] = await Promise.all([readOne(files.caFile), readOne(files.certFile), readOne(files.keyFile)]);
  return checkTlsMaterial(files, { ca, cert, key }, options);
}

/** The checks of `loadTlsMaterial` on contents already read. */
export function checkTlsMaterial(files: TlsFiles, pem: { ca: Buffer; cert: Buffer; key: Buffer }, options: LoadOptions = {}): TlsMaterial {
  const now = (options.now ?? (() => new Date()))();
  // The CA file may hold several CA certificates (a bundle, while moving to a new CA:
  // docs/security.md "Rotating certificates"); each must be a CA, and one must have issued ours.
  const caCerts = splitPem(pem.ca).map((block) => parseCert(files.caFile, block, 'cluster CA certificate'));
  if (caCerts.length === 0) parseCert(files.caFile, pem.ca, 'cluster CA certificate');
  for (const c of caCerts) {
    if (!c.ca) throw new TlsMaterialError(TlsMaterialErrorCode.NOT_CA, files.caFile, `the certificate (${c.subject.replace(/\n/g, ', ')}) is not a CA certificate (basicConstraints cA is not set)`);
  }

  const leaf = parseCert(files.certFile, pem.cert, 'certificate');
  const caCert = caCerts.find((c) => leaf.checkIssued(c) && leaf.verify(c.publicKey)) ?? (caCerts[0] as X509Certificate);
  checkValidity(files.caFile, caCert, 'CA certificate', now);
  if (!leaf.checkIssued(caCert) || !leaf.verify(caCert.publicKey)) {
    throw new TlsMaterialError(
      TlsMaterialErrorCode.NOT_ISSUED_BY_CA,
      files.certFile,
      `the certificate (issuer ${leaf.issuer.replace(/\n/g, ', ')}) is not signed by the CA in ${files.caFile} (${caCert.subject.replace(/\n/g, ', ')})`,
    );
  }
  checkValidity(files.certFile, leaf, 'certificate', now);

  let privateKey: KeyObject;
  try {
    privateKey = createPrivateKey(pem.key);
  } catch (e) {
    throw new TlsMaterialError(TlsMaterialErrorCode.NOT_PEM, files.keyFile, `is not a PEM private key: ${(e as Error).message}`, { cause: e });
  }
  if (!leaf.checkPrivateKey(privateKey)) {
    throw new TlsMaterialError(TlsMaterialErrorCode.KEY_MISMATCH, files.keyFile, `the key does not belong to the certificate in ${files.certFile}`);
  }

  const identity = identityOfDer(leaf.raw);
  const expect = options.expect ?? 'node';
  if (identity === undefined) {
    throw new TlsMaterialError(TlsMaterialErrorCode.NO_IDENTITY, files.certFile, `the certificate carries no Cairn identity (exactly one subjectAltName URI cairn://node/<id> or cairn://client/<name>); make it with \`cairn tls cert create\``);
  }
  if (expect !== 'any' && identity.kind !== expect) {
    throw new TlsMaterialError(TlsMaterialErrorCode.WRONG_IDENTITY, files.certFile, `the certificate is for ${formatIdentity(identity)}, but a ${expect} certificate is needed here`);
  }
  if (options.nodeId !== undefined && !(identity.kind === 'node' && identity.id === options.nodeId)) {
    throw new TlsMaterialError(TlsMaterialErrorCode.WRONG_IDENTITY, files.certFile, `the certificate is for ${formatIdentity(identity)}, but this node is ${options.nodeId}`);
  }
  return {
    files,
    ca: pem.ca,
    cert: pem.cert,
    key: pem.key,
    identity,
    notAfter: new Date(leaf.validTo),
    fingerprint256: leaf.fingerprint256,
  };
}

export type ReloadResult =
  | { readonly ok: true; readonly changed: boolean; readonly material: TlsMaterial }
  | { readonly ok: false; readonly error: TlsMaterialError | Error; readonly kept: TlsMaterial };

/**
 * The current TLS material of a process, reloadable (SIGHUP). It is also a grpc-js
 * `CertificateProvider` for both the CA and the identity (credentials.ts passes it as both),
 * so servers and channels built on it take new material for every new connection after a
 * successful `reload()`. Connections already open keep the certificates they were made with.
 */
export class TlsMaterialStore {
  private material: TlsMaterial;
  private readonly caListeners = new Set<CaCertificateUpdateListener>();
  private readonly identityListeners = new Set<IdentityCertificateUpdateListener>();

  private constructor(
    material: TlsMaterial,
    private readonly options: LoadOptions,
  ) {
    this.material = material;
  }

  /** Loads the files (throwing `TlsMaterialError` if they are wrong) and holds the material. */
  static async open(files: TlsFiles, options: LoadOptions = {}): Promise<TlsMaterialStore> {
    return new TlsMaterialStore(await loadTlsMaterial(files, options), options);
  }

  get current(): TlsMaterial {
    return this.material;
  }

  /**
   * Reads the same files again. If they pass every check, they become the current material
   * and listeners (grpc-js credentials) get them; if not, the old material stays and the
   * result says why. Never throws.
   */
  async reload(): Promise<ReloadResult> {
    let next: TlsMaterial;
    try {
      next = await loadTlsMaterial(this.material.files, this.options);
    } catch (e) {
      return { ok: false, error: e instanceof Error ? e : new Error(String(e)), kept: this.material };
    }
    const changed = !(next.ca.equals(this.material.ca) && next.cert.equals(this.material.cert) && next.key.equals(this.material.key));
    this.material = next;
    if (changed) {
      for (const l of this.caListeners) l({ caCertificate: next.ca });
      for (const l of this.identityListeners) l({ certificate: next.cert, privateKey: next.key });
    }
    return { ok: true, changed, material: next };
  }

  // ---- grpc-js CertificateProvider (experimental API, certificate-provider.d.ts) ----
  // The first update is delivered on the next tick, as grpc-js's own FileWatcherCertificateProvider
  // does: CertificateProviderServerCredentials registers its listeners before it registers the
  // server's watcher, so an update delivered synchronously would reach no watcher and the server
  // would drop every connection as "credentials not loaded".

  addCaCertificateListener(listener: CaCertificateUpdateListener): void {
    this.caListeners.add(listener);
    process.nextTick(() => {
      if (this.caListeners.has(listener)) listener({ caCertificate: this.material.ca });
    });
  }

  removeCaCertificateListener(listener: CaCertificateUpdateListener): void {
    this.caListeners.delete(listener);
  }

  addIdentityCertificateListener(listener: IdentityCertificateUpdateListener): void {
    this.identityListeners.add(listener);
    process.nextTick(() => {
      if (this.identityListeners.has(listener)) listener({ certificate: this.material.cert, privateKey: this.material.key });
    });
  }

  removeIdentityCertificateListener(listener: IdentityCertificateUpdateListener): void {
    this.identityListeners.delete(listener);
  }
}
