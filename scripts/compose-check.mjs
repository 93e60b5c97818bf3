#!/usr/bin/env node
// compose-check: validates docker-compose.yml, Dockerfile and .dockerignore without a Docker
// engine (`make compose-check`; deploy/README.md).
//
// 1. A real Compose implementation parses and validates the file: `docker compose config`
//    (Compose v2) when the docker CLI has it, else `docker-compose config` (Compose 1.29, the
//    Debian package `make compose-check` installs when neither is there). Both interpolate
//    variables, resolve YAML merge keys, check the file against their Compose schema and check
//    references (undeclared volumes, unknown services in depends_on, unknown keys). Neither
//    needs a daemon for `config`. Run once for the default services and once with
//    `--profile five`.
// 2. Cairn's own rules, on the configuration Compose resolved:
//    - the default profile runs n1..n3, `--profile five` adds n4 and n5;
//    - every CAIRN_* variable is one the agent knows, and the agent's own config loader
//      (dist/src/server/load-config.js, so `make build` first) accepts each node's
//      environment, as `cairn agent` would at start-up;
//    - node ids, advertised addresses, --join lists, --bootstrap-expect and data volumes fit
//      together (each join entry is another node's advertised gRPC address; the bootstrap
//      group expects exactly its own size; joiners wait for it to be healthy);
//    - TLS on every node: CAIRN_TLS_CA_FILE, CAIRN_TLS_CERT_FILE and CAIRN_TLS_KEY_FILE set and
//      not --insecure; the certificate is the node's own (node-<id>.pem); the three files lie
//      in a named volume mounted read-only, mounted by no other node and filled by the one-shot
//      service tls-init (deploy/tls-init.sh), which every node waits for
//      (service_completed_successfully); no node mounts tls-init's CA volume (the CA key);
//    - access control on every node (on with TLS; not CAIRN_ACL=false), with
//      CAIRN_ACL_INITIAL_MANAGEMENT_TOKEN_FILE in the same read-only volume tls-init fills
//      (tls-init makes the secret; the agent's loader reads the file, so the check hands it a
//      stand-in file with a well-formed secret);
//    - healthchecks call deploy/healthcheck.mjs (GET /readyz); published ports are on
//      127.0.0.1, distinct, and clear of a `make run` node (7500/7501);
//    - the Dockerfile is multi-stage on node:20-slim, builds with `make build`, and runs
//      bin/cairn; what it COPYs is not excluded by .dockerignore.
// 3. --self-test: plants one mistake at a time in a copy of the file and checks that step 1 or
//    2 catches each (a checker that cannot fail is no checker).
//
// Usage: node scripts/compose-check.mjs [--self-test]
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parse as parseYaml } from 'yaml';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const COMPOSE_FILE = path.join(ROOT, 'docker-compose.yml');
const DOCKERFILE = path.join(ROOT, 'Dockerfile');
const DOCKERIGNORE = path.join(ROOT, '.dockerignore');
const LOAD_CONFIG = path.join(ROOT, 'dist', 'src', 'server', 'load-config.js');

const EXPECTED = { '': ['n1', 'n2', 'n3'], five: ['n1', 'n2', 'n3', 'n4', 'n5'] };
/** The one-shot service that makes the TLS material (deploy/tls-init.sh); in every profile. */
const TLS_INIT = 'tls-init';
const TLS_ENV = ['CAIRN_TLS_CA_FILE', 'CAIRN_TLS_CERT_FILE', 'CAIRN_TLS_KEY_FILE'];
/** The management token's secret file (made by tls-init), which the agent's loader reads and checks. */
const TOKEN_ENV = 'CAIRN_ACL_INITIAL_MANAGEMENT_TOKEN_FILE';
/** A stand-in for that file outside the container: a well-formed secret (`cairn_<accessor>_<64 hex>`). */
let standInTokenFile;
function standInToken() {
  if (standInTokenFile === undefined) {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'cairn-compose-token-'));
    standInTokenFile = path.join(dir, 'management-token');
    writeFileSync(standInTokenFile, `cairn_ops_${'0'.repeat(64)}\n`, { mode: 0o600 });
    process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
  }
  return standInTokenFile;
}

