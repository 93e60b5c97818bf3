// Proves scripts/check-architecture.mjs by planting one violation per rule in a temporary
// fixture tree and checking that the script fails naming the file, line and rule (STYLE.md: "A
// checker is proven by showing it catches a planted bug"). Run: npx tap scripts/check-architecture.test.mjs
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const script = path.join(here, 'check-architecture.mjs');
const repoRoot = path.resolve(here, '..');

// A small tree that obeys every rule; each test adds or overrides files.
const CLEAN = {
  'src/base/index.ts': "export * from './ids.js';\nexport type { Clock } from './ports.js';\n",
  'src/base/ids.ts': 'export type NodeId = string & { readonly __brand: "NodeId" };\n',
  'src/base/ports.ts': '/** Pure code never calls Date.now(); it gets a Clock. */\nexport interface Clock { nowMs(): number }\n',
  'src/raft/index.ts': "export { Raft } from './raft.js';\n",
  'src/raft/raft.ts': [
    "import type { NodeId } from '../base/index.js';",
    "import { quorum } from './quorum/quorum.js';",
    'export class Raft {',
    '  constructor(readonly id: NodeId, readonly clock: { setTimeout(f: () => void): void }) {}',
    '  ticks = quorum(3);',
    '  schedule(): void { this.clock.setTimeout(() => {}); }',
    '  ratio(a: number, b: number): number { return a / b / 2; }',
    '}',
  ].join('\n'),
  'src/raft/quorum/quorum.ts': 'export const quorum = (n: number): number => Math.floor(n / 2) + 1;\n',
  'src/raft/raft.test.ts': "import { readFileSync } from 'node:fs';\nexport const seed = Date.now() + Math.random();\nexport const golden = readFileSync;\n",
  'src/raft/testing/index.ts': "export const stamp = (): number => Date.now();\n",
  'src/store/index.ts': "import type { NodeId } from '../base/index.js';\nexport type Owner = NodeId;\n",
  'src/fsm/index.ts': "import type { Owner } from '../store/index.js';\nimport type { Raft } from '../raft/index.js';\nexport type X = [Owner, Raft];\n",
  'src/server/index.ts': "import { Raft } from '../raft/index.js';\nexport const r = [Raft];\nexport const now = Date.now();\n",
  'src/server/server.test.ts': "import { stamp } from '../raft/testing/index.js';\nexport const s = stamp;\n",
  'src/api/gen/cairn_pb.ts': 'export const anything: any = 1;\n',
  'src/client/index.ts': "import { anything } from '../api/gen/cairn_pb.js';\nexport const c = anything;\n",
  'cluster-test/sim/run.ts': "import { Raft } from '../../src/raft/index.js';\nimport { stamp } from '../../src/raft/testing/index.js';\nexport const x: any = [Raft, stamp, setTimeout, Date.now()];\n",
  'bench/fanout.ts': "import { r } from '../src/server/index.js';\nexport const b = r;\n",
};

