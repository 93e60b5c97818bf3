/**
 * Test helpers for the checkers: a terse history notation, a generator that records histories
 * from a real sequential register (optionally with a planted bug), and a deliberately naive
 * reference checker that tries every permutation.
 */
import { assert, assertNever } from '../../../src/base/index.js';
import { HistoryRecorder } from '../history.js';
import type { CasValue, HistoryEvent, OpFn, OpHandle, OpStatus, Operation, Value } from '../history.js';

// ---- Notation -------------------------------------------------------------------------------

/**
 * Builds a history from lines such as `p1 write 1`, `p1 ok`, `p2 read`, `p2 ok 1`,
 * `p3 cas 1 2`, `p3 fail`, `p4 info`. Values are JSON (`null`, `1`, `"a"`). The key is `x`
 * unless a token `@key` says otherwise. Line i happens at time i.
 */
export function history(...lines: string[]): HistoryEvent[] {
  const rec = new HistoryRecorder();
  const open = new Map<number, { handle: OpHandle; value: Value | CasValue }>();
  lines.forEach((line, time) => {
    const tokens = line.trim().split(/\s+/);
    const keyToken = tokens.find((tok) => tok.startsWith('@'));
    const key = keyToken === undefined ? 'x' : keyToken.slice(1);
    const [proc, verb, ...args] = tokens.filter((tok) => !tok.startsWith('@'));
    assert(proc !== undefined && /^p\d+$/.test(proc) && verb !== undefined, `bad history line: ${line}`);
    const p = Number(proc.slice(1));
    const values = args.map((a) => JSON.parse(a) as Value);
    switch (verb) {
      case 'read':
        open.set(p, { handle: rec.invoke(p, 'read', key, null, time), value: null });
        return;
      case 'write': {
        const v = values[0] ?? null;
        open.set(p, { handle: rec.invoke(p, 'write', key, v, time), value: v });
        return;
      }
      case 'cas': {
        const v: CasValue = [values[0] ?? null, values[1] ?? null];
        open.set(p, { handle: rec.invoke(p, 'cas', key, v, time), value: v });
        return;
      }
      case 'ok':
      case 'fail':
      case 'info': {
        const o = open.get(p);
        assert(o !== undefined, `no open op for ${proc}: ${line}`);
        open.delete(p);
        const value = o.handle.f === 'read' ? (values[0] ?? null) : o.value;
        rec.complete(o.handle, verb, value as never, time);
        return;
      }
      default:
        throw new Error(`bad verb in history line: ${line}`);
    }
  });
  return [...rec.events];
}

// ---- Generating histories from a real register ------------------------------------------------

/** One operation of a generated history, before timing and outcome are resolved. */
export interface OpSpec {
  /** Worker number (a worker's operations never overlap). */
  readonly worker: number;
  readonly key: number;
  readonly f: OpFn;
  /** The written value, or the new value of a CAS. */
  readonly value: number;
  /** The expected value of a CAS (0 means null). */
  readonly expected: number;
  /** Idle time before the invoke, and the operation's duration (both at least 1). */
  readonly gap: number;
  readonly duration: number;
  /** Where in (invoke, complete) the operation takes effect, in hundredths (1..99). */
  readonly at: number;
  /**
   * `ok`; `refused` (a write or CAS rejected before proposal: fail, no effect); `info-applied`,
   * `info-lost` (timed out, did or did not take effect); `hang` (no completion, did not apply).
   */
  readonly outcome: 'ok' | 'refused' | 'info-applied' | 'info-lost' | 'hang';
}

/** A planted bug: `stale` changes one ok read's result; `drop` loses one ok write's effect. */
export type Bug = { readonly kind: 'none' } | { readonly kind: 'stale'; readonly pick: number; readonly value: number } | { readonly kind: 'drop'; readonly pick: number };

export interface Generated {
  readonly events: HistoryEvent[];
  /** Whether the planted bug could be applied (an eligible operation existed). */
  readonly planted: boolean;
}

const toValue = (v: number): Value => (v === 0 ? null : v);

/**
 * Runs the specs against a real sequential register: each operation takes effect at a point
 * inside its [invoke, complete] interval, outputs are computed from the register at that
 * point, and the events are recorded in time order. Without a bug the history is linearizable
 * by construction.
 */
