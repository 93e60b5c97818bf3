import * as grpc from '@grpc/grpc-js';
import { mkdtemp, rm } from 'node:fs/promises';
import * as https from 'node:https';
import * as os from 'node:os';
import * as path from 'node:path';
import type { RouteAccess, Router } from '../../api/index.js';
import { makeTestPki, type TestPki } from '../../auth/testing/index.js';
import { cairn } from '../../gen/resource.js';
import { createLogger } from '../../platform/index.js';
import { startAgent, type Agent } from '../agent.js';
import type { AgentConfig } from '../config.js';
import { devConfig } from './agents.js';

/**
 * Test helpers for access control (docs/security.md "Tokens and roles"): an in-process node with
 * TLS and ACLs on, an HTTPS client that trusts the test CA, a raw gRPC client of
 * cairn.resource.v1.ResourceService, and the four identities of the authorization suite.
 */

export const pb = cairn.resource.v1;

export interface HttpAnswer {
  readonly status: number;
  readonly text: string;
  /** The body parsed as JSON, or undefined when it is not JSON. */
  readonly json: unknown;
  readonly headers: Record<string, string | string[] | undefined>;
}

export interface SecureNode {
  readonly agent: Agent;
  readonly pki: TestPki;
  readonly ca: Buffer;
  /** Every HTTP route the node serves, with who may call it (the server's Router). */
  readonly routes: Array<{ method: string; pattern: string; access: RouteAccess }>;
  http(method: string, urlPath: string, opts?: { token?: string | undefined; body?: string | Buffer | undefined; headers?: Record<string, string> }): Promise<HttpAnswer>;
  readonly grpc: grpc.Client;
  close(): Promise<void>;
}

/** Starts a single `--dev`-shaped node with its own PKI, TLS on both ports and ACLs on. */
export async function startSecureNode(overrides: Partial<AgentConfig> = {}): Promise<SecureNode> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'cairn-authz-'));
  const pki = await makeTestPki({ dir: await mkdtemp(path.join(os.tmpdir(), 'cairn-authz-pki-')) });
  const files = await pki.node('dev');
  let router: Router | undefined;
  const agent = await startAgent(
    devConfig(path.join(dir, 'data'), { tlsCaFile: files.caFile, tlsCertFile: files.certFile, tlsKeyFile: files.keyFile, acl: true, logLevel: 'silent', ...overrides }),
    { logger: createLogger({ level: 'silent', nodeId: 'dev' }), extend: (ctx) => (router = ctx.router) },
  );
  await agent.ready;
  const ca = Buffer.from(pki.ca.certPem);
  const client = new grpc.Client(agent.grpcAddress, grpc.credentials.createSsl(ca));
  const routes = (router as Router | undefined)?.list() ?? [];
  return {
    agent,
    pki,
    ca,
    routes,
    http: (method, urlPath, opts = {}) => httpsRequest(agent.httpAddress, ca, method, urlPath, opts),
    grpc: client,
    close: async () => {
      client.close();
      await agent.close();
      await rm(dir, { recursive: true, force: true });
      await pki.cleanup();
    },
  };
}

const agentPool = new Map<string, https.Agent>();