// ---- The Compose implementation -----------------------------------------------------------

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', ...opts });
  return { ok: r.status === 0, stdout: r.stdout ?? '', stderr: (r.stderr ?? '') + (r.error ? String(r.error.message) : '') };
}

function findCompose() {
  const v2 = run('docker', ['compose', 'version', '--short']);
  if (v2.ok) return { name: `docker compose ${v2.stdout.trim()}`, argv: ['docker', 'compose'], filtersProfiles: true };
  const v1 = run('docker-compose', ['version', '--short']);
  if (v1.ok) return { name: `docker-compose ${v1.stdout.trim()}`, argv: ['docker-compose'], filtersProfiles: false };
  return undefined;
}

/** `config` of `file` for `profile` ('' = default); resolved YAML, or the tool's complaint. */
function composeConfig(compose, file, profile) {
  const args = [...compose.argv.slice(1), '-f', file, '--project-directory', ROOT, ...(profile ? ['--profile', profile] : []), 'config'];
  // Interpolation must come from the file's own defaults, not from whoever runs the check.
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('CAIRN_') && !k.startsWith('COMPOSE_')));
  const r = run(compose.argv[0], args, { env, cwd: ROOT });
  if (!r.ok) return { error: `${compose.argv.join(' ')} ${args.slice(compose.argv.length - 1).join(' ')} failed:\n${r.stderr.trim() || r.stdout.trim()}` };
  return { config: parseYaml(r.stdout) };
}

// ---- Cairn's rules ------------------------------------------------------------------------

function portsOf(svc) {
  return (svc.ports ?? []).map((p) => {
    if (typeof p === 'object') return { hostIp: p.host_ip ?? '', published: Number(p.published), target: Number(p.target) };
    const m = /^(?:(\d+\.\d+\.\d+\.\d+|\[[^\]]+\]):)?(?:(\d+):)?(\d+)(?:\/\w+)?$/.exec(String(p));
    if (!m) return { hostIp: '?', published: NaN, target: NaN, raw: p };
    return { hostIp: m[1] ?? '', published: Number(m[2]), target: Number(m[3]) };
  });
}

function volumesOf(svc) {
  return (svc.volumes ?? []).map((v) => {
    if (typeof v === 'object') return { source: v.source, target: v.target, type: v.type, readOnly: v.read_only === true };
    const [source, target, mode] = String(v).split(':');
    return { source, target, type: source?.startsWith('/') || source?.startsWith('.') ? 'bind' : 'volume', readOnly: (mode ?? '').split(',').includes('ro') };
  });
}

function envOf(svc) {
  const e = svc.environment ?? {};
  if (Array.isArray(e)) return Object.fromEntries(e.map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]));
  return Object.fromEntries(Object.entries(e).map(([k, v]) => [k, v === null || v === undefined ? '' : String(v)]));
}

const hostPort = (addr) => {
  const i = addr.lastIndexOf(':');
  return { host: addr.slice(0, i), port: Number(addr.slice(i + 1)) };
};

