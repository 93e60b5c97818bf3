#!/usr/bin/env node
// Measures how soon a real `cairn agent --dev` takes writes (issue 14, item 7: "Starting is not
// failing", target 300 ms from listening to the first acknowledged write).
//
//   node scripts/measure-start-up.mjs [--runs 5] [--mode fresh|existing|both] [--dir <tmp>]
//       [--compare <other cairn tree>] [--seed-with <cairn tree>] [--no-controllers] [--verbose] [-- extra agent flags]
//
// Each run starts `node bin/cairn agent --dev --controllers` (what `make run` starts) as its own
// process on a data dir of its own, watches its stdout for the 'listening' log line, then sends
// `PUT /v1/resource/demo.v1.Artist/<name>` at once and again every 5 ms after a refusal, and
// prints listening -> first acknowledged write (and spawn -> listening). `fresh` starts on an
// empty data dir; `existing` first runs the agent once on the dir (one write, stopped with
// SIGTERM) and measures the restart. Log lines with a duration field (`...Ms`: the log store's
// open and load timings at `--log-level debug`, given after `--`) are printed with each run,
// relative to 'listening'; `--verbose` prints every log line. Prints the median of each mode
// and the machine it ran on. `--compare <dir>` also runs the cairn built in `<dir>` (its
// bin/cairn and dist/), alternating with this tree run by run so both see the same load, and
// prints the ratio of the medians. `--seed-with <dir>` makes the `existing` data dirs with the
// cairn in `<dir>` (say, a build from before a change of the log's files: a data dir it left).
// `--no-controllers` runs `cairn agent --dev` alone.
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { createServer } from 'node:net';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const here = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const argv = process.argv.slice(2);
const dash = argv.indexOf('--');
const own = dash === -1 ? argv : argv.slice(0, dash);
const extra = dash === -1 ? [] : argv.slice(dash + 1);
const opt = (name, dflt) => {
  const i = own.indexOf(name);
  return i === -1 ? dflt : own[i + 1];
};
const runs = Number(opt('--runs', '5'));
const mode = opt('--mode', 'both');
const verbose = own.includes('--verbose');
const baseDir = opt('--dir', os.tmpdir());
const compare = opt('--compare', undefined);
const seedWith = opt('--seed-with', undefined);
const agentFlags = own.includes('--no-controllers') ? ['--dev'] : ['--dev', '--controllers'];
const trees = compare === undefined ? [here] : [path.resolve(compare), here];
if (!Number.isInteger(runs) || runs < 1) throw new Error(`--runs must be a positive integer, got ${opt('--runs')}`);
if (!['fresh', 'existing', 'both'].includes(mode)) throw new Error(`--mode must be fresh, existing or both, got ${mode}`);

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? s[m] : (s[m - 1] + s[m]) / 2;
};

/** A port the OS says is free now. */
function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/** Starts the agent on `dataDir`; `listening` resolves once it logs 'listening' (or rejects if it exits first). */
function startAgent(root, dataDir, ports) {
  const spawnedAt = performance.now();
  const child = spawn(process.execPath, [path.join(root, 'bin/cairn'), 'agent', ...agentFlags, '--data-dir', dataDir, '--grpc-addr', `127.0.0.1:${ports.grpc}`, '--http-addr', `127.0.0.1:${ports.http}`, ...extra], {
    cwd: root,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines = [];
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  const listening = new Promise((resolve, reject) => {
    createInterface({ input: child.stdout }).on('line', (line) => {
      const at = performance.now();
      let rec;
      try {
        rec = JSON.parse(line);
      } catch {
        rec = { msg: line };
      }
      lines.push({ at, rec });
      if (rec.msg === 'listening') resolve({ at, http: rec.http });
    });
    void exited.then(({ code, signal }) => reject(new Error(`the agent exited (code ${code}, signal ${signal}) before listening: ${stderr.slice(-2000)}`)));
  });
  return { child, spawnedAt, listening, exited, lines, stderr: () => stderr };
}

async function put(http, name) {
  try {
    const res = await fetch(`http://${http}/v1/resource/demo.v1.Artist/${name}`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ data: { name } }),
    });
    return { status: res.status, text: await res.text() };
  } catch (e) {
    return { status: 0, text: String(e) };
  }
}

