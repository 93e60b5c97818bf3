import * as fs from 'node:fs';
import { mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t, { type Test } from 'tap';
import { STREAMING_DEFAULTS } from '../controller/index.js';
import { DEFAULT_SEGMENT_BYTES } from '../platform/index.js';
import { getHeapStatistics } from 'node:v8';
import { AGENT_DEFAULTS, auditLogPath, defaultQuotaBytes, defaultWatchWindowBytes, type AgentConfig } from './config.js';
import { AGENT_FLAGS, ConfigError, envName, flagName, loadAgentConfig, parseHostPort, type LoadAgentConfigInput } from './load-config.js';

const CWD = '/srv/cairn';
const HOST = 'node-a.example.com';

function load(argv: readonly string[], env: Record<string, string | undefined> = {}, extra: Partial<LoadAgentConfigInput> = {}): AgentConfig {
  return loadAgentConfig({ argv, env, cwd: CWD, hostname: HOST, ...extra });
}

/** The ConfigError's problems, failing the test if there is none. */
function problems(t: Test, argv: readonly string[], env: Record<string, string | undefined> = {}, extra: Partial<LoadAgentConfigInput> = {}): readonly string[] {
  try {
    const config = load(argv, env, extra);
    t.fail(`expected a ConfigError, got ${JSON.stringify(config)}`);
    return [];
  } catch (e) {
    t.type(e, ConfigError);
    const err = e as ConfigError;
    t.equal(err.message, err.problems.join('; '), 'the message joins every problem');
    return err.problems;
  }
}

const tmp = mkdtempSync(path.join(os.tmpdir(), 'cairn-load-config-'));
let fileCount = 0;
function configFile(text: string, ext = 'yaml'): string {
  const file = path.join(tmp, `config-${++fileCount}.${ext}`);
  writeFileSync(file, text);
  return file;
}

const BASE = ['--data-dir', '/var/lib/cairn'];

t.test('--dev: a single bootstrapping node with demo types, data in <cwd>/cairn-data, id cairn1', async (t) => {
  t.same(load(['--dev']), {
    ...AGENT_DEFAULTS,
    nodeId: 'cairn1',
    dataDir: '/srv/cairn/cairn-data',
    advertiseAddr: AGENT_DEFAULTS.grpcAddr,
    dev: true,
    bootstrap: true,
    demoTypes: true,
  });
  const c = load(['--dev', '--data-dir', 'elsewhere', '--node-id', 'n7', '--demo-types=false']);
  t.equal(c.dataDir, '/srv/cairn/elsewhere', 'a relative --data-dir resolves against cwd');
  t.equal(c.nodeId, 'n7');
  t.equal(c.demoTypes, false, 'an explicit --demo-types=false beats the --dev default');
  t.equal(load(['--dev', '--bootstrap=false']).bootstrap, true, '--dev always bootstraps');
});

t.test('without --dev: defaults, --data-dir required, node id from the host name', async (t) => {
  t.same(load(BASE), {
    ...AGENT_DEFAULTS,
    nodeId: 'node-a',
    dataDir: '/var/lib/cairn',
    advertiseAddr: AGENT_DEFAULTS.grpcAddr,
  });
  t.same(problems(t, []), ['--data-dir is required (or --dev)']);
  t.equal(load(BASE, {}, { hostname: 'WEB-01' }).nodeId, 'web-01', 'the first label, lowercased');
  const p = problems(t, BASE, {}, { hostname: 'bad_host.example.com' });
  t.match(p[0], /cannot default --node-id from the host name 'bad_host\.example\.com'.*set --node-id/);
});

t.test('--node-id must be a lowercase DNS label', async (t) => {
  for (const bad of ['N1', 'n_1', '-n1', 'n1-', 'a'.repeat(64), 'n.1']) {
    t.match(problems(t, [...BASE, '--node-id', bad])[0], new RegExp(`^--node-id must be a lowercase DNS label.*got '${bad.replace('.', '\\.')}' \\(from the command line\\)$`), bad);
  }
  for (const good of ['n1', 'a', 'node-1', 'a'.repeat(63), '1']) t.equal(load([...BASE, '--node-id', good]).nodeId, good);
});

t.test('precedence: flag > environment > config file > default, for every kind of option', async (t) => {
  const file = configFile('tickMs: 30\njoin: [file:1]\nbootstrapExpect: 3\nlogLevel: warn\n');
  const env = { CAIRN_CONFIG: file, CAIRN_TICK_MS: '20', CAIRN_JOIN: 'env:1,env:2', CAIRN_LOG_LEVEL: 'debug' };
  const all = load([...BASE, '--tick-ms', '10', '--join', 'flag:1', '--log-level', 'error'], env);
  t.equal(all.tickMs, 10, 'flag beats env and file');
  t.same(all.join, ['flag:1'], 'a flag list replaces the env list, it does not merge');
  t.equal(all.logLevel, 'error');
  const noFlag = load(BASE, env);
  t.equal(noFlag.tickMs, 20, 'env beats file');
  t.same(noFlag.join, ['env:1', 'env:2']);
  t.equal(noFlag.logLevel, 'debug');
  t.equal(noFlag.bootstrapExpect, 3, 'the file fills what flags and env leave unset');
  const fileOnly = load(BASE, { CAIRN_CONFIG: file });
  t.equal(fileOnly.tickMs, 30, 'file beats default');
  t.same(fileOnly.join, ['file:1']);
  t.equal(load(BASE).tickMs, AGENT_DEFAULTS.tickMs, 'default when nothing sets it');
});

t.test('--config beats CAIRN_CONFIG; an empty variable counts as unset', async (t) => {
  const a = configFile('tickMs: 1\n');
  const b = configFile('tickMs: 2\n');
  t.equal(load([...BASE, '--config', a], { CAIRN_CONFIG: b }).tickMs, 1);
  t.equal(load(BASE, { CAIRN_CONFIG: b }).tickMs, 2);
  t.equal(load(BASE, { CAIRN_CONFIG: '', CAIRN_TICK_MS: '' }).tickMs, AGENT_DEFAULTS.tickMs);
  t.equal(load([...BASE, `--config=${a}`]).tickMs, 1, '--flag=value form');
  const rel = path.basename(a);
  t.equal(load([...BASE, '--config', rel], {}, { cwd: tmp }).tickMs, 1, 'a relative --config resolves against cwd');
});

t.test('every option can be set from flags, env and file with the same names', async (t) => {
  const tokenFile = path.join(tmp, 'initial-token');
  fs.writeFileSync(tokenFile, `cairn_ops_${'ab'.repeat(32)}\n`);
  const values: Record<keyof AgentConfig, { flag: string; file: unknown; want: unknown }> = {
    nodeId: { flag: 'n2', file: 'n2', want: 'n2' },
    dataDir: { flag: '/d', file: '/d', want: '/d' },
    grpcAddr: { flag: '10.0.0.2:7600', file: '10.0.0.2:7600', want: '10.0.0.2:7600' },
    advertiseAddr: { flag: 'n2.internal:7600', file: 'n2.internal:7600', want: 'n2.internal:7600' },
    httpAddr: { flag: '[::1]:7601', file: '[::1]:7601', want: '[::1]:7601' },
    bootstrap: { flag: 'false', file: false, want: false },
    bootstrapExpect: { flag: '3', file: 3, want: 3 },
    join: { flag: 'n1:7500,n3:7500', file: ['n1:7500', 'n3:7500'], want: ['n1:7500', 'n3:7500'] },
    dev: { flag: 'false', file: false, want: false },
    demoTypes: { flag: 'true', file: true, want: true },
    demoControllers: { flag: 'true', file: true, want: true },
    controllers: { flag: 'true', file: true, want: true },
    spuTimeoutMs: { flag: '2500', file: 2500, want: 2500 },
    logLevel: { flag: 'trace', file: 'trace', want: 'trace' },
    tickMs: { flag: '7', file: 7, want: 7 },
    electionTicks: { flag: '20', file: 20, want: 20 },
    heartbeatTicks: { flag: '2', file: 2, want: 2 },
    leaderLostTicks: { flag: '0', file: 0, want: 0 },
    writeStallMs: { flag: '0', file: 0, want: 0 },
    snapshotEntries: { flag: '500', file: 500, want: 500 },
    snapshotLogPercent: { flag: '0', file: 0, want: 0 },
    snapshotMaxLogBytes: { flag: '1048576', file: 1048576, want: 1048576 },
    snapshotRetainEntries: { flag: '5000', file: 5000, want: 5000 },
    snapshotRetainBytes: { flag: '0', file: 0, want: 0 },
    logStore: { flag: 'level', file: 'level', want: 'level' },
    walSegmentBytes: { flag: '1048576', file: 1048576, want: 1048576 },
    watchWindowEvents: { flag: '50', file: 50, want: 50 },
    watchWindowBytes: { flag: '2097152', file: 2097152, want: 2097152 },
    quotaBytes: { flag: '4194304', file: 4194304, want: 4194304 },
    watchBufferEvents: { flag: '60', file: 60, want: 60 },
    watchBookmarkMs: { flag: '70', file: 70, want: 70 },
    listMaxPage: { flag: '500', file: 500, want: 500 },
    txnMaxOps: { flag: '16', file: 16, want: 16 },
    maxLeases: { flag: '500', file: 500, want: 500 },
    leaseMaxAttached: { flag: '300', file: 300, want: 300 },
    listSnapshots: { flag: '8', file: 8, want: 8 },
    listSnapshotTtlMs: { flag: '60000', file: 60000, want: 60000 },
    httpAllowedHosts: { flag: 'cairn.internal,10.0.0.9:7501', file: ['cairn.internal', '10.0.0.9:7501'], want: ['cairn.internal', '10.0.0.9:7501'] },
    plantedBugs: { flag: 'skip-fsync,stale-read', file: ['skip-fsync', 'stale-read'], want: ['skip-fsync', 'stale-read'] },
    tlsCaFile: { flag: '/tls/ca.pem', file: '/tls/ca.pem', want: '/tls/ca.pem' },
    tlsCertFile: { flag: '/tls/n2.pem', file: '/tls/n2.pem', want: '/tls/n2.pem' },
    tlsKeyFile: { flag: '/tls/n2-key.pem', file: '/tls/n2-key.pem', want: '/tls/n2-key.pem' },
    insecure: { flag: 'false', file: false, want: false },
    acl: { flag: 'true', file: true, want: true },
    aclInitialManagementTokenFile: { flag: tokenFile, file: tokenFile, want: tokenFile },
    metricsAnonymous: { flag: 'true', file: true, want: true },
    httpMaxConnections: { flag: '0', file: 0, want: 0 },
    httpHeadersTimeoutMs: { flag: '3000', file: 3000, want: 3000 },
    httpRequestTimeoutMs: { flag: '9000', file: 9000, want: 9000 },
    httpKeepAliveTimeoutMs: { flag: '4000', file: 4000, want: 4000 },
    grpcMaxConnections: { flag: '10', file: 10, want: 10 },
    grpcMaxConcurrentStreams: { flag: '128', file: 128, want: 128 },
    grpcMaxMessageBytes: { flag: '8388608', file: 8388608, want: 8388608 },
    grpcKeepaliveMs: { flag: '30000', file: 30000, want: 30000 },
    grpcIdleTimeoutMs: { flag: '0', file: 0, want: 0 },
    watchMaxStreams: { flag: '11', file: 11, want: 11 },
    watchMaxStreamsPerConnection: { flag: '3', file: 3, want: 3 },
    rateLimitPerAddress: { flag: '0', file: 0, want: 0 },
    rateLimitPerAddressBurst: { flag: '5', file: 5, want: 5 },
    rateLimitPerToken: { flag: '12', file: 12, want: 12 },
    rateLimitPerTokenBurst: { flag: '13', file: 13, want: 13 },
    rateLimitMaxKeys: { flag: '14', file: 14, want: 14 },
    auditLogFile: { flag: '/var/log/cairn-audit.log', file: '/var/log/cairn-audit.log', want: '/var/log/cairn-audit.log' },
    auditLogMaxBytes: { flag: '0', file: 0, want: 0 },
    heapGrowingPercent: { flag: '0', file: 0, want: 0 },
  };
  const keys = Object.keys(values) as (keyof AgentConfig)[];
  const want = Object.fromEntries(keys.map((k) => [k, values[k].want]));
  const argv = keys.flatMap((k) => [`${flagName(k)}=${values[k].flag}`]);
  t.same(load(argv), want, 'flags');
  t.same(load([], Object.fromEntries(keys.map((k) => [envName(k), values[k].flag]))), want, 'environment');
  const json = configFile(JSON.stringify(Object.fromEntries(keys.map((k) => [k, values[k].file]))), 'json');
  t.same(load(['--config', json]), want, 'JSON file');
  t.same(AGENT_FLAGS, ['--config', ...keys.map((k) => flagName(k))]);
  t.equal(envName('bootstrapExpect'), 'CAIRN_BOOTSTRAP_EXPECT');
  t.equal(flagName('snapshotEntries'), '--snapshot-entries');
});

t.test('config file: YAML or JSON by content; unknown keys, bad syntax and bad shapes are errors', async (t) => {
  const yaml = configFile('# a comment\nnodeId: n3\ndataDir: data\njoin:\n  - n1:7500\nbootstrapExpect: 3\n');
  const c = load(['--config', yaml]);
  t.equal(c.nodeId, 'n3');
  t.equal(c.dataDir, path.join(tmp, 'data'), "a relative dataDir in a file resolves against the file's directory");
  t.equal(load(['--config', configFile('{"dataDir": "/x", "tickMs": 5}', 'conf')]).tickMs, 5, 'JSON whatever the extension');
  t.equal(load([...BASE, '--config', configFile('')]).tickMs, AGENT_DEFAULTS.tickMs, 'an empty file sets nothing');
  t.equal(load([...BASE, '--config', configFile('tickMs:\n')]).tickMs, AGENT_DEFAULTS.tickMs, 'a key with no value sets nothing');

  const unknown = configFile('dataDir: /x\ntick_ms: 5\n');
  t.match(problems(t, ['--config', unknown]), [`unknown key 'tick_ms' in config file ${unknown} (known keys: nodeId, dataDir,`]);
  const badYaml = configFile('dataDir: [unclosed\n');
  t.match(problems(t, ['--config', badYaml]), [`config file ${badYaml} is not valid YAML: `]);
  const badJson = configFile('{"dataDir": }', 'json');
  t.match(problems(t, ['--config', badJson]), [`config file ${badJson} is not valid JSON: `]);
  const list = configFile('- a\n- b\n');
  t.same(problems(t, [...BASE, '--config', list]), [`config file ${list} must hold a mapping of option names to values, got a list`]);
  const missing = path.join(tmp, 'missing.yaml');
  t.match(problems(t, ['--config', missing]), [`cannot read config file ${missing} (from the command line): ENOENT`]);
  t.match(problems(t, [], { CAIRN_CONFIG: missing }), [`cannot read config file ${missing} (from CAIRN_CONFIG): ENOENT`]);
  const wrongType = configFile('dataDir: /x\ntickMs: "fast"\njoin: 7\ndev: "maybe"\n');
  t.same(problems(t, ['--config', wrongType]), [
    `--join must be a comma-separated string or a list of strings, got 7 (from key 'join' in ${wrongType})`,
    `--dev must be true or false, got 'maybe' (from key 'dev' in ${wrongType})`,
    `--tick-ms must be a positive integer, got 'fast' (from key 'tickMs' in ${wrongType})`,
  ]);
});

t.test('the log store: wal by default, level on request; segment sizes are checked', async (t) => {
  t.equal(load(BASE).logStore, 'wal');
  t.equal(load(BASE).walSegmentBytes, DEFAULT_SEGMENT_BYTES, "64 MiB segments by default, the store's own default");
  t.equal(load([...BASE, '--log-store', 'level']).logStore, 'level');
  t.same(problems(t, [...BASE, '--log-store', 'rocks']), ["--log-store must be one of wal, level, got 'rocks' (from the command line)"]);
  t.same(problems(t, [...BASE], { CAIRN_WAL_SEGMENT_BYTES: '100000' }), ['--wal-segment-bytes must be a multiple of 4096 from 65536 to 1073741824, got 100000 (from CAIRN_WAL_SEGMENT_BYTES)']);
  t.same(problems(t, [...BASE, '--wal-segment-bytes', '4096']), ['--wal-segment-bytes must be a multiple of 4096 from 65536 to 1073741824, got 4096 (from the command line)']);
});

t.test('the data quota: an eighth of the heap limit by default, at least 1 MiB, checked with an error naming the flag', async (t) => {
  const mib = 1024 * 1024;
  t.equal(defaultQuotaBytes(4144 * mib), 518 * mib, 'an eighth of a 4,144 MiB heap');
  t.equal(defaultQuotaBytes(4144 * mib + 12345), 518 * mib, 'rounded down to a MiB');
  t.equal(defaultQuotaBytes(4 * mib), mib, 'never below 1 MiB');
  t.equal(load(BASE).quotaBytes, defaultQuotaBytes(getHeapStatistics().heap_size_limit), "this process's default");
  t.equal(defaultWatchWindowBytes(4144 * mib), 32 * mib, 'the watch window: a 128th of a 4,144 MiB heap, rounded down to a MiB');
  t.equal(defaultWatchWindowBytes(512 * mib), 8 * mib, 'never below 8 MiB');
  t.equal(defaultWatchWindowBytes(64 * 1024 * mib), 256 * mib, 'never above 256 MiB');
  t.equal(load(BASE).watchWindowBytes, defaultWatchWindowBytes(getHeapStatistics().heap_size_limit), "the watch window: this process's default");
  t.equal(load([...BASE, '--quota-bytes', String(4 * mib)]).quotaBytes, 4 * mib);
  t.same(problems(t, [...BASE, '--quota-bytes', '1000']), ['--quota-bytes must be at least 1048576 (1 MiB: a resource at the size limit must fit), got 1000 (from the command line)']);
  t.same(problems(t, BASE, { CAIRN_QUOTA_BYTES: 'lots' }), ["--quota-bytes must be a positive integer, got 'lots' (from CAIRN_QUOTA_BYTES)"]);
  t.same(problems(t, [...BASE, '--heap-growing-percent', '301']), ["--heap-growing-percent must be from 0 (V8's own) to 300, got 301 (from the command line)"]);
  t.equal(load(BASE).heapGrowingPercent, 100, 'the heap growing factor: 100% (twice the live size) by default');
  t.same(problems(t, [...BASE, '--watch-window-bytes', '0']), ["--watch-window-bytes must be a positive integer, got '0' (from the command line)"]);
  t.same(problems(t, [...BASE, '--watch-window-bytes', '4096']), ['--watch-window-bytes must be at least 1048576 (1 MiB: an event of a resource at the size limit must fit), got 4096 (from the command line)']);
});

t.test('errors name the option and the source of the bad value', async (t) => {
  t.same(problems(t, BASE, { CAIRN_TICK_MS: 'abc' }), ["--tick-ms must be a positive integer, got 'abc' (from CAIRN_TICK_MS)"]);
  t.same(problems(t, [...BASE, '--tick-ms', 'abc']), ["--tick-ms must be a positive integer, got 'abc' (from the command line)"]);
  const file = configFile('tickMs: -5\n');
  t.same(problems(t, [...BASE, '--config', file]), [`--tick-ms must be a positive integer, got -5 (from key 'tickMs' in ${file})`]);
  for (const bad of ['0', '-1', '1.5', '1e3', ' 1', '99999999999999999999']) {
    t.match(problems(t, [...BASE, '--election-ticks', bad]), [/^--election-ticks must be a positive integer/], bad);
  }
  t.same(problems(t, [...BASE, '--bootstrap-expect', '-1']), ["--bootstrap-expect must be a non-negative integer, got '-1' (from the command line)"]);
  t.same(problems(t, [...BASE, '--log-level', 'loud']), ["--log-level must be one of fatal, error, warn, info, debug, trace, silent, got 'loud' (from the command line)"]);
  t.same(problems(t, BASE, { CAIRN_DEV: 'maybe' }), ["--dev must be true or false, got 'maybe' (from CAIRN_DEV)"]);
  t.same(problems(t, [...BASE, '--planted-bugs', 'ok,not ok']), ["--planted-bugs entries must be names (letters, digits, '.', '_', '-'), got 'not ok' (from the command line)"]);
  t.same(problems(t, [...BASE, '--spu-timeout-ms', '0']), ["--spu-timeout-ms must be a positive integer, got '0' (from the command line)"]);
  t.same(problems(t, [...BASE, '--demo-controllers']), ['--demo-controllers needs the demo types: add --demo-types (or --dev) (from the command line)']);
});

t.test('booleans: --flag, --flag=true|false, and 1/0/yes/no/on/off in the environment', async (t) => {
  t.equal(load(['--dev=true']).dev, true);
  t.equal(load([...BASE, '--dev=false']).dev, false);
  for (const v of ['1', 'true', 'YES', 'on']) t.equal(load([], { CAIRN_DEV: v }).dev, true, v);
  for (const v of ['0', 'false', 'No', 'off']) t.equal(load(BASE, { CAIRN_DEV: v }).dev, false, v);
  t.equal(load([...BASE, '--demo-types']).demoTypes, true);
  t.equal(load([...BASE, '--demo-types', '--demo-controllers']).demoControllers, true);
  t.equal(load(['--dev', '--demo-controllers']).demoControllers, true, '--dev gives the demo types the controller needs');
  t.equal(load(['--dev']).demoControllers, false, 'not implied by --dev: it writes statuses');
  t.equal(load(['--dev']).controllers, false, '--controllers is off by default');
  t.equal(load(['--dev']).spuTimeoutMs, STREAMING_DEFAULTS.spuTimeoutMs, "--spu-timeout-ms defaults to the controllers' own default");
  t.equal(load(['--dev', '--controllers']).controllers, true);
  t.equal(load(['--dev'], { CAIRN_CONTROLLERS: 'true' }).controllers, true);
  t.equal(load(['--dev', '--controllers=false'], { CAIRN_CONTROLLERS: 'true' }).controllers, false, 'the flag beats the environment');
});

t.test('--dev is a single node: no --join, no --bootstrap-expect', async (t) => {
  t.same(problems(t, ['--dev', '--join', 'n2:7500']), [
    '--dev is a single node; it cannot be combined with --join/--bootstrap-expect (got --dev from the command line, --join (from the command line))',
  ]);
  t.match(problems(t, ['--dev'], { CAIRN_BOOTSTRAP_EXPECT: '3' }), [
    /^--dev is a single node; it cannot be combined with --join\/--bootstrap-expect \(.*--bootstrap-expect \(from CAIRN_BOOTSTRAP_EXPECT\)\)$/,
  ]);
});

t.test('bootstrap rules: --bootstrap and --bootstrap-expect are exclusive; N > 1 needs --join', async (t) => {
  t.match(problems(t, [...BASE, '--bootstrap', '--bootstrap-expect', '3', '--join', 'n2:7500']), [
    /^--bootstrap and --bootstrap-expect are exclusive/,
    /^--bootstrap forms a one-node cluster and cannot be combined with --join/,
  ]);
  t.same(problems(t, [...BASE, '--bootstrap-expect', '3']), [
    "--bootstrap-expect 3 needs --join with the other nodes' gRPC addresses (got --bootstrap-expect (from the command line))",
  ]);
  t.equal(load([...BASE, '--bootstrap-expect', '1']).bootstrapExpect, 1, 'one expected node needs no peers');
  const c = load([...BASE, '--bootstrap-expect', '3', '--join', 'n2:7500', '--join', 'n3:7500,n4:7500']);
  t.same(c.join, ['n2:7500', 'n3:7500', 'n4:7500'], '--join repeats and splits on commas');
  t.equal(c.bootstrap, false);
  t.same(load([...BASE, '--join', 'n2:7500']).join, ['n2:7500'], 'join alone joins an existing cluster');
  t.equal(load([...BASE, '--bootstrap']).bootstrap, true);
});

t.test('addresses are host:port with a port from 1 to 65535, IPv6 in brackets', async (t) => {
  for (const good of ['127.0.0.1:7500', 'localhost:1', '[::1]:65535', 'node-1.example.com:80', 'n1:7500', 'host.:80', '[fe80::1]:7500']) {
    t.type(parseHostPort(good), 'object', good);
  }
  for (const bad of ['x', ':7500', 'host:', 'host:0', 'host:65536', '[::1', '::1:7500', '[zz]:1', '1.2.3:80', 'a_b:80', 'host:80:80', 'http://h:80', 'h:-1', '-h:80']) {
    t.type(parseHostPort(bad), 'string', bad);
  }
  t.same(problems(t, [...BASE, '--grpc-addr', 'host:0']), ["--grpc-addr must be host:port with a port from 1 to 65535, got 'host:0' (from the command line)"]);
  t.same(problems(t, BASE, { CAIRN_HTTP_ADDR: '::1:7501' }), ["--http-addr must be host:port (IPv6 in brackets, e.g. [::1]:7500), got '::1:7501' (from CAIRN_HTTP_ADDR)"]);
  t.same(problems(t, [...BASE, '--join', 'n2:7500,n3']), ["--join entries must each be host:port (IPv6 in brackets, e.g. [::1]:7500), got 'n3' (from the command line)"]);
  t.match(problems(t, [...BASE, '--grpc-addr', '127.0.0.1:7000', '--http-addr', '127.0.0.1:7000']), [/^--grpc-addr and --http-addr must not share a port/]);
});

t.test('advertise address: defaults to --grpc-addr, required when that binds every interface', async (t) => {
  t.equal(load([...BASE, '--insecure', '--grpc-addr', '10.1.2.3:7500']).advertiseAddr, '10.1.2.3:7500');
  for (const wildcard of ['0.0.0.0:7500', '[::]:7500']) {
    t.same(problems(t, [...BASE, '--insecure', '--grpc-addr', wildcard]), [
      `--grpc-addr ${wildcard} (from the command line) binds every interface, so peers cannot use it; set --advertise-addr to the address they should use`,
    ]);
    const c = load([...BASE, '--insecure', '--grpc-addr', wildcard, '--advertise-addr', '10.1.2.3:7500']);
    t.equal(c.grpcAddr, wildcard);
    t.equal(c.advertiseAddr, '10.1.2.3:7500');
  }
  t.match(problems(t, [...BASE, '--advertise-addr', '0.0.0.0:7500']), [/^--advertise-addr must be an address peers can reach, not the wildcard/]);
});

t.test('--election-ticks must exceed --heartbeat-ticks (etcd raft Config.validate)', async (t) => {
  t.same(problems(t, [...BASE, '--heartbeat-ticks', '10']), [
    '--election-ticks must be greater than --heartbeat-ticks, got 10 (by default) and 10 (from the command line)',
  ]);
  t.equal(load([...BASE, '--heartbeat-ticks', '9']).heartbeatTicks, 9);
});

t.test('the command line: unknown flags, missing values, stray arguments', async (t) => {
  t.same(problems(t, [...BASE, '--tick', '5']), ['unknown flag --tick for cairn agent (see cairn agent --help)', "unexpected argument '5' (cairn agent takes only flags; see cairn agent --help)"]);
  t.same(problems(t, [...BASE, '-v']), ['unknown flag -v for cairn agent (see cairn agent --help)']);
  t.same(problems(t, [...BASE, '--node-id']), ['--node-id needs a value']);
  t.same(problems(t, [...BASE, '--node-id', '--dev']), ['--node-id needs a value']);
  t.equal(load([...BASE, '--tick-ms=5', '--tick-ms', '6']).tickMs, 6, 'a repeated flag replaces the earlier one');
});

t.test('every problem is reported at once', async (t) => {
  const p = problems(t, ['--tick-ms', 'x', '--log-level', 'loud', '--grpc-addr', 'nope'], { CAIRN_SNAPSHOT_ENTRIES: '0' });
  t.equal(p.length, 5, p.join('\n'));
  t.match(p, [/^--tick-ms/, /^--snapshot-entries/, /^--data-dir is required/, /^--grpc-addr/, /^--log-level/]);
});

t.test('secure by default: off loopback a node needs TLS material or --insecure', async (t) => {
  const open = ['--node-id', 'n1', '--data-dir', '/d'];
  t.match(problems(t, [...open, '--grpc-addr', '10.0.0.2:7500', '--http-addr', '127.0.0.1:7501']), [
    /^--grpc-addr 10\.0\.0\.2:7500 \(from the command line\) is not a loopback address and no TLS material is given: anyone who can reach it could join the cluster/,
  ]);
  t.match(problems(t, [...open, '--grpc-addr', '0.0.0.0:7500', '--advertise-addr', 'n1:7500', '--http-addr', '0.0.0.0:7501']), [/--grpc-addr 0\.0\.0\.0:7500 .* and --http-addr 0\.0\.0\.0:7501 .* are not a loopback address/]);
  const insecure = load([...open, '--grpc-addr', '10.0.0.2:7500', '--insecure']);
  t.equal(insecure.insecure, true, '--insecure runs open on purpose');
  t.equal(insecure.tlsCaFile, undefined);
  for (const host of ['127.0.0.1', '127.1.2.3', 'localhost', '[::1]']) {
    t.equal(load([...open, '--grpc-addr', `${host}:7500`, '--http-addr', `${host}:7501`]).insecure, false, `${host} needs no TLS`);
  }
  const tls = load([...open, '--grpc-addr', '10.0.0.2:7500', '--tls-ca-file', 'ca.pem', '--tls-cert-file', 'n1.pem', '--tls-key-file', 'n1-key.pem'], {}, { cwd: '/etc/cairn' });
  t.same([tls.tlsCaFile, tls.tlsCertFile, tls.tlsKeyFile], ['/etc/cairn/ca.pem', '/etc/cairn/n1.pem', '/etc/cairn/n1-key.pem'], 'paths resolve against cwd');
  t.match(problems(t, [...open, '--tls-ca-file', 'ca.pem']), [/^--tls-ca-file, --tls-cert-file and --tls-key-file go together: give all three/]);
  t.match(problems(t, [...open, '--insecure', '--tls-ca-file', 'a', '--tls-cert-file', 'b', '--tls-key-file', 'c']), [/^--insecure \(from the command line\) contradicts the TLS material given/]);
});

t.test('--http-allowed-hosts takes host names, addresses or *, and refuses what is not one', async (t) => {
  t.same(load([...BASE, '--http-allowed-hosts', 'a.example,[fd00::1]:7501', '--http-allowed-hosts', '*']).httpAllowedHosts, ['a.example', '[fd00::1]:7501', '*'], 'repeated flags accumulate');
  t.throws(() => load([...BASE, '--http-allowed-hosts', 'http://a.example/']), /--http-allowed-hosts entries must be host names/);
});

t.test('limits (docs/security.md "Limits"): defaults, and values that cannot work are refused up front', async (t) => {
  const c = load(BASE);
  t.match(c, { httpMaxConnections: 4096, httpHeadersTimeoutMs: 10_000, httpRequestTimeoutMs: 120_000, grpcMaxMessageBytes: 4 * 1024 * 1024, grpcMaxConcurrentStreams: 2048, rateLimitPerAddress: 10_000, rateLimitPerToken: 10_000, watchMaxStreams: 50_000 });
  t.same(problems(t, [...BASE, '--http-headers-timeout-ms', '5000', '--http-request-timeout-ms', '4000']), [
    '--http-headers-timeout-ms must not exceed --http-request-timeout-ms, got 5000 (from the command line) and 4000 (from the command line)',
  ]);
  t.same(problems(t, [...BASE, '--grpc-max-message-bytes', '1048576']), ['--grpc-max-message-bytes must be from 2097152 (a 1 MiB resource and its envelope) to 67108864, got 1048576 (from the command line)']);
  t.same(problems(t, [...BASE, '--grpc-max-concurrent-streams', '10']), ['--grpc-max-concurrent-streams must be at least 100 (peers forward writes and reads over one connection), got 10 (from the command line)']);
  t.same(problems(t, [...BASE, '--rate-limit-per-address-burst', '0']), ["--rate-limit-per-address-burst must be a positive integer, got '0' (from the command line)"]);
  t.equal(load([...BASE, '--rate-limit-per-address', '0']).rateLimitPerAddress, 0, '0 turns a rate limit off');
});

t.test('the audit log: <data-dir>/audit.log by default; "-" and "off" as they are; a relative file against cwd', async (t) => {
  const c = load(BASE);
  t.equal(c.auditLogFile, undefined);
  t.equal(auditLogPath(c), '/var/lib/cairn/audit.log');
  t.equal(auditLogPath(load([...BASE, '--audit-log-file', '-'])), '-');
  t.equal(auditLogPath(load([...BASE, '--audit-log-file', 'off'])), 'off');
  t.equal(auditLogPath(load([...BASE, '--audit-log-file', 'logs/audit.log'], {}, { cwd: '/srv' })), '/srv/logs/audit.log');
  t.equal(load([...BASE, '--audit-log-max-bytes', '0']).auditLogMaxBytes, 0, '0: rotate externally');
});