async function cairnRules(resolved, profile, compose, lc, problems) {
  const where = (s) => `${profile ? `--profile ${profile}` : 'default profile'}: service ${s}`;
  const all = resolved.services ?? {};
  // Compose 1.x's `config` prints every service; profiles apply at `up`. Filter as `up` would.
  const active = Object.fromEntries(Object.entries(all).filter(([, s]) => compose.filtersProfiles || !s.profiles || s.profiles.length === 0 || s.profiles.includes(profile)));
  const names = Object.keys(active).sort();
  const expected = [...EXPECTED[profile], TLS_INIT].sort();
  if (JSON.stringify(names) !== JSON.stringify(expected)) problems.push(`${profile ? `--profile ${profile}` : 'default profile'}: services are ${names.join(', ')}; expected ${expected.join(', ')}`);
  const tlsInit = active[TLS_INIT];
  const tlsInitVolumes = new Map();
  if (tlsInit) {
    if (!JSON.stringify(tlsInit.entrypoint ?? tlsInit.command ?? null).includes('deploy/tls-init.sh')) problems.push(`${where(TLS_INIT)}: does not run deploy/tls-init.sh`);
    for (const v of volumesOf(tlsInit)) if (v.type === 'volume') tlsInitVolumes.set(v.source, v.target);
  }

  const knownEnv = new Set(lc.AGENT_FLAGS.map((f) => `CAIRN_${f.slice(2).replace(/-/g, '_').toUpperCase()}`));
  const declaredVolumes = new Set(Object.keys(resolved.volumes ?? {}));
  const nodes = [];
  for (const [name, svc] of Object.entries(active)) {
    if (name === TLS_INIT) continue;
    const env = envOf(svc);
    for (const k of Object.keys(env)) if (k.startsWith('CAIRN_') && !knownEnv.has(k)) problems.push(`${where(name)}: ${k} is not a variable the agent reads (known: ${[...knownEnv].sort().join(', ')})`);
    let config;
    // The token file exists only inside the container (tls-init makes it): load with a stand-in.
    const tokenFile = env[TOKEN_ENV];
    try {
      config = lc.loadAgentConfig({ argv: [], env: tokenFile ? { ...env, [TOKEN_ENV]: standInToken() } : env, cwd: '/opt/cairn', hostname: svc.hostname ?? name });
    } catch (e) {
      problems.push(`${where(name)}: the agent would refuse its environment: ${e.message}`);
      continue;
    }
    if (config.nodeId !== name) problems.push(`${where(name)}: node id ${config.nodeId} differs from the service name`);
    const test = JSON.stringify(svc.healthcheck?.test ?? null);
    if (!test.includes('deploy/healthcheck.mjs')) problems.push(`${where(name)}: healthcheck ${test} does not run deploy/healthcheck.mjs (GET /readyz)`);
    if (svc.healthcheck?.disable === true) problems.push(`${where(name)}: healthcheck disabled`);
    if (svc.image !== 'cairn:local') problems.push(`${where(name)}: image ${svc.image}; expected cairn:local`);
    const ctx = svc.build?.context ?? svc.build;
    if (typeof ctx !== 'string' || path.resolve(ROOT, ctx) !== ROOT) problems.push(`${where(name)}: build context ${JSON.stringify(ctx)} is not the repository root`);
    const ports = portsOf(svc);
    const grpcPort = hostPort(config.grpcAddr).port;
    const httpPort = hostPort(config.httpAddr).port;
    for (const p of ports) {
      if (p.raw !== undefined) problems.push(`${where(name)}: cannot read port ${JSON.stringify(p.raw)}`);
      if (p.hostIp !== '127.0.0.1') problems.push(`${where(name)}: port ${p.published}->${p.target} is published on ${p.hostIp || 'every interface'}; expected 127.0.0.1`);
      if (p.target !== grpcPort && p.target !== httpPort) problems.push(`${where(name)}: publishes container port ${p.target}, which the agent does not listen on (${grpcPort}, ${httpPort})`);
    }
    if (!ports.some((p) => p.target === httpPort)) problems.push(`${where(name)}: the HTTP port ${httpPort} is not published`);
    const vols = volumesOf(svc);
    const data = vols.find((v) => v.target === config.dataDir);
    if (!data) problems.push(`${where(name)}: nothing is mounted at the data dir ${config.dataDir}`);
    else if (data.type !== 'volume' || !declaredVolumes.has(data.source)) problems.push(`${where(name)}: the data dir ${config.dataDir} is not a declared named volume (${JSON.stringify(data)})`);
    // TLS (docs/security.md): the node serves TLS with its own certificate, from its own
    // read-only volume that tls-init filled, and starts only after tls-init completed.
    const missingTls = TLS_ENV.filter((k) => !env[k]);
    let tlsVolume;
    if (missingTls.length > 0 || config.tlsCertFile === undefined) problems.push(`${where(name)}: TLS is off (${missingTls.join(', ') || 'TLS files'} not set${config.insecure ? '; CAIRN_INSECURE' : ''}): every node must serve TLS`);
    else {
      if (path.posix.basename(config.tlsCertFile) !== `node-${name}.pem`) problems.push(`${where(name)}: CAIRN_TLS_CERT_FILE ${config.tlsCertFile} is not node ${name}'s certificate (node-${name}.pem)`);
      const mounts = [config.tlsCaFile, config.tlsCertFile, config.tlsKeyFile, ...(tokenFile ? [tokenFile] : [])].map((f) => ({ f, v: vols.find((v) => f.startsWith(`${v.target.replace(/\/$/, '')}/`)) }));
      for (const { f, v } of mounts) {
        if (!v) problems.push(`${where(name)}: TLS file ${f} is in no mounted volume`);
        else if (v.type !== 'volume' || !declaredVolumes.has(v.source)) problems.push(`${where(name)}: TLS file ${f} is not in a declared named volume (${JSON.stringify(v)})`);
        else if (!v.readOnly) problems.push(`${where(name)}: the TLS volume ${v.source} is mounted writable at ${v.target}; mount it :ro`);
        else if (!tlsInitVolumes.has(v.source)) problems.push(`${where(name)}: the TLS volume ${v.source} is not one ${TLS_INIT} fills`);
        else if (tlsInitVolumes.get(v.source) !== `/etc/cairn/${name}`) problems.push(`${where(name)}: the TLS volume ${v.source} is where ${TLS_INIT} writes ${path.posix.basename(tlsInitVolumes.get(v.source))}'s material, not ${name}'s (/etc/cairn/${name})`);
        tlsVolume ??= v?.source;
      }
    }
    // Access control (docs/security.md): on, with the management token tls-init made.
    if (config.acl !== true) problems.push(`${where(name)}: access control is off (CAIRN_ACL=false): every node must run with ACLs`);
    else if (!tokenFile) problems.push(`${where(name)}: ${TOKEN_ENV} is not set: no management token would exist (set it to the file tls-init makes, /etc/cairn/tls/management-token)`);
    for (const v of vols) if (v.source === 'tls-ca') problems.push(`${where(name)}: mounts tls-ca, the volume with the CA key`);
    const deps = svc.depends_on ?? {};
    const initCond = Array.isArray(deps) ? undefined : deps[TLS_INIT]?.condition;
    if (initCond !== 'service_completed_successfully') problems.push(`${where(name)}: should depend on ${TLS_INIT} having completed successfully (has ${JSON.stringify(initCond ?? null)})`);
    nodes.push({ name, svc, config, ports, dataVolume: data?.source, tlsVolume });
  }

  const byAdvertise = new Map(nodes.map((n) => [n.config.advertiseAddr, n]));
  const seenPorts = new Map();
  const seenVolumes = new Map();
  for (const n of nodes) {
    const adv = hostPort(n.config.advertiseAddr);
    if (adv.host !== n.name && adv.host !== n.svc.hostname) problems.push(`${where(n.name)}: advertises ${n.config.advertiseAddr}, not its own service name`);
    if (adv.port !== hostPort(n.config.grpcAddr).port) problems.push(`${where(n.name)}: advertises port ${adv.port} but listens for gRPC on ${n.config.grpcAddr}`);
    for (const j of n.config.join) {
      const peer = byAdvertise.get(j);
      if (!peer) problems.push(`${where(n.name)}: joins ${j}, which is no node's advertised address (${[...byAdvertise.keys()].join(', ')})`);
      else if (peer === n) problems.push(`${where(n.name)}: joins itself (${j})`);
    }
    for (const p of n.ports) {
      if (p.published === 7500 || p.published === 7501) problems.push(`${where(n.name)}: host port ${p.published} clashes with a \`make run\` node`);
      const other = seenPorts.get(p.published);
      if (other) problems.push(`${where(n.name)}: host port ${p.published} is also published by ${other}`);
      seenPorts.set(p.published, n.name);
    }
    if (n.tlsVolume) {
      const other = seenVolumes.get(n.tlsVolume);
      if (other) problems.push(`${where(n.name)}: shares the TLS volume ${n.tlsVolume} (node keys) with ${other}`);
      seenVolumes.set(n.tlsVolume, n.name);
    }
    if (n.dataVolume) {
      const other = seenVolumes.get(n.dataVolume);
      if (other) problems.push(`${where(n.name)}: shares the data volume ${n.dataVolume} with ${other}`);
      seenVolumes.set(n.dataVolume, n.name);
    }
  }
  const group = nodes.filter((n) => n.config.bootstrapExpect > 0);
  if (group.length === 0) problems.push(`${profile || 'default'}: no node has CAIRN_BOOTSTRAP_EXPECT: nothing forms the cluster`);
  for (const n of group) {
    if (n.config.bootstrapExpect !== group.length) problems.push(`${where(n.name)}: expects ${n.config.bootstrapExpect} nodes, but ${group.length} bootstrap together (${group.map((g) => g.name).join(', ')})`);
    const missing = group.filter((g) => g !== n && !n.config.join.includes(g.config.advertiseAddr)).map((g) => g.name);
    if (missing.length > 0) problems.push(`${where(n.name)}: CAIRN_JOIN lacks ${missing.join(', ')} of its bootstrap group`);
    if (n.svc.profiles && n.svc.profiles.length > 0) problems.push(`${where(n.name)}: a bootstrap node must not depend on a profile (${n.svc.profiles.join(', ')})`);
  }
  for (const n of nodes.filter((x) => x.config.bootstrapExpect === 0)) {
    if (n.config.join.length === 0) problems.push(`${where(n.name)}: neither bootstraps nor joins`);
    for (const j of n.config.join) {
      const peer = byAdvertise.get(j);
      if (peer && peer.config.bootstrapExpect === 0) problems.push(`${where(n.name)}: joins ${peer.name}, another joiner; join the bootstrap group`);
    }
    const deps = n.svc.depends_on ?? {};
    for (const g of group) {
      const cond = Array.isArray(deps) ? undefined : deps[g.name]?.condition;
      if (cond !== 'service_healthy') problems.push(`${where(n.name)}: should depend on ${g.name} being healthy (has ${JSON.stringify(cond ?? null)})`);
    }
  }
}