export function httpsRequest(
  address: string,
  ca: Buffer,
  method: string,
  urlPath: string,
  opts: { token?: string | undefined; body?: string | Buffer | undefined; headers?: Record<string, string> } = {},
): Promise<HttpAnswer> {
  const [host, port] = [address.slice(0, address.lastIndexOf(':')), Number(address.slice(address.lastIndexOf(':') + 1))];
  let keepAlive = agentPool.get(address);
  if (keepAlive === undefined) {
    keepAlive = new https.Agent({ keepAlive: true, maxSockets: 8, ca });
    agentPool.set(address, keepAlive);
  }
  const headers: Record<string, string> = { ...(opts.headers ?? {}) };
  if (opts.token !== undefined) headers['authorization'] = `Bearer ${opts.token}`;
  if (opts.body !== undefined && headers['content-type'] === undefined) headers['content-type'] = 'application/json';
  return new Promise((resolve, reject) => {
    const req = https.request({ host, port, method, path: urlPath, headers, agent: keepAlive, ca }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let json: unknown;
        try {
          json = JSON.parse(text) as unknown;
        } catch {
          json = undefined;
        }
        resolve({ status: res.statusCode ?? 0, text, json, headers: res.headers });
      });
      res.on('error', reject);
    });
    req.on('error', reject);
    req.setTimeout(15_000, () => req.destroy(new Error(`${method} ${urlPath}: no answer in 15 s`)));
    if (opts.body !== undefined) req.write(opts.body);
    req.end();
  });
}

/** Closes the keep-alive agents (end of a test file). */
export function closeHttpsAgents(): void {
  for (const a of agentPool.values()) a.destroy();
  agentPool.clear();
}

interface Codec {
  encode(m: object): { finish(): Uint8Array };
  decode(b: Uint8Array): object;
  fromObject(o: object): object;
  toObject(m: object, o: object): object;
}
const codec = (c: unknown): Codec => c as Codec;
const OBJECT = { longs: String, enums: String, defaults: true, arrays: true, objects: true, oneofs: true };

export interface GrpcAnswer {
  /** 0 = OK. */
  readonly code: number;
  readonly details: string;
  readonly value: Record<string, unknown> | undefined;
  /** The cairn-error-code trailer, when the call failed. */
  readonly cairnCode: string | undefined;
}

const METHOD_MESSAGES: Record<string, [unknown, unknown]> = {
  Read: [pb.ReadRequest, pb.ReadResponse],
  Write: [pb.WriteRequest, pb.WriteResponse],
  WriteStatus: [pb.WriteStatusRequest, pb.WriteStatusResponse],
  Delete: [pb.DeleteRequest, pb.DeleteResponse],
  List: [pb.ListRequest, pb.ListResponse],
  ListByOwner: [pb.ListByOwnerRequest, pb.ListByOwnerResponse],
  Txn: [pb.TxnRequest, pb.TxnResponse],
  LeaseGrant: [pb.LeaseGrantRequest, pb.LeaseGrantResponse],
  LeaseRevoke: [pb.LeaseRevokeRequest, pb.LeaseRevokeResponse],
  LeaseTimeToLive: [pb.LeaseTimeToLiveRequest, pb.LeaseTimeToLiveResponse],
  LeaseList: [pb.LeaseListRequest, pb.LeaseListResponse],
};

/**
 * One LeaseKeepAlive stream: sends `ids` one by one (each after the previous answer) and
 * collects the answers as plain objects; resolves when all are answered or the stream ends.
 */
export function grpcKeepAlive(client: grpc.Client, ids: readonly string[], token?: string, deadlineMs = 10_000): Promise<{ answers: Array<Record<string, unknown>>; code: number | undefined }> {
  const md = new grpc.Metadata();
  if (token !== undefined) md.set('authorization', `Bearer ${token}`);
  return new Promise((resolve) => {
    const answers: Array<Record<string, unknown>> = [];
    const call = client.makeBidiStreamRequest('/cairn.resource.v1.ResourceService/LeaseKeepAlive', (b: Buffer) => b, (b: Buffer) => b, md, { deadline: Date.now() + deadlineMs });
    let i = 0;
    const next = (): void => {
      if (i < ids.length) call.write(Buffer.from(pb.LeaseKeepAliveRequest.encode({ id: ids[i++] as string }).finish()));
      else call.end();
    };
    call.on('data', (b: Buffer) => {
      answers.push(pb.LeaseKeepAliveResponse.toObject(pb.LeaseKeepAliveResponse.decode(b), OBJECT) as Record<string, unknown>);
      next();
    });
    call.on('error', (e: grpc.ServiceError) => resolve({ answers, code: e.code }));
    call.on('end', () => resolve({ answers, code: 0 }));
    next();
  });
}

