// Proves scripts/check-gen.mjs: the committed src/gen is what proto/ generates, and the check
// fails, naming the files, when a proto changes without regenerating, when a generated file is
// edited by hand, or when one is missing or left over (STYLE.md: "A checker is proven by
// showing it catches a planted bug"). Runs the real generator twice (about 6 s each): once on
// proto/, once on a copy with a field added (`node scripts/check-gen.mjs` is the same check
// from the command line, `make check-gen`). Run: npx tap scripts/check-gen.test.mjs
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { compare, generate } from './check-gen.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const script = path.join(here, 'check-gen.mjs');
const repoRoot = path.resolve(here, '..');
const genDir = path.join(repoRoot, 'src', 'gen');

function tempDir(t, prefix) {
  const dir = mkdtempSync(path.join(os.tmpdir(), prefix));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function run(args) {
  const r = spawnSync(process.execPath, [script, ...args], { encoding: 'utf8' });
  return { status: r.status, out: r.stdout + r.stderr };
}

// One generator run on proto/, shared by the tests that compare against it.
const fresh = generate();
t.teardown(() => rmSync(fresh, { recursive: true, force: true }));

t.test('regenerating src/gen from proto/ leaves no diff', async (t) => {
  const { problems, generated } = compare(fresh, genDir);
  t.same(generated, ['cluster.d.ts', 'cluster.js', 'resource.d.ts', 'resource.js']);
  t.same(problems, [], `src/gen must be what 'make proto' generates from proto/; these differ:\n${problems.map((p) => `${p.file}: ${p.problem}`).join('\n')}`);
});

t.test('a proto changed without regenerating is reported, naming the files it changes', async (t) => {
  const protos = tempDir(t, 'cairn-proto-');
  cpSync(path.join(repoRoot, 'proto'), protos, { recursive: true });
  const file = path.join(protos, 'cairn', 'resource', 'v1', 'resource.proto');
  const text = readFileSync(file, 'utf8');
  const planted = text.replace('message Tenancy {\n  string partition = 1;\n  string namespace = 2;\n}', 'message Tenancy {\n  string partition = 1;\n  string namespace = 2;\n  string region = 3;\n}');
  t.not(planted, text, 'the planted field went in');
  writeFileSync(file, planted);
  const { status, out } = run(['--proto', protos]);
  t.equal(status, 1, out);
  t.match(out, /^src\/gen\/resource\.js:\d+: differs from what the generator makes$/m);
  t.match(out, /^src\/gen\/resource\.d\.ts:\d+: differs from what the generator makes$/m);
  t.notMatch(out, /src\/gen\/cluster\./, 'the untouched cluster proto still matches');
  t.match(out, /check-gen: 2 generated file\(s\) do not match proto\/; run 'make proto' and commit src\/gen/);
});

t.test('a hand edit, a missing file and a leftover file in the committed tree are reported', async (t) => {
  const edited = tempDir(t, 'cairn-gen-copy-');
  cpSync(genDir, edited, { recursive: true });
  const dts = path.join(edited, 'cluster.d.ts');
  const lines = readFileSync(dts, 'utf8').split('\n');
  lines[9] = `${lines[9]} `; // one trailing space on line 10
  writeFileSync(dts, lines.join('\n'));
  unlinkSync(path.join(edited, 'resource.d.ts'));
  writeFileSync(path.join(edited, 'old.js'), '// generated once from a proto since removed\n');
  t.same(compare(fresh, edited, 'copy').problems, [
    { file: 'copy/cluster.d.ts', problem: 'differs from what the generator makes', line: 10 },
    { file: 'copy/resource.d.ts', problem: 'missing: the generator makes it but it is not committed' },
    { file: 'copy/old.js', problem: 'not generated: no proto makes it (a leftover?)' },
  ]);
});

t.test('a generator failure is an error, not a pass', async (t) => {
  const protos = tempDir(t, 'cairn-proto-bad-');
  cpSync(path.join(repoRoot, 'proto'), protos, { recursive: true });
  writeFileSync(path.join(protos, 'cairn', 'cluster', 'v1', 'cluster.proto'), 'syntax = "proto3";\nmessage {\n');
  const { status, out } = run(['--proto', protos]);
  t.equal(status, 2, out);
  t.match(out, /check-gen: scripts\/gen-proto\.sh failed/);
});