function dockerRules(problems) {
  if (!existsSync(DOCKERFILE)) return problems.push('no Dockerfile');
  const text = readFileSync(DOCKERFILE, 'utf8');
  const lines = text.split('\n').map((l) => l.trim()).filter((l) => l !== '' && !l.startsWith('#'));
  const args = Object.fromEntries(lines.filter((l) => /^ARG\s+\w+=/.test(l)).map((l) => l.replace(/^ARG\s+/, '').split('=')));
  const expand = (s) => s.replace(/\$\{(\w+)\}|\$(\w+)/g, (_, a, b) => args[a ?? b] ?? '');
  const froms = lines.filter((l) => /^FROM\s/i.test(l)).map((l) => expand(l.split(/\s+/)[1] ?? ''));
  if (froms.length < 2) problems.push(`Dockerfile: ${froms.length} stage(s); expected a build stage and a runtime stage`);
  for (const f of froms) if (f !== 'node:20-slim') problems.push(`Dockerfile: stage FROM ${f}; expected node:20-slim`);
  if (!/\bmake build\b/.test(text)) problems.push('Dockerfile: the build stage does not run `make build`');
  const last = text.slice(text.lastIndexOf('\nFROM '));
  if (!/^EXPOSE\s+7500\s+7501\s*$/m.test(last)) problems.push('Dockerfile: the runtime stage does not EXPOSE 7500 7501');
  if (!/^HEALTHCHECK\b.*deploy\/healthcheck\.mjs/m.test(last)) problems.push('Dockerfile: the runtime stage has no HEALTHCHECK running deploy/healthcheck.mjs');
  if (!/^ENTRYPOINT\s+\[\s*"node",\s*"bin\/cairn"\s*\]/m.test(last)) problems.push('Dockerfile: the runtime stage does not run node bin/cairn');
  if (!/^USER\s+(?!root)\S+/m.test(last)) problems.push('Dockerfile: the runtime stage runs as root');
  // What the build stage COPYs from the context must exist and survive .dockerignore.
  const ignore = existsSync(DOCKERIGNORE) ? readFileSync(DOCKERIGNORE, 'utf8').split('\n').map((l) => l.trim()).filter((l) => l !== '' && !l.startsWith('#')) : [];
  if (ignore.length === 0) problems.push('.dockerignore: missing or empty (node_modules and dist would be sent to the builder)');
  for (const must of ['node_modules', 'dist']) if (!ignore.some((p) => p.replace(/^\/|\/$/g, '') === must)) problems.push(`.dockerignore: does not exclude ${must}`);
  const ignored = (rel) => ignore.some((p) => !p.startsWith('!') && (rel === p.replace(/^\/|\/$/g, '') || rel.startsWith(`${p.replace(/^\/|\/$/g, '')}/`)));
  for (const l of lines.filter((x) => /^COPY\s/i.test(x) && !/--from=/.test(x))) {
    const parts = l.replace(/^COPY\s+/i, '').split(/\s+/).filter((p) => !p.startsWith('--'));
    for (const src of parts.slice(0, -1)) {
      if (src === '.') continue;
      if (!existsSync(path.join(ROOT, src))) problems.push(`Dockerfile: COPY ${src}: no such file in the build context`);
      if (ignored(src)) problems.push(`Dockerfile: COPY ${src}: excluded by .dockerignore`);
    }
  }
  for (const needed of ['deploy/healthcheck.mjs', 'bin/cairn', 'package-lock.json', 'Makefile', 'src', 'tsconfig.json']) {
    if (ignored(needed)) problems.push(`.dockerignore: excludes ${needed}, which the build needs`);
  }
}

