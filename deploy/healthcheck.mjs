#!/usr/bin/env node
// The container health check (Dockerfile HEALTHCHECK, docker-compose.yml healthcheck): exit 0
// when this node's GET /readyz answers 200 (it knows a leader and has applied what it knows is
// committed), 1 otherwise. The port comes from CAIRN_HTTP_ADDR, as the agent's does; a
// wildcard host (0.0.0.0, [::]) is reached on loopback. With CAIRN_TLS_CA_FILE set (the node
// serves TLS, docker-compose.yml) it asks over HTTPS and checks the node's certificate against
// that CA (node certificates always name 127.0.0.1 and ::1). Plain Node: the slim image has no
// curl, and node:https takes a CA where the global fetch cannot.
import { readFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';

const addr = process.env.CAIRN_HTTP_ADDR || '127.0.0.1:7501';
const m = /^(\[[^\]]*\]|[^:]*):(\d+)$/.exec(addr);
if (!m) {
  console.error(`healthcheck: CAIRN_HTTP_ADDR ${JSON.stringify(addr)} is not host:port`);
  process.exit(1);
}
const host = m[1] === '0.0.0.0' || m[1] === '' ? '127.0.0.1' : m[1] === '[::]' ? '::1' : m[1].replace(/^\[|\]$/g, '');
const caFile = process.env.CAIRN_TLS_CA_FILE;
let ca;
if (caFile) {
  try {
    ca = readFileSync(caFile);
  } catch (e) {
    console.error(`healthcheck: cannot read CAIRN_TLS_CA_FILE ${caFile}: ${e?.code ?? e?.message ?? e}`);
    process.exit(1);
  }
}
const get = ca !== undefined ? https.get : http.get;
const req = get({ host, port: Number(m[2]), path: '/readyz', timeout: 2500, ...(ca !== undefined ? { ca } : {}) }, (res) => {
  let body = '';
  res.setEncoding('utf8');
  res.on('data', (c) => (body += c));
  res.on('end', () => {
    if (res.statusCode !== 200) console.error(`healthcheck: /readyz ${res.statusCode} ${body}`);
    process.exit(res.statusCode === 200 ? 0 : 1);
  });
});
req.on('timeout', () => req.destroy(new Error('no answer within 2.5s')));
req.on('error', (e) => {
  console.error(`healthcheck: ${ca !== undefined ? 'https' : 'http'}://${addr}: ${e?.code ?? e?.message ?? e}`);
  process.exit(1);
});