/** One unary call of cairn.resource.v1.ResourceService (method `Read`, `Write`, ...), request as a plain object, or raw bytes. */
export function grpcUnary(client: grpc.Client, method: string, request: object | Buffer, token?: string, deadlineMs = 10_000): Promise<GrpcAnswer> {
  const [reqType, resType] = METHOD_MESSAGES[method] ?? [pb.ReadRequest, pb.ReadResponse];
  const md = new grpc.Metadata();
  if (token !== undefined) md.set('authorization', `Bearer ${token}`);
  const bytes = Buffer.isBuffer(request) ? request : Buffer.from(codec(reqType).encode(codec(reqType).fromObject(request)).finish());
  return new Promise((resolve) => {
    let trailer: grpc.Metadata | undefined;
    const call = client.makeUnaryRequest(
      `/cairn.resource.v1.ResourceService/${method}`,
      (b: Buffer) => b,
      (b: Buffer) => b,
      bytes,
      md,
      { deadline: Date.now() + deadlineMs },
      (err, res) => {
        if (err) {
          const c = err.metadata?.get('cairn-error-code')[0] ?? trailer?.get('cairn-error-code')[0];
          resolve({ code: err.code, details: err.details, value: undefined, cairnCode: typeof c === 'string' ? c : undefined });
          return;
        }
        const value = codec(resType).toObject(codec(resType).decode(res as Buffer), OBJECT) as Record<string, unknown>;
        resolve({ code: 0, details: '', value, cairnCode: undefined });
      },
    );
    call.on('status', (s: grpc.StatusObject) => (trailer = s.metadata));
  });
}

export interface GrpcWatch {
  /** Decoded events so far (watch, revision, event, change/delete resource). */
  readonly events: Array<Record<string, unknown>>;
  /** Set once the stream ended: its status code (0 = OK) and details. */
  end: { code: number; details: string } | undefined;
  cancel(): void;
}

/** A WatchList (or WatchListBatched: each message's events, in order) stream with a token. */
export function grpcWatch(client: grpc.Client, watches: object[], token?: string, method: 'WatchList' | 'WatchListBatched' = 'WatchList'): GrpcWatch {
  const md = new grpc.Metadata();
  if (token !== undefined) md.set('authorization', `Bearer ${token}`);
  const bytes = Buffer.from(codec(pb.WatchListRequest).encode(codec(pb.WatchListRequest).fromObject({ watches })).finish());
  const call = client.makeServerStreamRequest(`/cairn.resource.v1.ResourceService/${method}`, (b: Buffer) => b, (b: Buffer) => b, bytes, md, {});
  const w: GrpcWatch = {
    events: [],
    end: undefined,
    cancel: () => call.cancel(),
  };
  const toObject = (m: object): Record<string, unknown> => codec(pb.WatchEvent).toObject(m, OBJECT) as Record<string, unknown>;
  call.on('data', (b: Buffer) => {
    if (method === 'WatchList') w.events.push(toObject(codec(pb.WatchEvent).decode(b)));
    else for (const m of (codec(pb.WatchEventBatch).decode(b) as { events: object[] }).events) w.events.push(toObject(m));
  });
  call.on('error', (e: grpc.ServiceError) => {
    if (w.end === undefined) w.end = { code: e.code, details: e.details };
  });
  call.on('status', (s: grpc.StatusObject) => {
    if (w.end === undefined) w.end = { code: s.code, details: s.details };
  });
  return w;
}

export interface HttpWatch {
  /** Parsed NDJSON lines so far. */
  readonly lines: Array<Record<string, unknown>>;
  status: number | undefined;
  ended: boolean;
  cancel(): void;
}