async function checkFile(compose, lc, file) {
  const problems = [];
  for (const profile of ['', 'five']) {
    const r = composeConfig(compose, file, profile);
    if (r.error) {
      problems.push(r.error);
      continue;
    }
    await cairnRules(r.config, profile, compose, lc, problems);
  }
  return problems;
}

// ---- Self-test: planted mistakes ------------------------------------------------------------

const PLANTED = [
  ['an undeclared volume', (s) => s.replace('- n2-data:/var/lib/cairn', '- n2-dta:/var/lib/cairn')],
  ['a misspelt key', (s) => s.replace('    hostname: n3', '    hostnme: n3')],
  ['a misspelt CAIRN_ variable', (s) => s.replace('CAIRN_BOOTSTRAP_EXPECT: "3"\n      CAIRN_JOIN: n2:7500,n3:7500', 'CAIRN_BOOTSTRAP_EXPECTED: "3"\n      CAIRN_JOIN: n2:7500,n3:7500')],
  ['a join entry naming no node', (s) => s.replace('CAIRN_JOIN: n1:7500,n3:7500', 'CAIRN_JOIN: n1:7500,n3:7600')],
  ['a wrong bootstrap-expect', (s) => s.replace(/CAIRN_BOOTSTRAP_EXPECT: "3"/g, 'CAIRN_BOOTSTRAP_EXPECT: "5"')],
  ['a value the agent refuses', (s) => s.replace('CAIRN_TICK_MS: ${CAIRN_TICK_MS:-100}', 'CAIRN_TICK_MS: ${CAIRN_TICK_MS:-fast}')],
  ['a duplicated host port', (s) => s.replace('"127.0.0.1:7521:7501"', '"127.0.0.1:7511:7501"')],
  ['a port on every interface', (s) => s.replace('"127.0.0.1:7531:7501"', '"7531:7501"')],
  ['n4 outside the five profile', (s) => s.replace('  n4:\n    <<: *node\n    profiles: [five]\n', '  n4:\n    <<: *node\n')],
  ['a shared data volume', (s) => s.replace('- n5-data:/var/lib/cairn', '- n4-data:/var/lib/cairn')],
  ['a missing healthcheck', (s) => s.replace('test: ["CMD", "node", "deploy/healthcheck.mjs"]', 'test: ["CMD", "true"]')],
  ['a node without TLS (--insecure)', (s) => s.replace(/      CAIRN_TLS_CERT_FILE: \/etc\/cairn\/tls\/node-n2\.pem\n      CAIRN_TLS_KEY_FILE: \/etc\/cairn\/tls\/node-n2-key\.pem\n/, '      CAIRN_TLS_CA_FILE: ""\n      CAIRN_INSECURE: "true"\n')],
  ["a node with another node's certificate", (s) => s.replace('CAIRN_TLS_CERT_FILE: /etc/cairn/tls/node-n3.pem\n      CAIRN_TLS_KEY_FILE: /etc/cairn/tls/node-n3-key.pem', 'CAIRN_TLS_CERT_FILE: /etc/cairn/tls/node-n1.pem\n      CAIRN_TLS_KEY_FILE: /etc/cairn/tls/node-n1-key.pem')],
  ["a node mounting another node's TLS volume", (s) => s.replace('- n3-tls:/etc/cairn/tls:ro', '- n1-tls:/etc/cairn/tls:ro')],
  ['a writable TLS volume', (s) => s.replace('- n2-tls:/etc/cairn/tls:ro', '- n2-tls:/etc/cairn/tls')],
  ['a node that does not wait for tls-init', (s) => s.replace('  depends_on:\n    tls-init:\n      condition: service_completed_successfully\n', '')],
  ['no tls-init service', (s) => s.replace('    entrypoint: ["sh", "deploy/tls-init.sh"]', '    entrypoint: ["sh", "-c", "true"]')],
  ['nodes without the management token file', (s) => s.replace('  CAIRN_ACL_INITIAL_MANAGEMENT_TOKEN_FILE: /etc/cairn/tls/management-token\n', '')],
  ['the management token file outside the node volume', (s) => s.replace('CAIRN_ACL_INITIAL_MANAGEMENT_TOKEN_FILE: /etc/cairn/tls/management-token', 'CAIRN_ACL_INITIAL_MANAGEMENT_TOKEN_FILE: /var/lib/cairn/management-token')],
  ['a node with access control off', (s) => s.replace('      CAIRN_NODE_ID: n2\n', '      CAIRN_NODE_ID: n2\n      CAIRN_ACL: "false"\n')],
];

