#!/usr/bin/env node
// The container health check (Dockerfile HEALTHCHECK, docker-compose.yml healthcheck): exit 0
// when this node's GET /readyz answers 200 (it knows a leader and has applied what it knows is
// committed), 1 otherwise. The port comes from CAIRN_HTTP_ADDR, as the agent's does; a
// wildcard host (0.0.0.0, [::]) is reached on loopback. Plain Node: the slim image has no curl.
const addr = process.env.CAIRN_HTTP_ADDR || '127.0.0.1:7501';
const m = /^(\[[^\]]*\]|[^:]*):(\d+)$/.exec(addr);
if (!m) {
  console.error(`healthcheck: CAIRN_HTTP_ADDR ${JSON.stringify(addr)} is not host:port`);
  process.exit(1);
}
const host = m[1] === '0.0.0.0' || m[1] === '' ? '127.0.0.1' : m[1] === '[::]' ? '[::1]' : m[1];
try {
  const res = await fetch(`http://${host}:${m[2]}/readyz`, { signal: AbortSignal.timeout(2500) });
  const body = await res.text();
  if (res.status !== 200) console.error(`healthcheck: /readyz ${res.status} ${body}`);
  process.exit(res.status === 200 ? 0 : 1);
} catch (e) {
  console.error(`healthcheck: ${addr}: ${e?.cause?.code ?? e?.message ?? e}`);
  process.exit(1);
}
