#!/usr/bin/env node
// check-gen: the generated protocol code committed under src/gen is exactly what
// scripts/gen-proto.sh generates from proto/ (STYLE.md: "Wire shapes written by hand beside
// generated ones: use the generated types; check that regenerating leaves no diff").
//
// Usage: node scripts/check-gen.mjs [--proto DIR] [--gen DIR]   (defaults: proto, src/gen)
// Runs the generator into a temporary directory (pbjs/pbts from node_modules: no network) and
// compares every file byte for byte with the committed ones. Prints one line per file that
// differs, is missing from src/gen, or is in src/gen but not generated, and exits 1; or prints
// a one-line OK summary and exits 0. Proven by scripts/check-gen.test.mjs.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/** Runs scripts/gen-proto.sh on `protoDir` into a new temporary directory and returns it. */
export function generate(protoDir = path.join(repoRoot, 'proto')) {
  const out = mkdtempSync(path.join(os.tmpdir(), 'cairn-gen-'));
  const r = spawnSync('bash', [path.join(repoRoot, 'scripts', 'gen-proto.sh'), out, path.resolve(protoDir)], { encoding: 'utf8' });
  if (r.status !== 0) {
    rmSync(out, { recursive: true, force: true });
    throw new Error(`scripts/gen-proto.sh failed (exit ${r.status ?? r.signal}) on ${protoDir}:\n${r.stdout}${r.stderr}`);
  }
  return out;
}

const files = (dir) => (existsSync(dir) ? readdirSync(dir, { withFileTypes: true }).filter((e) => e.isFile()).map((e) => e.name).sort() : []);

/** The first line (1-based) where two texts differ. */
function firstDifferentLine(a, b) {
  const x = a.toString('utf8').split('\n');
  const y = b.toString('utf8').split('\n');
  for (let i = 0; i < Math.max(x.length, y.length); i++) if (x[i] !== y[i]) return i + 1;
  return Math.max(x.length, y.length);
}

/**
 * Compares a freshly generated directory with the committed one. Returns one problem per file,
 * `{ file, problem, line? }` (file named as `genLabel/<name>`), in name order; empty when they match.
 */
export function compare(generatedDir, genDir, genLabel = 'src/gen') {
  const problems = [];
  const generated = files(generatedDir);
  const committed = new Set(files(genDir));
  for (const name of generated) {
    const file = `${genLabel}/${name}`;
    if (!committed.has(name)) {
      problems.push({ file, problem: 'missing: the generator makes it but it is not committed' });
      continue;
    }
    const want = readFileSync(path.join(generatedDir, name));
    const have = readFileSync(path.join(genDir, name));
    if (!want.equals(have)) {
      problems.push({ file, problem: 'differs from what the generator makes', line: firstDifferentLine(have, want) });
    }
  }
  for (const name of [...committed].filter((n) => !generated.includes(n)).sort()) {
    problems.push({ file: `${genLabel}/${name}`, problem: 'not generated: no proto makes it (a leftover?)' });
  }
  return { problems, generated, label: genLabel };
}

/** Generates from `protoDir` and compares with `genDir`. */
export function checkGen({ protoDir = path.join(repoRoot, 'proto'), genDir = path.join(repoRoot, 'src', 'gen') } = {}) {
  const out = generate(protoDir);
  try {
    const label = path.relative(repoRoot, path.resolve(genDir)).split(path.sep).join('/') || '.';
    return compare(out, genDir, label.startsWith('..') ? path.resolve(genDir) : label);
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
}

// ---- Command line ---------------------------------------------------------------------------
if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2);
  const opts = {};
  for (let i = 0; i < args.length; i += 2) {
    const [flag, value] = [args[i], args[i + 1]];
    if ((flag !== '--proto' && flag !== '--gen') || value === undefined) {
      console.error('usage: node scripts/check-gen.mjs [--proto DIR] [--gen DIR]');
      process.exit(2);
    }
    opts[flag === '--proto' ? 'protoDir' : 'genDir'] = value;
  }
  let result;
  try {
    result = checkGen(opts);
  } catch (e) {
    console.error(`check-gen: ${e instanceof Error ? e.message : String(e)}`);
    process.exit(2);
  }
  const { problems, generated, label } = result;
  for (const p of problems) console.error(`${p.file}${p.line === undefined ? '' : `:${p.line}`}: ${p.problem}`);
  if (problems.length) {
    console.error(`check-gen: ${problems.length} generated file(s) do not match proto/; run 'make proto' and commit src/gen`);
    process.exit(1);
  }
  console.log(`check-gen: OK, ${generated.length} files in ${label} match what scripts/gen-proto.sh generates from proto/`);
}
