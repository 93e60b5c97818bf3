import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { runScript } from '../testing/transcript/run-script.js';

/**
 * Runs every scripted transcript in src/raft/testdata (read from the source tree, so the
 * .txt files need no copying into dist). With REWRITE=1 the golden outputs are rewritten in
 * place and reviewers read the diff.
 */

function testdataDir(): string {
  const here = path.dirname(fileURLToPath(import.meta.url));
  const dist = `${path.sep}dist${path.sep}src${path.sep}`;
  const src = here.includes(dist) ? here.replace(dist, `${path.sep}src${path.sep}`) : here;
  return path.resolve(src, '..', 'testdata');
}

const dir = testdataDir();
const rewrite = process.env['REWRITE'] === '1';
const files = readdirSync(dir)
  .filter((f) => f.endsWith('.txt'))
  .sort();

t.ok(files.length > 0, `transcripts found in ${dir}`);

for (const name of files) {
  t.test(name, async (t) => {
    const file = path.join(dir, name);
    const text = readFileSync(file, 'utf8');
    const rel = path.relative(process.cwd(), file);
    const result = runScript(rel, text);
    if (rewrite) {
      if (result.rewritten !== text) writeFileSync(file, result.rewritten);
      t.pass(`${rel}: ${result.rewritten === text ? 'unchanged' : 'rewritten'} (${result.blocks} blocks)`);
      return;
    }
    for (const m of result.mismatches.slice(0, 5)) {
      t.fail(`${m.where}: output differs from the golden file (- golden, + actual; REWRITE=1 accepts it)`, { diff: m.diff });
    }
    if (result.mismatches.length > 5) t.fail(`${rel}: ${result.mismatches.length - 5} more blocks differ`);
    if (result.mismatches.length === 0) t.pass(`${rel}: all ${result.blocks} blocks match`);
  });
}

// The runner itself: a wrong golden output must fail, naming the line, and REWRITE's output
// must then pass (a checker that cannot fail proves nothing).
t.test('the runner reports a wrong golden output and rewrites it', async (t) => {
  const script = [
    '# a comment survives rewriting',
    'add-nodes 2',
    '----',
    'config voters=(n1 n2)',
    'n1: follower Term:1 Vote:none Lead:none Commit:1 Applied:0 Last:1',
    'n2: follower Term:1 Vote:none Lead:none Commit:1 Applied:0 Last:1',
    '',
    'campaign 1',
    '----',
    'INFO n1 became leader at term 3',
    '',
    'propose 2 x',
    '----',
    'ok',
    '',
  ].join('\n');
  const first = runScript('inline.txt', script);
  t.equal(first.blocks, 3);
  t.same(
    first.mismatches.map((m) => m.where),
    ['inline.txt:8: campaign 1', 'inline.txt:12: propose 2 x'],
    'the wrong blocks are named by file and line',
  );
  t.match(first.mismatches[0]?.diff ?? '', /- INFO n1 became leader at term 3\n\+ INFO n1 became pre-candidate at term 1/);
  t.match(first.rewritten, /^# a comment survives rewriting\n/);
  t.match(first.rewritten, /propose 2 x\n----\nerror: NOT_LEADER: cannot propose: node n2 is not the leader\n$/m);
  const second = runScript('inline.txt', first.rewritten);
  t.same(second.mismatches, [], 'the rewritten file passes');
  t.equal(second.rewritten, first.rewritten, 'rewriting is idempotent');
});

t.test('script mistakes fail loudly instead of printing', async (t) => {
  t.throws(() => runScript('bad.txt', 'add-nodes 1 votrs=(1)\n----\n'), /bad\.txt:1: add-nodes: unexpected argument\(s\) votrs=\(1\)/);
  t.throws(() => runScript('bad.txt', 'frobnicate\n----\n'), /bad\.txt:1: frobnicate: unknown command/);
  t.throws(() => runScript('bad.txt', 'add-nodes 1\nheal\n'), /bad\.txt:2: expected '----'/);
  t.throws(() => runScript('bad.txt', 'add-nodes 1\n----\n\ncampaign 7\n----\n'), /bad\.txt:4: no node n7/);
});