function fixture(t, overrides = {}) {
  const root = mkdtempSync(path.join(os.tmpdir(), 'cairn-arch-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  for (const [rel, text] of Object.entries({ ...CLEAN, ...overrides })) {
    if (text === null) continue;
    mkdirSync(path.dirname(path.join(root, rel)), { recursive: true });
    writeFileSync(path.join(root, rel), text);
  }
  return root;
}

function run(root) {
  const r = spawnSync(process.execPath, [script, root], { encoding: 'utf8' });
  return { status: r.status, out: r.stdout + r.stderr };
}

// Asserts a failing run whose output has a line starting `file:line: rule:`.
function expectViolation(t, overrides, where, rule, mention) {
  const { status, out } = run(fixture(t, overrides));
  t.equal(status, 1, `exits 1 for ${rule}\n${out}`);
  const line = out.split('\n').find((l) => l.startsWith(`${where}: ${rule}: `));
  t.ok(line, `reports "${where}: ${rule}:"; got:\n${out}`);
  if (mention) t.match(line ?? '', mention);
}

t.test('a clean tree passes', async (t) => {
  const { status, out } = run(fixture(t));
  t.equal(status, 0, out);
  t.match(out, /^check-architecture: OK, 15 files checked, \d+ import edges/);
});

t.test('pure-import: src/raft importing node:fs, or a bare builtin', async (t) => {
  expectViolation(t, { 'src/raft/io.ts': "// no I/O here\nimport { readFileSync } from 'node:fs';\nexport const f = readFileSync;\n" },
    'src/raft/io.ts:2', 'pure-import', /node:fs/);
  expectViolation(t, { 'src/raft/io.ts': "import type { Hash } from 'crypto';\nexport type H = Hash;\n" },
    'src/raft/io.ts:1', 'pure-import', /'crypto'/);
  expectViolation(t, { 'src/raft/testing/disk.ts': "import { promises } from 'fs/promises';\nexport const p = promises;\n" },
    'src/raft/testing/disk.ts:1', 'pure-import', /fs\/promises/);
  expectViolation(t, { 'src/stream/index.ts': "export const load = () => import('node:fs');\n" },
    'src/stream/index.ts:1', 'pure-import');
});

t.test('pure-ambient: Date.now(), setTimeout, Math.random(), process.', async (t) => {
  expectViolation(t, { 'src/raft/clock.ts': "export const a = 1;\nexport const now = (): number => Date.now();\n" },
    'src/raft/clock.ts:2', 'pure-ambient', /Date\.now/);
  expectViolation(t, { 'src/raft/timer.ts': 'export function later(f: () => void): void {\n  setTimeout(f, 10);\n}\n' },
    'src/raft/timer.ts:2', 'pure-ambient', /timer/);
  expectViolation(t, { 'src/store/jitter.ts': 'export const jitter = (): number => Math.random();\n' },
    'src/store/jitter.ts:1', 'pure-ambient', /Math\.random/);
  expectViolation(t, { 'src/fsm/env.ts': 'export const debug = globalThis.process.env["DEBUG"];\n' },
    'src/fsm/env.ts:1', 'pure-ambient', /process\./);
  expectViolation(t, { 'src/raft/when.ts': 'export const when = `at ${new Date()}`;\n' },
    'src/raft/when.ts:1', 'pure-ambient', /new Date\(\)/);
});

t.test('Date.now() inside comments, strings and regexes does not trigger', async (t) => {
  const text = [
    '// Date.now() is banned here; so is Math.random() and setTimeout(f)',
    '/* process.exit(1); new Date() */',
    'export const s = "Date.now()" + \'setTimeout(\' + `Math.random() ${1 + 2} process.env`;',
    'export const re = /Date.now()["\']/g;',
    "export const at = new Date(0).getTime() / 2; // deterministic: time from the entry",
    "import type { NodeId } from '../base/index.js';",
    'export type Id = NodeId;',
  ].join('\n');
  const { status, out } = run(fixture(t, { 'src/raft/quiet.ts': text }));
  t.equal(status, 0, out);
});

t.test('front-door: a deep cross-module import', async (t) => {
  expectViolation(t, { 'src/raft/deep.ts': "import type { NodeId } from '../base/ids.js';\nexport type Id = NodeId;\n" },
    'src/raft/deep.ts:1', 'front-door', /'\.\.\/base\/ids\.js' reaches inside module base/);
  expectViolation(t, { 'cluster-test/sim/deep.ts': "export { quorum } from '../../src/raft/quorum/quorum.js';\n" },
    'cluster-test/sim/deep.ts:1', 'front-door');
  expectViolation(t, { 'src/server/deep.ts': "export const m = await import('../raft/raft.js');\n" },
    'src/server/deep.ts:1', 'front-door');
  // The testing/ front door is for tests, testing/ helpers, cluster-test/ and bench/ only.
  expectViolation(t, { 'src/fsm/helper.ts': "export { stamp } from '../raft/testing/index.js';\n" },
    'src/fsm/helper.ts:1', 'front-door');
});

t.test('testing-import: shipped code importing a testing/ helper, even its own module\'s', async (t) => {
  const overrides = { 'src/raft/testing/model.ts': 'export const model = 1;\n' };
  expectViolation(t, { ...overrides, 'src/raft/uses-model.ts': "import { model } from './testing/model.js';\nexport const m = model;\n" },
    'src/raft/uses-model.ts:1', 'testing-import', /'\.\/testing\/model\.js'/);
  expectViolation(t, { 'src/raft/deep/uses-helper.ts': "export { stamp } from '../testing/index.js';\n" },
    'src/raft/deep/uses-helper.ts:1', 'testing-import');
  // Tests and other testing/ helpers may.
  const fine = { ...overrides, 'src/raft/model.test.ts': "import { model } from './testing/model.js';\nexport const m = model;\n",
    'src/raft/testing/more.ts': "import { model } from './model.js';\nexport const more = model + 1;\n" };
  const { status, out } = run(fixture(t, fine));
  t.equal(status, 0, out);
});

t.test('layering: a forbidden layer edge (raft importing store)', async (t) => {
  expectViolation(t, { 'src/raft/owner.ts': "import type { Owner } from '../store/index.js';\nexport type O = Owner;\n" },
    'src/raft/owner.ts:1', 'layering', /raft must not import store .*raft may import: base/);
  expectViolation(t, { 'src/client/agent.ts': "import { r } from '../server/index.js';\nexport const a = r;\n" },
    'src/client/agent.ts:1', 'layering', /client must not import server/);
  expectViolation(t, { 'src/raft/sim.ts': "import type { x } from '../../cluster-test/sim/run.js';\nexport type Y = typeof x;\n" },
    'src/raft/sim.ts:1', 'layering', /src must not import from cluster-test/);
});

t.test('layering: auth imports only base; store (below it) must not import auth', async (t) => {
  const auth = { 'src/auth/index.ts': "import type { NodeId } from '../base/index.js';\nexport type Who = NodeId;\n" };
  expectViolation(t, { ...auth, 'src/auth/raft.ts': "import { Raft } from '../raft/index.js';\nexport const r = Raft;\n" },
    'src/auth/raft.ts:1', 'layering', /auth must not import raft .*auth may import: base$/);
  expectViolation(t, { ...auth, 'src/store/who.ts': "import type { Who } from '../auth/index.js';\nexport type W = Who;\n" },
    'src/store/who.ts:1', 'layering', /store must not import auth/);
  const { status, out } = run(fixture(t, { ...auth, 'src/api/index.ts': "import type { Who } from '../auth/index.js';\nexport type W = Who;\n" }));
  t.equal(status, 0, `api may import auth\n${out}`);
});

t.test('unknown-module: a new folder must be added to the table', async (t) => {
  expectViolation(t, { 'src/gossip/index.ts': 'export const g = 1;\n' },
    'src/gossip/index.ts:1', 'unknown-module', /'gossip' is not in the LAYERS table/);
});

t.test('unresolved: a relative import naming no file', async (t) => {
  expectViolation(t, { 'src/raft/lost.ts': "export * from './missing.js';\n" }, 'src/raft/lost.ts:1', 'unresolved');
});

t.test('cycle: a file-level import cycle, reported once with its path', async (t) => {
  const overrides = {
    'src/raft/a.ts': "import { b } from './b.js';\nexport const a = (): number => b();\n",
    'src/raft/b.ts': "import type { C } from './c/index.js';\nexport const b = (): number => 1;\nexport type B = C;\n",
    'src/raft/c/index.ts': "// type-only imports count\nimport type { a } from '../a.js';\nexport type C = typeof a;\n",
  };
  expectViolation(t, overrides, 'src/raft/a.ts:1', 'cycle', /src\/raft\/a\.ts -> src\/raft\/b\.ts -> src\/raft\/c\/index\.ts -> src\/raft\/a\.ts/);
  const { out } = run(fixture(t, overrides));
  t.equal(out.split('\n').filter((l) => l.includes(': cycle: ')).length, 1, 'one report for one cycle');
});

t.test('module-cycle: modules importing each other', async (t) => {
  expectViolation(t, { 'src/base/back.ts': "export type { Raft } from '../raft/index.js';\n" },
    'src/base/back.ts:1', 'module-cycle', /base -> raft -> base/);
});

t.test('no-any: `as any` and other any types in src', async (t) => {
  expectViolation(t, { 'src/store/cast.ts': 'export const f = (x: unknown): number => (x as any).n;\n' },
    'src/store/cast.ts:1', 'no-any', /'any'/);
  expectViolation(t, { 'src/server/list.ts': 'export const l: Array<string> = [];\nexport let m: Map<string, any[]> | undefined;\n' },
    'src/server/list.ts:2', 'no-any');
  const fine = 'export const o = { any: 1 };\nexport const p = Promise.any([]);\n// any comment\nexport const s = "any";\n';
  const { status, out } = run(fixture(t, { 'src/server/fine.ts': fine }));
  t.equal(status, 0, `property keys, Promise.any, comments and strings are not the any type\n${out}`);
});

t.test('the real repository passes', async (t) => {
  const { status, out } = run(repoRoot);
  t.equal(status, 0, out);
  t.match(out, /check-architecture: OK/);
});
