import t from 'tap';
import type { CpuProfile } from './cpuprofile.js';
import { busyTogetherUs, categorize, samplesOf, stretchesOf } from './cpuprofile-turns.js';

/** A profile sampled every 100 µs from t=0: `pattern` gives each sample's node ('i' idle, 'a' src/api code, 'g' GC). */
function profile(pattern: string, startTime = 0): CpuProfile {
  const ids: Record<string, number> = { i: 1, a: 2, g: 3 };
  return {
    nodes: [
      { id: 1, callFrame: { functionName: '(idle)', url: '' } },
      { id: 2, callFrame: { functionName: 'write', url: 'file:///work/main/dist/src/api/resource-service.js' } },
      { id: 3, callFrame: { functionName: '(garbage collector)', url: '' } },
    ],
    startTime,
    endTime: startTime + pattern.length * 100,
    samples: [...pattern].map((c) => ids[c] as number),
    timeDeltas: [...pattern].map(() => 100),
  };
}

t.test('categories: ours by module, packages by name, V8 by its pseudo-frames', (t) => {
  t.equal(categorize({ functionName: 'x', url: 'file:///w/dist/src/raft/log.js' }), 'src/raft');
  t.equal(categorize({ functionName: 'x', url: 'file:///w/node_modules/@grpc/grpc-js/build/src/server.js' }), '@grpc/grpc-js');
  t.equal(categorize({ functionName: 'x', url: 'node:internal/http2/core' }), 'node:http2');
  t.equal(categorize({ functionName: '(idle)', url: '' }), '', 'idle is not busy');
  t.equal(categorize({ functionName: '(garbage collector)', url: '' }), 'garbage collector');
  t.end();
});

t.test('busy stretches: runs of non-idle samples, each sample standing for the interval it ends', (t) => {
  const s = stretchesOf(samplesOf(profile('iaaagiiaai')), 0, 1e9);
  t.same(
    s.map((x) => [x.fromUs, x.toUs]),
    [
      [100, 500],
      [700, 900],
    ],
    'two stretches: 4 busy samples then 2',
  );
  t.same([...(s[0]?.categories ?? new Map())], [['src/api', 300], ['garbage collector', 100]], 'what filled the first');
  t.end();
});

t.test('busy together: alternating processes overlap nowhere, identical ones everywhere (a checker that can fail)', (t) => {
  const a = stretchesOf(samplesOf(profile('aaaaiiiiaaaaiiii')), 0, 1600);
  const b = stretchesOf(samplesOf(profile('iiiiaaaaiiiiaaaa')), 0, 1600);
  t.equal(busyTogetherUs([a, b], 0, 1600, 50), 0, 'taking turns: never busy together');
  t.equal(busyTogetherUs([a, a], 0, 1600, 50), 800, 'the same timeline: together whenever busy');
  const late = stretchesOf(samplesOf(profile('aaaaiiiiaaaaiiii', 200)), 0, 1800);
  t.equal(busyTogetherUs([a, late], 0, 1800, 50), 400, 'profiles line up on the shared clock (200 µs shift: half of each stretch)');
  t.end();
});