export function generate(specs: readonly OpSpec[], bug: Bug = { kind: 'none' }): Generated {
  interface Timed {
    readonly spec: OpSpec;
    readonly start: number;
    readonly end: number;
    readonly point: number;
    status: OpStatus | 'hang';
    output: Value | CasValue;
  }
  const clock = new Map<number, number>();
  const hung = new Set<number>();
  const timed: Timed[] = [];
  for (const spec of specs) {
    // A worker whose operation hung never completes, so it issues nothing more.
    if (hung.has(spec.worker)) continue;
    const start = (clock.get(spec.worker) ?? 0) + spec.gap;
    const end = start + spec.duration;
    clock.set(spec.worker, end);
    if (spec.outcome === 'hang') hung.add(spec.worker);
    timed.push({ spec, start, end, point: start + (spec.duration * spec.at) / 100, status: 'ok', output: null });
  }
  // The bug's target among the eligible operations.
  const eligible = timed.filter((op) =>
    op.spec.outcome === 'ok' && (bug.kind === 'stale' ? op.spec.f === 'read' : bug.kind === 'drop' ? op.spec.f === 'write' : false));
  const target = bug.kind === 'none' || eligible.length === 0 ? undefined : eligible[bug.pick % eligible.length];

  const register = new Map<number, Value>();
  const changes: { readonly key: number; readonly point: number; readonly value: Value }[] = [];
  for (const op of [...timed].sort((a, b) => a.point - b.point)) {
    const { spec } = op;
    const current = register.get(spec.key) ?? null;
    const takesEffect = spec.outcome === 'ok' || spec.outcome === 'info-applied';
    let effect: Value | undefined;
    switch (spec.f) {
      case 'read':
        op.output = current;
        break;
      case 'write':
        op.output = toValue(spec.value);
        if (takesEffect) effect = toValue(spec.value);
        if (spec.outcome === 'refused') op.status = 'fail';
        break;
      case 'cas': {
        const expected = toValue(spec.expected);
        op.output = [expected, toValue(spec.value)];
        if (takesEffect && current === expected) effect = toValue(spec.value);
        if ((spec.outcome === 'ok' && current !== expected) || spec.outcome === 'refused') op.status = 'fail';
        break;
      }
      default:
        assertNever(spec.f, 'op function');
    }
    if (spec.outcome === 'info-applied' || spec.outcome === 'info-lost') op.status = 'info';
    if (spec.outcome === 'hang') op.status = 'hang';
    if (effect !== undefined && !(bug.kind === 'drop' && op === target)) {
      register.set(spec.key, effect);
      changes.push({ key: spec.key, point: op.point, value: effect });
    }
  }
  let planted = target !== undefined;
  if (target !== undefined && bug.kind === 'stale') {
    // Every value the read's key held at some point of the read's interval.
    const mine = changes.filter((c) => c.key === target.spec.key);
    const before = mine.filter((c) => c.point < target.start).at(-1);
    const held = new Set<Value>([before === undefined ? null : before.value]);
    for (const c of mine) if (c.point > target.start && c.point < target.end) held.add(c.value);
    const replacement = toValue(bug.value);
    if (held.has(replacement)) planted = false;
    else target.output = replacement;
  }

  // Record in time order; at equal times completions go first (their effect points are earlier).
  type Ev = { readonly time: number; readonly complete: boolean; readonly op: Timed };
  const evs: Ev[] = [];
  for (const op of timed) {
    evs.push({ time: op.start, complete: false, op });
    if (op.status !== 'hang') evs.push({ time: op.end, complete: true, op });
  }
  evs.sort((a, b) => a.time - b.time || Number(b.complete) - Number(a.complete));
  const rec = new HistoryRecorder();
  const handles = new Map<Timed, OpHandle>();
  for (const ev of evs) {
    const { spec } = ev.op;
    const key = `k${String(spec.key)}`;
    if (!ev.complete) {
      const handle = spec.f === 'read' ? rec.invoke(spec.worker, 'read', key, null, ev.time)
        : spec.f === 'write' ? rec.invoke(spec.worker, 'write', key, toValue(spec.value), ev.time)
          : rec.invoke(spec.worker, 'cas', key, [toValue(spec.expected), toValue(spec.value)], ev.time);
      handles.set(ev.op, handle);
    } else {
      const handle = handles.get(ev.op);
      assert(handle !== undefined && ev.op.status !== 'hang', 'completion before invoke');
      const value = ev.op.status === 'info' && spec.f === 'read' ? null : ev.op.output;
      rec.complete(handle, ev.op.status, value as never, ev.time);
    }
  }
  return { events: [...rec.events], planted };
}

