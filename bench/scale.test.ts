/**
 * `make bench-scale`'s own pieces without etcd or Cairn processes: its flags, the load's key
 * coverage and retries against a fake sender, the arithmetic of memory per resource, the tables,
 * the targets, the SVG and the results file, all from fixed numbers.
 */
import t from 'tap';
import { CairnError } from '../src/base/index.js';
import { counterSum, loadKeys } from './scale/measures.js';
import {
  DEFAULT_SCALES,
  judgeTargets,
  MEASURES,
  measureTable,
  parseScaleArgs,
  parseScaleResults,
  QUICK_SCALES,
  ratioText,
  renderReport,
  renderScaleSvg,
  resultsBaseName,
  rssPerResource,
  heapPerResource,
  type ScaleResults,
  type ScaleRun,
  type ScaleSystem,
} from './scale/report.js';

const MiB = 2 ** 20;

function run(system: ScaleSystem, resources: number, o: { rssBefore?: number; rssAfter?: number; restartMs?: number; catchUpMs?: number; snapMs?: number } = {}): ScaleRun {
  const before = o.rssBefore ?? 100 * MiB;
  const after = o.rssAfter ?? before + resources * 1000;
  return {
    system,
    version: 'test',
    resources,
    load: { ms: resources / 10, perSecond: 10_000, requests: resources },
    memoryBefore: { rssBytes: [before, before, before], heapBytes: system === 'Cairn' ? [50 * MiB, 50 * MiB, 50 * MiB] : [Number.NaN, Number.NaN, Number.NaN] },
    memoryAfter: { rssBytes: [after, after, after], heapBytes: system === 'Cairn' ? [50 * MiB + resources * 600, 50 * MiB + resources * 600, 50 * MiB + resources * 600] : [Number.NaN, Number.NaN, Number.NaN] },
    dataBytes: resources * 300,
    snapshot: { ms: o.snapMs ?? resources / 100, bytes: resources * 400, how: 'test' },
    restart: { node: 'b', stopMs: 100, ms: o.restartMs ?? 1000, how: 'test' },
    catchUp: { ms: o.catchUpMs ?? 2000, targetIndex: resources, path: system === 'Cairn' ? 'snapshot' : 'log', note: '' },
    loadAvgBefore: [1, 1, 1],
    loadAvgAfter: [2, 2, 2],
    errors: [],
  };
}

const isInvalid = (e: unknown): boolean => e instanceof CairnError && e.code === 'INVALID_ARGUMENT';

t.test('flags: defaults, --quick, --scales in any order with k/M suffixes, --systems', async (t) => {
  const d = parseScaleArgs([]);
  t.same(d.scales, DEFAULT_SCALES);
  t.same(d.systems, ['Cairn', 'etcd']);
  t.equal(d.keep, false);
  t.equal(d.dir, undefined);
  t.equal(d.inFlight, 256);
  t.equal(d.etcdBatch, 1);
  t.same(parseScaleArgs(['--quick']).scales, QUICK_SCALES);
  t.same(parseScaleArgs(['--quick', '--scales', '1M']).scales, [1_000_000], '--scales wins over --quick');
  t.same(parseScaleArgs(['--scales', '100000,10k,1_000']).scales, [1_000, 10_000, 100_000], 'sorted');
  t.same(parseScaleArgs(['--systems', 'etcd']).systems, ['etcd']);
  const a = parseScaleArgs(['--dir', '/tmp/x', '--keep', '--in-flight', '64', '--etcd-batch', '128']);
  t.equal(a.dir, '/tmp/x');
  t.equal(a.keep, true);
  t.equal(a.inFlight, 64);
  t.equal(a.etcdBatch, 128);
});

