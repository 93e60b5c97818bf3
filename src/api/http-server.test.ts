import t, { type Test } from 'tap';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import { silentLogger } from '../base/index.js';
import { HostAllowList, normalizeHostHeader } from './host-check.js';
import { Router, createHttpServer } from './http-server.js';

interface Answer {
  readonly status: number;
  readonly body: { error?: { code: string; message: string } } & Record<string, unknown>;
}

function send(port: number, method: string, path: string, headers: Record<string, string>, body?: string | Buffer): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path, headers: { ...headers, ...(body !== undefined ? { 'content-length': String(Buffer.byteLength(body)) } : {}) } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}') as Answer['body'] }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

async function serve(t: Test, allowed?: HostAllowList): Promise<number> {
  const router = new Router();
  router.add('GET', '/v1/x', () => ({ status: 200, json: { ok: true } }), { access: 'public' });
  router.add('PUT', '/v1/x', (req) => ({ status: 200, json: { got: req.json() } }), { access: 'public' });
  router.add('POST', '/v1/empty', () => ({ status: 200, json: { ok: true } }), { access: 'public' });
  router.add('PUT', '/v1/bin', (req) => ({ status: 200, json: { bytes: req.body.length } }), { contentType: 'application/octet-stream', access: 'public' });
  const server = createHttpServer({ router, logger: silentLogger, ...(allowed ? { allowedHosts: allowed } : {}) });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise<void>((r) => server.close(() => r())));
  return (server.address() as AddressInfo).port;
}

t.test('Host header forms are normalized: case, port, trailing dot, IPv6 brackets', async (t) => {
  t.equal(normalizeHostHeader('LocalHost:7501'), 'localhost');
  t.equal(normalizeHostHeader('localhost.'), 'localhost');
  t.equal(normalizeHostHeader('[::1]:7501'), '[::1]');
  t.equal(normalizeHostHeader('10.0.0.5'), '10.0.0.5');
  t.equal(normalizeHostHeader('cairn.example.com:80'), 'cairn.example.com');
  for (const bad of ['', 'http://x', 'a b', '[zz]:1', 'x:99999999', '..', 'a..b', 'x/y']) t.equal(normalizeHostHeader(bad), undefined, `${JSON.stringify(bad)} is not a host`);
});

t.test('the HTTP API answers only Host names it knows (DNS rebinding, etcd CVE-2018-1099)', async (t) => {
  const port = await serve(t, new HostAllowList(['cairn.internal:7501', 'n1.example']));
  for (const host of [`localhost:${port}`, `127.0.0.1:${port}`, `[::1]:${port}`, 'LOCALHOST', `10.1.2.3:${port}`, `[fd00::5]:${port}`, 'cairn.internal', `n1.example:${port}`, 'n1.example.']) {
    t.equal((await send(port, 'GET', '/v1/x', { host })).status, 200, `Host ${host} is answered`);
  }
  for (const host of ['attacker.example', `attacker.example:${port}`, 'localhost.attacker.example', '127.0.0.1.nip.io', 'cairn.internal.evil']) {
    const a = await send(port, 'GET', '/v1/x', { host });
    t.equal(a.status, 403, `Host ${host} is refused with 403`);
    t.equal(a.body.error?.code, 'PERMISSION_DENIED');
    t.match(a.body.error?.message ?? '', /does not answer requests for Host .*--http-allowed-hosts/, 'the error says what to do');
  }
  const write = await send(port, 'PUT', '/v1/x', { host: 'attacker.example', 'content-type': 'application/json' }, '{"a":1}');
  t.equal(write.status, 403, 'a write with a foreign Host is refused before it is read');
  const wildcard = await serve(t, new HostAllowList(['*']));
  t.equal((await send(wildcard, 'GET', '/v1/x', { host: 'anything.example' })).status, 200, '* turns the check off');
  const byDefault = await serve(t);
  t.equal((await send(byDefault, 'GET', '/v1/x', { host: 'attacker.example' })).status, 403, 'without a list: loopback and IP literals only');
});

t.test('PUT, POST and PATCH need Content-Type: application/json (415 otherwise); a route may name its own type', async (t) => {
  const port = await serve(t);
  const host = `127.0.0.1:${port}`;
  const ok = await send(port, 'PUT', '/v1/x', { host, 'content-type': 'application/json; charset=utf-8' }, '{"a":1}');
  t.same([ok.status, ok.body], [200, { got: { a: 1 } }], 'application/json with a charset is accepted');
  for (const [ct, what] of [
    [undefined, 'no Content-Type'],
    ['text/plain', 'text/plain (a browser sends it cross-site without a preflight)'],
    ['application/x-www-form-urlencoded', 'a form encoding'],
    ['multipart/form-data; boundary=x', 'multipart'],
    ['application/jsonp', 'a type that merely starts the same'],
  ] as const) {
    const a = await send(port, 'PUT', '/v1/x', { host, ...(ct !== undefined ? { 'content-type': ct } : {}) }, '{"a":1}');
    t.equal(a.status, 415, `${what}: 415`);
    t.match(a.body.error?.message ?? '', /PUT \/v1\/x needs Content-Type: application\/json/, `${what}: the error names the type needed`);
  }
  t.equal((await send(port, 'POST', '/v1/empty', { host })).status, 415, 'a POST without a body needs it too (a cross-site POST may have none)');
  t.equal((await send(port, 'POST', '/v1/empty', { host, 'content-type': 'application/json' })).status, 200);
  t.equal((await send(port, 'PUT', '/v1/bin', { host, 'content-type': 'application/octet-stream' }, Buffer.from([1, 2, 3]))).status, 200, 'the binary route takes its own type');
  t.equal((await send(port, 'PUT', '/v1/bin', { host, 'content-type': 'application/json' }, '{}')).status, 415, 'and only that');
  t.equal((await send(port, 'GET', '/v1/x', { host })).status, 200, 'a GET needs none');
  t.equal((await send(port, 'PUT', '/v1/nope', { host })).status, 404, 'an unknown route is still 404');
});