// ---- Main -------------------------------------------------------------------------------------

const selfTest = process.argv.includes('--self-test');
const compose = findCompose();
if (!compose) {
  console.error('compose-check: neither `docker compose` (Compose v2) nor `docker-compose` is installed; `make compose-check` installs the Debian docker-compose package (as root), or install either yourself');
  process.exit(2);
}
if (!existsSync(LOAD_CONFIG)) {
  console.error(`compose-check: ${path.relative(ROOT, LOAD_CONFIG)} is missing; run make build first`);
  process.exit(2);
}
const lc = await import(pathToFileURL(LOAD_CONFIG).href);

const problems = await checkFile(compose, lc, COMPOSE_FILE);
dockerRules(problems);
if (problems.length > 0) {
  console.error(`compose-check: ${problems.length} problem(s) with ${compose.name}:`);
  for (const p of problems) console.error(`  - ${p}`);
  process.exit(1);
}
console.log(`compose-check: docker-compose.yml is valid for ${compose.name} (default: ${EXPECTED[''].join(' ')}; --profile five: ${EXPECTED.five.join(' ')}); Cairn's rules, Dockerfile and .dockerignore OK`);

if (selfTest) {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'cairn-compose-check-'));
  const original = readFileSync(COMPOSE_FILE, 'utf8');
  let missed = 0;
  try {
    for (const [what, plant] of PLANTED) {
      const mutated = plant(original);
      if (mutated === original) {
        console.error(`compose-check self-test: could not plant ${what} (the file changed; update PLANTED)`);
        missed++;
        continue;
      }
      const file = path.join(dir, 'docker-compose.yml');
      writeFileSync(file, mutated);
      const found = await checkFile(compose, lc, file);
      if (found.length === 0) {
        console.error(`compose-check self-test: ${what} was NOT caught`);
        missed++;
      } else {
        console.log(`compose-check self-test: ${what} caught: ${found[0].split('\n').slice(-1)[0].trim()}`);
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  if (missed > 0) process.exit(1);
  console.log(`compose-check self-test: all ${PLANTED.length} planted mistakes caught`);
}