t.test('flags: anything unknown or out of range is INVALID_ARGUMENT naming the flag', async (t) => {
  const cases: [string[], RegExp][] = [
    [['--scales', '0'], /--scales/],
    [['--scales', '2000000'], /--scales takes whole numbers from 1 to 1,000,000/],
    [['--scales', '10k,abc'], /"abc"/],
    [['--scales', '1.5'], /--scales/],
    [['--scales', '10000,10k'], /twice/],
    [['--scales'], /--scales needs a value/],
    [['--scales', '--quick'], /--scales needs a value/],
    [['--systems', 'zookeeper'], /unknown system "zookeeper"/],
    [['--systems', 'etcd,etcd'], /twice/],
    [['--in-flight', '0'], /--in-flight/],
    [['--etcd-batch', '129'], /--etcd-batch takes whole numbers from 1 to 128/],
    [['--fast'], /unknown argument "--fast"/],
    [['10000'], /unknown argument "10000"/],
  ];
  for (const [argv, want] of cases) {
    t.throws(() => parseScaleArgs(argv), want, argv.join(' '));
    try {
      parseScaleArgs(argv);
    } catch (e) {
      t.ok(isInvalid(e), `${argv.join(' ')}: a CairnError INVALID_ARGUMENT`);
    }
  }
});

t.test('load: every key sent exactly once, in batches, with at most inFlight requests at a time', async (t) => {
  const seen = new Uint8Array(1001);
  let inFlight = 0;
  let most = 0;
  const r = await loadKeys('test', 1001, 7, 100, async (from, count) => {
    inFlight++;
    most = Math.max(most, inFlight);
    t.ok(count >= 1 && count <= 100, 'batch size');
    await Promise.resolve();
    for (let k = from; k < from + count; k++) seen[k] = (seen[k] as number) + 1;
    inFlight--;
  }, 3_600_000);
  t.ok(seen.every((v) => v === 1), 'each of the 1,001 keys once');
  t.equal(r.requests, 11, '10 batches of 100 and one of 1');
  t.ok(most <= 7, `at most 7 in flight (saw ${most})`);
});

t.test('load: a failed request is tried again, three failures stop the load with the keys named', async (t) => {
  let failures = 0;
  const sent = new Set<number>();
  await loadKeys('flaky', 10, 2, 1, async (from) => {
    if (from === 3 && failures < 2) {
      failures++;
      throw new Error('transient');
    }
    sent.add(from);
  }, 3_600_000);
  t.equal(failures, 2);
  t.equal(sent.size, 10, 'key 3 got through on its third try');
  await t.rejects(
    loadKeys('broken', 10, 2, 5, async (from) => {
      if (from === 5) throw new Error('refused');
    }, 3_600_000),
    /broken: keys 5\.\.9 failed 3 times: refused/,
  );
});

t.test('memory per resource: each node\'s growth, averaged, over N', async (t) => {
  const r = run('Cairn', 10_000, { rssBefore: 100 * MiB, rssAfter: 100 * MiB + 20_000_000 });
  t.equal(rssPerResource(r), 2000);
  t.equal(heapPerResource(r), 600);
  const uneven: ScaleRun = { ...r, memoryAfter: { rssBytes: [100 * MiB + 10_000_000, 100 * MiB + 30_000_000, Number.NaN], heapBytes: r.memoryAfter.heapBytes } };
  t.equal(rssPerResource(uneven), 2000, 'a node that did not answer is left out of the mean');
  t.ok(Number.isNaN(heapPerResource(run('etcd', 10_000))), 'etcd has no V8 heap');
});

t.test('a table per measure: Cairn, etcd and the ratio per scale; a missing side is "-"', async (t) => {
  const runs = [run('Cairn', 10_000, { snapMs: 500 }), run('etcd', 10_000, { snapMs: 250 }), run('Cairn', 100_000, { snapMs: 4000 })];
  const snap = MEASURES.find((m) => m.id === 'snapshot-time');
  t.ok(snap);
  t.equal(
    measureTable(snap!, runs),
    ['Snapshot save time (s)', '| resources | Cairn | etcd | Cairn/etcd |', '|----------:|------:|-----:|-----------:|', '|    10,000 |  0.50 | 0.25 |      2.00x |', '|   100,000 |  4.00 |    - |          - |'].join('\n'),
  );
  t.equal(ratioText(1, 0), '-');
  t.equal(ratioText(Number.NaN, 1), '-');
  t.equal(ratioText(3, 2), '1.50x');
});

