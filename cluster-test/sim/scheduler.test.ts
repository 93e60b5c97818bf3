import t from 'tap';
import { Scheduler } from './scheduler.js';

t.test('events run in (time, scheduling order) order and advance the clock', async (t) => {
  const s = new Scheduler();
  const seen: string[] = [];
  s.after(10, () => seen.push(`a@${s.now()}`));
  s.after(5, () => {
    seen.push(`b@${s.now()}`);
    s.after(5, () => seen.push(`d@${s.now()}`));
  });
  s.after(10, () => seen.push(`c@${s.now()}`));
  s.at(0, () => seen.push(`e@${s.now()}`));
  while (s.step()) {
    /* drain */
  }
  t.same(seen, ['e@0', 'b@5', 'a@10', 'c@10', 'd@10']);
  t.equal(s.size, 0);
});

t.test('a thousand random events come out sorted', async (t) => {
  const s = new Scheduler();
  const times: number[] = [];
  let x = 12345;
  for (let i = 0; i < 1000; i++) {
    x = (x * 1103515245 + 12345) % 2147483648;
    s.after(x % 500, () => times.push(s.now()));
  }
  while (s.step()) {
    /* drain */
  }
  t.same(times, [...times].sort((a, b) => a - b));
});

t.test('scheduling in the past is refused', async (t) => {
  const s = new Scheduler();
  s.after(10, () => {});
  s.step();
  t.throws(() => s.at(5, () => {}));
  t.throws(() => s.after(-1, () => {}));
});