async function stop(agent) {
  agent.child.kill('SIGTERM');
  const timer = setTimeout(() => agent.child.kill('SIGKILL'), 10_000);
  await agent.exited;
  clearTimeout(timer);
}

/** One measured start on `dataDir`: listening -> first acknowledged write. */
async function measure(root, dataDir, ports, label) {
  const agent = startAgent(root, dataDir, ports);
  try {
    const { at: listeningAt, http } = await agent.listening;
    let attempts = 0;
    let refusals = 0;
    let last;
    for (;;) {
      attempts++;
      last = await put(http, `first-${attempts}`);
      if (last.status === 200) break;
      refusals++;
      if (performance.now() - listeningAt > 30_000) throw new Error(`no write acknowledged within 30 s; last: ${last.status} ${last.text}`);
      await sleep(5);
    }
    const firstWriteMs = performance.now() - listeningAt;
    const spawnToListeningMs = listeningAt - agent.spawnedAt;
    const timings = agent.lines
      .filter(({ rec }) => verbose || Object.keys(rec).some((k) => k.endsWith('Ms') && k !== 'resyncMs'))
      .map(({ at, rec }) => {
        const { level, time, pid, hostname, nodeId, ...rest } = rec;
        return `    +${(at - listeningAt).toFixed(0)} ms ${JSON.stringify(rest)}`;
      });
    console.log(`${label}: listening -> first write ${firstWriteMs.toFixed(0)} ms (${refusals} refused), spawn -> listening ${spawnToListeningMs.toFixed(0)} ms`);
    for (const t of timings) console.log(t);
    return firstWriteMs;
  } finally {
    await stop(agent);
  }
}

/** One run of `kind` on the cairn in `root`. */
async function runOnce(root, kind, label) {
  const dir = await mkdtemp(path.join(baseDir, 'cairn-measure-'));
  const dataDir = path.join(dir, 'data');
  const ports = { grpc: await freePort(), http: await freePort() };
  try {
    if (kind === 'existing') {
      // The data dir a previous `make run` left: one node, one write, stopped cleanly.
      const first = startAgent(seedWith === undefined ? root : path.resolve(seedWith), dataDir, ports);
      const { http } = await first.listening;
      const r = await put(http, 'seed');
      if (r.status !== 200) throw new Error(`the seeding run's write failed: ${r.status} ${r.text}`);
      await stop(first);
    }
    return await measure(root, dataDir, ports, label);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

console.log(`measure-start-up: node bin/cairn agent ${[...agentFlags, ...extra].join(' ')}; ${runs} run(s) per mode; data in ${baseDir}`);
console.log(`trees: ${trees.join(', ')}${seedWith === undefined ? '' : `; existing data dirs made by ${path.resolve(seedWith)}`}`);
console.log(`machine: ${os.cpus().length} x ${os.cpus()[0]?.model ?? '?'}, load average ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}, node ${process.version}`);
const summary = [];
for (const kind of mode === 'both' ? ['fresh', 'existing'] : [mode]) {
  const results = trees.map(() => []);
  for (let i = 1; i <= runs; i++) {
    for (const [k, root] of trees.entries()) {
      results[k].push(await runOnce(root, kind, `${kind} #${i}${trees.length > 1 ? ` ${root}` : ''}`));
    }
  }
  const medians = results.map(median);
  for (const [k, xs] of results.entries()) {
    summary.push(`${kind} ${trees[k]}: median ${median(xs).toFixed(0)} ms (min ${Math.min(...xs).toFixed(0)}, max ${Math.max(...xs).toFixed(0)}; ${xs.map((x) => x.toFixed(0)).join(', ')})`);
  }
  if (trees.length > 1) summary.push(`${kind}: ${trees[1]} / ${trees[0]} = ${(medians[1] / medians[0]).toFixed(2)}`);
}
console.log(`listening -> first acknowledged write, ${runs} run(s) each:`);
for (const s of summary) console.log(`  ${s}`);
console.log(`load average after: ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}`);
