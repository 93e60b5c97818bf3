#!/usr/bin/env node
// Helper of scripts/cluster.sh (plain Node, no build needed, no curl needed).
//
//   node scripts/cluster-wait.mjs --timeout S [--dir D] [--ca FILE] [--token-file FILE] n1=https://127.0.0.1:7511 ...
//     polls every node's GET /v1/status/leader until every node names the same leader (and, with
//     --token-file, until every node accepts that token: GET /v1/acl/token/self answers 200);
//     prints one progress line per second; exit 0 once found, 1 at the deadline. With --dir, a
//     node whose process has exited (its pid file names a dead process) is reported with the
//     tail of its log.
//   node scripts/cluster-wait.mjs [--ca FILE] [--token-file FILE] --describe n1=https://127.0.0.1:7511
//     prints one line about the node: its role, term, leader and applied index, or why not.
// --ca FILE: the cluster CA (PEM) that https:// nodes are checked against (undici's fetch with
// an Agent that trusts it: the global fetch cannot be given a CA).
// --token-file FILE: a token secret (the cluster's management token, made by scripts/cluster.sh
// and created by the leader from --acl-initial-management-token-file), sent as
// `authorization: Bearer <secret>`: a node with access control answers /v1/agent/self only to it.
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { Agent, fetch as undiciFetch } from 'undici';

const args = process.argv.slice(2);
let timeoutS = 60;
let dir;
let describeOnly = false;
let caFile;
let token;
const nodes = [];
for (let i = 0; i < args.length; i++) {
  const a = args[i];
  if (a === '--timeout') timeoutS = Number(args[++i]);
  else if (a === '--dir') dir = args[++i];
  else if (a === '--describe') describeOnly = true;
  else if (a === '--ca') caFile = args[++i];
  else if (a === '--token-file') token = readFileSync(args[++i], 'utf8').trim();
  else {
    const eq = a.indexOf('=');
    if (eq < 1) {
      console.error(`cluster-wait: expected id=url, got ${JSON.stringify(a)}`);
      process.exit(2);
    }
    nodes.push({ id: a.slice(0, eq), url: a.slice(eq + 1) });
  }
}

let dispatcher;
async function getJson(url, ms = 1000) {
  if (caFile !== undefined && dispatcher === undefined) dispatcher = new Agent({ connect: { ca: readFileSync(caFile) } });
  const headers = token !== undefined ? { authorization: `Bearer ${token}` } : {};
  const res = dispatcher !== undefined ? await undiciFetch(url, { signal: AbortSignal.timeout(ms), headers, dispatcher }) : await fetch(url, { signal: AbortSignal.timeout(ms), headers });
  const body = await res.json().catch(() => null);
  return { status: res.status, body };
}

function why(e) {
  const cause = e?.cause?.code ?? (e?.name === 'TypeError' ? undefined : e?.name) ?? e?.cause?.message ?? '';
  return cause === 'ECONNREFUSED' ? 'not listening yet' : cause === 'TimeoutError' ? 'no answer within 1s' : String(cause || e?.message || e);
}

async function describe(node) {
  try {
    const { status, body } = await getJson(`${node.url}/v1/agent/self`);
    if (status !== 200) return body?.error?.message ?? `HTTP ${status}`;
    return `${body.role}, term ${body.term}, leader ${body.leader ?? '(none)'}, applied ${body.applied_index}`;
  } catch (e) {
    return why(e);
  }
}

function deadProcess(id) {
  if (dir === undefined) return undefined;
  const pidFile = path.join(dir, `${id}.pid`);
  if (!existsSync(pidFile)) return undefined;
  const pid = Number(readFileSync(pidFile, 'utf8').trim());
  try {
    process.kill(pid, 0);
    return undefined;
  } catch {
    const log = path.join(dir, `${id}.log`);
    const tail = existsSync(log) ? readFileSync(log, 'utf8').trimEnd().split('\n').slice(-5).join('\n    ') : '(no log)';
    return `its process ${pid} has exited; last lines of ${log}:\n    ${tail}`;
  }
}

if (describeOnly) {
  for (const n of nodes) console.log(await describe(n));
  process.exit(0);
}

/** With --token-file: whether node `n` accepts the token (the leader made it and `n` applied it). */
async function tokenWorks(n) {
  if (token === undefined) return { ok: true, state: '' };
  try {
    const { status, body } = await getJson(`${n.url}/v1/acl/token/self`);
    return status === 200 ? { ok: true, state: 'token ok' } : { ok: false, state: `token not accepted yet (${body?.error?.code ?? `HTTP ${status}`})` };
  } catch (e) {
    return { ok: false, state: why(e) };
  }
}

const started = Date.now();
const deadline = started + timeoutS * 1000;
let lastPrint = 0;
let leaderSaid = false;
for (;;) {
  const seen = await Promise.all(
    nodes.map(async (n) => {
      try {
        const { status, body } = await getJson(`${n.url}/v1/status/leader`);
        if (status === 200 && typeof body?.id === 'string') {
          const t = await tokenWorks(n);
          return { id: n.id, leader: body.id, tokenOk: t.ok, state: `leader is ${body.id}${t.state !== '' ? `, ${t.state}` : ''}` };
        }
        return { id: n.id, leader: undefined, tokenOk: false, state: body?.error?.message ?? `HTTP ${status}` };
      } catch (e) {
        return { id: n.id, leader: undefined, tokenOk: false, state: why(e) };
      }
    }),
  );
  const leaders = new Set(seen.map((s) => s.leader).filter((l) => l !== undefined));
  const elapsed = ((Date.now() - started) / 1000).toFixed(1);
  if (leaders.size === 1) {
    const [leader] = leaders;
    const agreeing = seen.filter((s) => s.leader === leader).length;
    if (agreeing === nodes.length) {
      if (!leaderSaid) console.log(`leader: ${leader} (after ${elapsed}s; all ${nodes.length} node(s) know it)`);
      leaderSaid = true;
      if (seen.every((s) => s.tokenOk)) {
        if (token !== undefined) console.log(`the management token works on all ${nodes.length} node(s) (after ${elapsed}s)`);
        process.exit(0);
      }
    }
  }
  for (const n of nodes) {
    const dead = deadProcess(n.id);
    if (dead !== undefined) {
      console.error(`cluster: node ${n.id} stopped: ${dead}`);
      process.exit(1);
    }
  }
  if (Date.now() - lastPrint >= 1000) {
    lastPrint = Date.now();
    console.log(`waiting for ${leaderSaid ? 'every node to accept the management token' : 'a leader'} (${elapsed}s): ${seen.map((s) => `${s.id} ${s.state}`).join('; ')}`);
  }
  if (Date.now() > deadline) {
    console.error(leaderSaid ? `cluster: the management token was not accepted by every node after ${timeoutS}s` : `cluster: no leader after ${timeoutS}s`);
    process.exit(1);
  }
  await new Promise((r) => setTimeout(r, 200));
}