t.test('targets at 1M: met, not met, not measured', async (t) => {
  t.same(
    judgeTargets([run('Cairn', 100_000)]).map((v) => v.met),
    [undefined, undefined, undefined],
    'no 1M run: nothing judged',
  );
  const good = judgeTargets([run('Cairn', 1_000_000, { restartMs: 4000, catchUpMs: 20_000, rssAfter: 100 * MiB + 1_000_000 * 1500 }), run('etcd', 1_000_000, { rssAfter: 100 * MiB + 1_000_000 * 1000 })]);
  t.same(good.map((v) => v.met), [true, true, true]);
  t.match(good[1]?.detail, /1,500 B vs 1,000 B = 1\.50x/);
  const bad = judgeTargets([run('Cairn', 1_000_000, { restartMs: 11_500, catchUpMs: 45_000, rssAfter: 100 * MiB + 1_000_000 * 2500 }), run('etcd', 1_000_000, { rssAfter: 100 * MiB + 1_000_000 * 1000 })]);
  t.same(bad.map((v) => v.met), [false, false, false]);
  const onlyCairn = judgeTargets([run('Cairn', 1_000_000)]);
  t.same(onlyCairn.map((v) => v.met), [true, undefined, true], 'the memory ratio needs etcd\'s run');
});

const results = (runs: ScaleRun[]): ScaleResults => ({ kind: 'bench-scale', startedAt: '2026-11-27T20:35:00.000Z', args: parseScaleArgs(['--quick']), machine: { cpus: 2 }, runs });

t.test('the report: every measure\'s table, how each was measured, the targets, the failures', async (t) => {
  const failed: ScaleRun = { ...run('etcd', 10_000), errors: ['catch-up: etcdctl member add: unhealthy cluster'] };
  const text = renderReport(results([run('Cairn', 10_000), failed]));
  for (const m of MEASURES) t.match(text, m.title);
  t.match(text, /\| Cairn  \|\s+10,000 \| snapshot/);
  t.match(text, /Targets at 1,000,000 resources/);
  t.match(text, /- etcd 10,000: catch-up: etcdctl member add: unhealthy cluster/);
});

t.test('the SVG: one chart per measure, two by row, both systems, log x axis', async (t) => {
  const svg = renderScaleSvg(results([run('Cairn', 10_000), run('etcd', 10_000), run('Cairn', 100_000), run('etcd', 100_000)]), 'test');
  t.match(svg, /^<svg xmlns="http:\/\/www.w3.org\/2000\/svg" width="1120" height="1500"/);
  t.equal(svg.match(/<svg /g)?.length, MEASURES.length + 1, 'an outer SVG and one per measure');
  t.match(svg, /<svg x="560" y="0" /);
  t.match(svg, /<svg x="0" y="1200" /);
  t.match(svg, /resources \(log scale\)/);
  t.ok(svg.includes('>Cairn</text>') && svg.includes('>etcd</text>'), 'a legend entry per system');
  t.ok(svg.trimEnd().endsWith('</svg>'));
});

t.test('results file: its name, a round trip, and anything else refused', async (t) => {
  t.equal(resultsBaseName(new Date('2026-11-27T20:35:09Z'), false), 'scale-2026-11-27-2035');
  t.equal(resultsBaseName(new Date('2026-11-27T09:05:00Z'), true), 'scale-2026-11-27-0905-quick');
  const r = results([run('Cairn', 10_000)]);
  t.same(parseScaleResults(JSON.stringify(r)), JSON.parse(JSON.stringify(r)) as unknown, "a round trip (JSON drops undefined, NaN becomes null)");
  t.throws(() => parseScaleResults('{'), /not JSON/);
  t.throws(() => parseScaleResults('{"kind":"bench","runs":[]}'), /not a bench-scale results file/);
  t.throws(() => parseScaleResults('null'), /not a bench-scale results file/);
});

t.test('counterSum: every labelled series of a counter, not a longer name', async (t) => {
  const text = ['# TYPE etcd_network_snapshot_receive_success counter', 'etcd_network_snapshot_receive_success{From="a"} 1', 'etcd_network_snapshot_receive_success{From="b"} 2', 'etcd_network_snapshot_receive_success_total 9', ''].join('\n');
  t.equal(counterSum(text, 'etcd_network_snapshot_receive_success'), 3);
  t.equal(counterSum('x 1\n', 'etcd_network_snapshot_receive_success'), undefined);
  t.equal(counterSum('c 4\n', 'c'), 4);
});