// ---- The naive reference --------------------------------------------------------------------

/**
 * Tries every subset of the `info` operations and every permutation of the `ok` ones plus that
 * subset; accepts if one respects real time (no operation before another that completed
 * before it was invoked) and a map of registers accepts each step. Exponential: for at most
 * about 8 operations.
 */
export function naiveLinearizable(ops: readonly Operation[]): boolean {
  const live = ops.filter((op) => op.status !== 'fail');
  const required = live.filter((op) => op.status === 'ok');
  const optional = live.filter((op) => op.status === 'info');
  assert(live.length <= 9, `naive checker given ${String(live.length)} operations`);
  for (let mask = 0; mask < 1 << optional.length; mask++) {
    const chosen = [...required, ...optional.filter((_, i) => (mask & (1 << i)) !== 0)];
    if (somePermutation(chosen, (order) => respectsRealTime(order) && registerAccepts(order))) return true;
  }
  return false;
}

function somePermutation<T>(items: readonly T[], accept: (order: readonly T[]) => boolean): boolean {
  const order: T[] = [];
  const used = items.map(() => false);
  const go = (): boolean => {
    if (order.length === items.length) return accept(order);
    for (let i = 0; i < items.length; i++) {
      if (used[i]) continue;
      used[i] = true;
      order.push(items[i] as T);
      const found = go();
      order.pop();
      used[i] = false;
      if (found) return true;
    }
    return false;
  };
  return go();
}

function respectsRealTime(order: readonly Operation[]): boolean {
  for (let i = 0; i < order.length; i++) {
    for (let j = i + 1; j < order.length; j++) {
      // order[j] completed before order[i] was invoked, yet comes after it.
      if ((order[j] as Operation).completeIndex < (order[i] as Operation).invokeIndex) return false;
    }
  }
  return true;
}

function registerAccepts(order: readonly Operation[]): boolean {
  const registers = new Map<string, Value>();
  for (const op of order) {
    const current = registers.get(op.key) ?? null;
    switch (op.f) {
      case 'read':
        if (op.status === 'ok' && op.output !== current) return false;
        break;
      case 'write':
        registers.set(op.key, op.input);
        break;
      case 'cas':
        if (current !== op.input[0]) return false;
        registers.set(op.key, op.input[1]);
        break;
      default:
        assertNever(op, 'operation');
    }
  }
  return true;
}

/**
 * A second, plainer reference for histories too long to permute: depth-first search over
 * (set of linearized operations, registers) with a visited set, taking at each point any
 * operation that no pending `ok` operation must precede. No entry lists, passes or dominance
 * pruning. For at most 30 operations.
 */
export function referenceLinearizable(ops: readonly Operation[]): boolean {
  const live = ops.filter((op) => op.status !== 'fail' && !(op.f === 'read' && op.status !== 'ok'));
  assert(live.length <= 30, `reference checker given ${String(live.length)} operations`);
  const requiredMask = live.reduce((mask, op, i) => (op.status === 'ok' ? mask | (1 << i) : mask), 0);
  const visited = new Set<string>();
  const go = (done: number, registers: ReadonlyMap<string, Value>): boolean => {
    if ((done & requiredMask) === requiredMask) return true;
    const key = `${String(done)}|${JSON.stringify([...registers].sort())}`;
    if (visited.has(key)) return false;
    visited.add(key);
    for (let i = 0; i < live.length; i++) {
      const op = live[i] as Operation;
      if ((done & (1 << i)) !== 0) continue;
      // Every pending ok operation that completed before this one was invoked must come first.
      const blocked = live.some((p, j) => j !== i && (done & (1 << j)) === 0 && p.status === 'ok' && p.completeIndex < op.invokeIndex);
      if (blocked) continue;
      const current = registers.get(op.key) ?? null;
      let nextRegisters: ReadonlyMap<string, Value> = registers;
      if (op.f === 'read') {
        if (op.output !== current) continue;
      } else if (op.f === 'write') {
        nextRegisters = new Map(registers).set(op.key, op.input);
      } else {
        if (current !== op.input[0]) continue;
        nextRegisters = new Map(registers).set(op.key, op.input[1]);
      }
      if (go(done | (1 << i), nextRegisters)) return true;
    }
    return false;
  };
  return go(0, new Map());
}