/** `POST /v1/watch` kept open: lines are collected as they come. */
export function httpWatch(address: string, ca: Buffer, watches: object[], token?: string): HttpWatch {
  const [host, port] = [address.slice(0, address.lastIndexOf(':')), Number(address.slice(address.lastIndexOf(':') + 1))];
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (token !== undefined) headers['authorization'] = `Bearer ${token}`;
  const w: HttpWatch = { lines: [], status: undefined, ended: false, cancel: () => req.destroy() };
  let buf = '';
  const req = https.request({ host, port, method: 'POST', path: '/v1/watch', headers, ca, agent: false }, (res) => {
    w.status = res.statusCode;
    res.setEncoding('utf8');
    res.on('data', (c: string) => {
      buf += c;
      for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        if (line.trim() !== '') w.lines.push(JSON.parse(line) as Record<string, unknown>);
      }
    });
    res.on('end', () => (w.ended = true));
    res.on('error', () => (w.ended = true));
  });
  req.on('error', () => (w.ended = true));
  req.end(JSON.stringify(watches));
  return w;
}

/**
 * The node's applied log index, to show a request proposed nothing (it did not move). A single
 * `--dev` node proposes only what callers send, so between two requests it is still.
 */
export function appliedIndex(node: SecureNode): number {
  const c = node.agent.coordinator();
  if (c === undefined) throw new Error('the node is not running');
  return c.status().applied;
}

/** Polls `cond` every few milliseconds until it holds or `ms` pass (then throws naming `what`). Returns the elapsed milliseconds. */
export async function pollUntil(cond: () => boolean | Promise<boolean>, ms: number, what: string, everyMs = 5): Promise<number> {
  const start = performance.now();
  for (;;) {
    if (await cond()) return performance.now() - start;
    if (performance.now() - start > ms) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/** The roles and tokens of the authorization suite, made through the ACL API with the bootstrap token. */
export interface SuiteIdentities {
  readonly management: string;
  readonly reader: string;
  readonly scoped: string;
  readonly scopedAccessor: string;
  readonly readerAccessor: string;
}

export const READER_RULES = [{ verbs: ['read', 'list', 'watch'], types: ['demo.*'] }];
export const SCOPED_RULES = [{ verbs: ['read', 'list', 'watch', 'write', 'delete', 'write-status'], types: ['demo.*'], namespaces: ['team-a'] }];

export async function makeRole(node: SecureNode, management: string, name: string, rules: unknown): Promise<void> {
  const r = await node.http('PUT', `/v1/acl/roles/${name}`, { token: management, body: JSON.stringify({ rules }) });
  if (r.status !== 200) throw new Error(`role ${name}: ${r.status} ${r.text}`);
}

export async function makeToken(node: SecureNode, management: string, roles: string[]): Promise<{ secret: string; accessor: string }> {
  const r = await node.http('POST', '/v1/acl/tokens', { token: management, body: JSON.stringify({ roles }) });
  if (r.status !== 200) throw new Error(`token ${roles.join(',')}: ${r.status} ${r.text}`);
  const j = r.json as { secret_id: string; accessor_id: string };
  return { secret: j.secret_id, accessor: j.accessor_id };
}

/** Bootstraps ACLs (the first management token) and makes the read-only and team-a tokens. */
export async function makeSuiteIdentities(node: SecureNode): Promise<SuiteIdentities> {
  const b = await node.http('POST', '/v1/acl/bootstrap', { body: '' });
  if (b.status !== 200) throw new Error(`bootstrap: ${b.status} ${b.text}`);
  const management = (b.json as { secret_id: string }).secret_id;
  await makeRole(node, management, 'reader', READER_RULES);
  await makeRole(node, management, 'team-a', SCOPED_RULES);
  const reader = await makeToken(node, management, ['reader']);
  const scoped = await makeToken(node, management, ['team-a']);
  return { management, reader: reader.secret, readerAccessor: reader.accessor, scoped: scoped.secret, scopedAccessor: scoped.accessor };
}
