/**
 * A linearizability checker for register histories (read, write, compare-and-set).
 *
 * The search is Wing & Gong's (1993) with Lowe's just-in-time linearization and state cache
 * ("Testing for linearizability", 2017), as in Porcupine and Knossos: the history is a doubly
 * linked list of call and return entries; the search linearizes a pending call whose model step
 * succeeds, and backtracks when it reaches a return whose operation has not been linearized.
 * Each key is checked on its own, which is sound and complete because linearizability is local
 * (Herlihy & Wing 1990) and the register is P-compositional (Horn & Kroening 2015).
 *
 * Operations whose outcome is unknown (`info`) have no return entry: they may be linearized at
 * any point after their call, or never, and the search succeeds once every `ok` operation is
 * linearized. To keep many of them from blowing up the search, the cache remembers failed
 * configurations and prunes any configuration that only adds optional operations to one that
 * failed with the same required set and state (see `searchLinearization`).
 */
import { assert, assertNever, CairnError, ErrorCode } from '../../src/base/index.js';
import { pairOperations } from './history.js';
import type { HistoryEvent, Operation, Value } from './history.js';

export type Verdict = true | false | 'unknown';

export type StepResult<State> = { readonly ok: true; readonly newState: State } | { readonly ok: false };

/**
 * A sequential specification. `step` must be pure. `hash` returns a 32-bit integer and must
 * agree with `equals` (equal states hash equally).
 */
export interface Model<State, Input, Output> {
  init(): State;
  step(state: State, input: Input, output: Output): StepResult<State>;
  equals(a: State, b: State): boolean;
  hash(state: State): number;
}

/** One operation as the generic search sees it. */
export interface ModelOperation<Input, Output> {
  readonly input: Input;
  readonly output: Output;
  /** Position of the invocation in real-time order. */
  readonly call: number;
  /**
   * Position of the completion. `Infinity` means the outcome is unknown: the operation may take
   * effect at any point after `call`, or never. Calls sort before returns at equal positions
   * (the two operations are then treated as concurrent).
   */
  readonly ret: number;
}

export interface SearchOptions {
  /** Search steps (list entries visited) before giving up with `unknown`. Default 5,000,000. */
  readonly maxSteps?: number;
}

export interface SearchResult<State> {
  readonly verdict: Verdict;
  /** Search steps taken. */
  readonly steps: number;
  /**
   * When the verdict is false: the operation (index into the input) whose completion was the
   * furthest point any order reached, and the distinct model states (at most 8) the search was
   * in when it got stuck there. The operations whose call is at or before that operation's
   * return already form a non-linearizable history.
   */
  readonly stuck: { readonly op: number; readonly states: readonly State[] } | undefined;
}

export const DEFAULT_MAX_STEPS_PER_KEY = 5_000_000;
export const DEFAULT_MAX_MINIMIZE_STEPS_PER_KEY = 2_000_000;
const MAX_STUCK_STATES = 8;

interface FailedConfiguration<State> {
  readonly required: Uint32Array;
  readonly optional: Uint32Array;
  readonly state: State;
}

/**
 * Decides whether `ops` can be ordered so that the order respects real time (an operation whose
 * return precedes another's call comes first) and every step is accepted by `model`.
 *
 * Configurations are (set of linearized operations, model state). Lowe's cache skips a
 * configuration seen before; here the cache holds configurations that were fully explored and
 * failed, and a configuration is also skipped when a failed one had the same required set and
 * state and a subset of its optional operations: anything the larger one can still do, the
 * smaller one could too (optional operations have no return, so they constrain nothing). With
 * no optional operations this is exactly Lowe's cache. Required calls are tried before optional
 * ones at each point, so optional operations are linearized only when nothing else can move.
 */
export function searchLinearization<State, Input, Output>(
  model: Model<State, Input, Output>,
  ops: readonly ModelOperation<Input, Output>[],
  options: SearchOptions = {},
): SearchResult<State> {
  const maxSteps = options.maxSteps ?? DEFAULT_MAX_STEPS_PER_KEY;
  checkCount('maxSteps', maxSteps, 1);
  const n = ops.length;
  const inputs: Input[] = [];
  const outputs: Output[] = [];
  const callPos = new Float64Array(n);
  const retPos = new Float64Array(n);
  // Required and optional operations are numbered separately: bit[op] is the op's bit in its set.
  const optional = new Uint8Array(n);
  const bit = new Int32Array(n);
  let nRequired = 0;
  let nOptional = 0;
  for (let i = 0; i < n; i++) {
    const op = ops[i];
    assert(op !== undefined, 'ops array has a hole');
    assert(Number.isFinite(op.call), () => `operation ${String(i)}: call position must be finite, got ${String(op.call)}`);
    assert(op.ret === Infinity || (Number.isFinite(op.ret) && op.ret >= op.call), () =>
      `operation ${String(i)}: return position ${String(op.ret)} must be Infinity or at least its call position ${String(op.call)}`);
    inputs.push(op.input);
    outputs.push(op.output);
    callPos[i] = op.call;
    retPos[i] = op.ret;
    if (op.ret === Infinity) {
      optional[i] = 1;
      bit[i] = nOptional++;
    } else {
      bit[i] = nRequired++;
    }
  }
  if (nRequired === 0) return { verdict: true, steps: 0, stuck: undefined };

  // Two doubly linked lists over entries numbered 1..m in real-time order (calls before returns
  // at equal positions), so an entry's number is its rank. The required list (head entry 0)
  // holds the calls and returns of required operations, as in Lowe; the optional list (head
  // m + 1) holds the calls of optional operations, which have no return. Keeping them apart
  // means a scan for required calls never walks over the optional calls that pile up behind
  // timeouts. NIL ends a list.
  const NIL = -1;
  const codes: number[] = [];
  for (let i = 0; i < n; i++) {
    codes.push(i * 2);
    if (optional[i] === 0) codes.push(i * 2 + 1);
  }
  const posOf = (code: number): number => ((code & 1) === 0 ? callPos[code >> 1]! : retPos[code >> 1]!);
  codes.sort((a, b) => posOf(a) - posOf(b) || (a & 1) - (b & 1) || a - b);
  const m = codes.length;
  const HEAD_REQUIRED = 0;
  const HEAD_OPTIONAL = m + 1;
  const next = new Int32Array(m + 2);
  const prev = new Int32Array(m + 2);
  const entryOp = new Int32Array(m + 2);
  const isCall = new Uint8Array(m + 2);
  const retEntry = new Int32Array(n).fill(NIL);
  let tailRequired = HEAD_REQUIRED;
  let tailOptional = HEAD_OPTIONAL;
  next[HEAD_REQUIRED] = NIL;
  next[HEAD_OPTIONAL] = NIL;
  prev[HEAD_REQUIRED] = NIL;
  prev[HEAD_OPTIONAL] = NIL;
  for (let k = 0; k < m; k++) {
    const e = k + 1;
    const code = codes[k]!;
    const op = code >> 1;
    entryOp[e] = op;
    isCall[e] = (code & 1) === 0 ? 1 : 0;
    if ((code & 1) === 1) retEntry[op] = e;
    const tail = optional[op] === 1 ? tailOptional : tailRequired;
    next[tail] = e;
    prev[e] = tail;
    next[e] = NIL;
    if (optional[op] === 1) tailOptional = e;
    else tailRequired = e;
  }

  // Lifting a call removes it and its return from its list; lifts and unlifts are strictly
  // last-in first-out, so unlinked entries keep the pointers needed to relink them.
  const unlink = (e: number): void => {
    const p = prev[e]!;
    const q = next[e]!;
    next[p] = q;
    if (q !== NIL) prev[q] = p;
  };
  const relink = (e: number): void => {
    const q = next[e]!;
    next[prev[e]!] = e;
    if (q !== NIL) prev[q] = e;
  };
  const lift = (callEntry: number): void => {
    unlink(callEntry);
    const r = retEntry[entryOp[callEntry]!]!;
    if (r !== NIL) unlink(r);
  };
  const unlift = (callEntry: number): void => {
    const r = retEntry[entryOp[callEntry]!]!;
    if (r !== NIL) relink(r);
    relink(callEntry);
  };

  // Linearized sets as bitsets; the required set also has an incrementally maintained Zobrist
  // hash, so a cache lookup costs one model.hash and no pass over the bitset.
  const required = new Uint32Array((nRequired + 31) >>> 5);
  const optionalSet = new Uint32Array((nOptional + 31) >>> 5);
  const zobrist = new Int32Array(n);
  let seed = 0x2545f491;
  for (let i = 0; i < n; i++) {
    seed = (seed + 0x9e3779b9) | 0;
    zobrist[i] = mix32(seed, i);
  }
  let requiredHash = 0;

  const failed = new Map<number, FailedConfiguration<State>[]>();
  const isDominated = (key: number, state: State): boolean => {
    const bucket = failed.get(key);
    if (bucket === undefined) return false;
    for (const f of bucket) {
      if (sameWords(f.required, required) && subsetWords(f.optional, optionalSet) && model.equals(f.state, state)) return true;
    }
    return false;
  };
  const recordFailed = (key: number, state: State): void => {
    const bucket = failed.get(key);
    const entry: FailedConfiguration<State> = { required: required.slice(), optional: optionalSet.slice(), state };
    if (bucket === undefined) {
      failed.set(key, [entry]);
      return;
    }
    // Drop the configurations the new one dominates, then add it.
    let w = 0;
    for (const f of bucket) {
      const dominated = sameWords(f.required, required) && subsetWords(optionalSet, f.optional) && model.equals(f.state, state);
      if (!dominated) bucket[w++] = f;
    }
    bucket.length = w;
    bucket.push(entry);
  };

  // An optional operation tried right after another optional one, that would reach the same
  // state straight from the configuration before that one (a write overwriting a write), is
  // skipped: that configuration's own pass 1 tries it with one optional operation fewer, which
  // dominates this attempt. Without this, chains of timed-out writes are explored in every
  // order and subset before the short ones.
  const sameAsFromParent = (newState: State, op: number): boolean => {
    const fromParent = model.step(stackState[sp - 1] as State, inputs[op]!, outputs[op]!);
    return fromParent.ok && model.equals(fromParent.newState, newState);
  };

  // The stack of linearized calls: the entry, the pass and barrier it was tried in, and the
  // state before it.
  const stackEntry = new Int32Array(n);
  const stackPass = new Uint8Array(n);
  const stackBarrier = new Int32Array(n);
  const stackState: State[] = [];
  let stuckEntry = 0;
  const stuckStates: State[] = [];

  let state = model.init();
  let sp = 0;
  let steps = 0;
  let linearizedRequired = 0;
  // Pass 0 walks the required list, trying each call, up to the first return (the barrier:
  // that operation must be linearized before anything after it). Pass 1 then tries the
  // optional calls before the barrier. When both are exhausted, the configuration fails.
  let pass = 0;
  let barrier = 0;
  let entry = next[HEAD_REQUIRED]!;
  for (;;) {
    if (linearizedRequired === nRequired) return { verdict: true, steps, stuck: undefined };
    if (steps >= maxSteps) return { verdict: 'unknown', steps, stuck: undefined };
    steps++;
    let candidate = NIL;
    if (pass === 0) {
      // A required operation not yet linearized keeps its return in the list after its call,
      // so this walk always meets a return before the end of the list.
      assert(entry !== NIL, 'linearizability search ran off the end of the required list');
      if (isCall[entry] === 1) {
        candidate = entry;
      } else {
        barrier = entry;
        pass = 1;
        entry = next[HEAD_OPTIONAL]!;
        continue;
      }
    } else if (entry !== NIL && entry < barrier) {
      candidate = entry;
    }
    if (candidate !== NIL) {
      const op = entryOp[candidate]!;
      const result = model.step(state, inputs[op]!, outputs[op]!);
      if (result.ok && !(pass === 1 && sp > 0 && stackPass[sp - 1] === 1 && sameAsFromParent(result.newState, op))) {
        const b = bit[op]!;
        const word = b >>> 5;
        const mask = 1 << (b & 31);
        let hash = requiredHash;
        if (pass === 0) {
          required[word]! |= mask;
          hash ^= zobrist[op]!;
        } else {
          optionalSet[word]! |= mask;
        }
        if (!isDominated(mix32(hash, model.hash(result.newState)), result.newState)) {
          stackEntry[sp] = candidate;
          stackPass[sp] = pass;
          stackBarrier[sp] = barrier;
          stackState[sp] = state;
          sp++;
          state = result.newState;
          requiredHash = hash;
          if (pass === 0) linearizedRequired++;
          lift(candidate);
          pass = 0;
          entry = next[HEAD_REQUIRED]!;
          continue;
        }
        if (pass === 0) required[word]! &= ~mask;
        else optionalSet[word]! &= ~mask;
      }
      entry = next[candidate]!;
      continue;
    }
    // Nothing before the barrier can be linearized from here: note how far we got, remember
    // the failure, and backtrack.
    if (barrier > stuckEntry) {
      stuckEntry = barrier;
      stuckStates.length = 0;
      stuckStates.push(state);
    } else if (barrier === stuckEntry && stuckStates.length < MAX_STUCK_STATES && !stuckStates.some((s) => model.equals(s, state))) {
      stuckStates.push(state);
    }
    if (sp === 0) return { verdict: false, steps, stuck: { op: entryOp[stuckEntry]!, states: stuckStates } };
    recordFailed(mix32(requiredHash, model.hash(state)), state);
    sp--;
    const popped = stackEntry[sp]!;
    const op = entryOp[popped]!;
    // Slot sp was written when this frame was pushed (State itself may include undefined).
    state = stackState[sp] as State;
    pass = stackPass[sp]!;
    barrier = stackBarrier[sp]!;
    const b = bit[op]!;
    if (optional[op] === 0) {
      required[b >>> 5]! &= ~(1 << (b & 31));
      requiredHash ^= zobrist[op]!;
      linearizedRequired--;
    } else {
      optionalSet[b >>> 5]! &= ~(1 << (b & 31));
    }
    unlift(popped);
    entry = next[popped]!;
  }
}

function sameWords(a: Uint32Array, b: Uint32Array): boolean {
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** Whether every bit of `a` is set in `b`. */
function subsetWords(a: Uint32Array, b: Uint32Array): boolean {
  for (let i = 0; i < a.length; i++) if ((a[i]! & ~b[i]!) !== 0) return false;
  return true;
}

/** Mixes two 32-bit values into one (murmur3's finalizer over a golden-ratio combination). */
function mix32(a: number, b: number): number {
  let h = (a ^ Math.imul(b, 0x9e3779b1)) | 0;
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return (h ^ (h >>> 16)) | 0;
}

// ---- The register model ---------------------------------------------------------------------

export type RegisterInput =
  | { readonly f: 'read' }
  | { readonly f: 'write'; readonly value: Value }
  | { readonly f: 'cas'; readonly expected: Value; readonly value: Value };
/** A read's result; `undefined` when unknown. Writes and CASes carry no output: `ok` means applied. */
export type RegisterOutput = Value | undefined;

const REJECT = { ok: false } as const;

/** FNV-1a over the string's UTF-16 code units, tagged by type so 1 and "1" differ. */
export function hashValue(v: Value): number {
  if (v === null) return 0x6b43a9b5;
  if (typeof v === 'number' && (v | 0) === v) return mix32(0x1b873593, v);
  const s = typeof v === 'number' ? `#${String(v)}` : v;
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  return h | 0;
}

/**
 * A single register: initially `null` (absent); a write sets it; a CAS succeeds only when the
 * register equals its expected value (`fail` CASes are removed before checking, so a CAS in
 * the search always took effect if it happened); a read must return the current value.
 */
export const registerModel: Model<Value, RegisterInput, RegisterOutput> = {
  init: () => null,
  step(state, input, output) {
    switch (input.f) {
      case 'read':
        return output === undefined || output === state ? { ok: true, newState: state } : REJECT;
      case 'write':
        return { ok: true, newState: input.value };
      case 'cas':
        return state === input.expected ? { ok: true, newState: input.value } : REJECT;
      default:
        return assertNever(input, 'register input');
    }
  },
  equals: (a, b) => a === b,
  hash: hashValue,
};

// ---- Checking register histories ------------------------------------------------------------

export interface CheckOptions {
  /** Search steps allowed per key before its verdict is `unknown`. Default 5,000,000. */
  readonly maxStepsPerKey?: number;
  /** Shrink each anomaly to a small failing sub-history. Default true. */
  readonly minimize?: boolean;
  /** Search steps the shrinking may spend per anomalous key. Default 2,000,000. */
  readonly maxMinimizeStepsPerKey?: number;
}

export interface Anomaly {
  readonly key: string;
  /** The smallest failing sub-history found (ordered by invoke). */
  readonly ops: readonly Operation[];
  readonly explanation: string;
}

export interface CheckResult {
  /** False if any key is not linearizable; `unknown` if none is but some ran out of budget. */
  readonly valid: Verdict;
  /** Number of distinct keys in the history. */
  readonly keys: number;
  /** Number of operations in the history, including `fail` ones. */
  readonly ops: number;
  readonly anomalies: readonly Anomaly[];
  /** Keys whose search ran out of budget. */
  readonly unknownKeys: readonly string[];
  /** Search steps over all keys (not counting shrinking). */
  readonly steps: number;
}

/** Pairs the events (`pairOperations`) and checks the operations. */
export function checkHistory(events: readonly HistoryEvent[], options: CheckOptions = {}): CheckResult {
  return checkOperations(pairOperations(events), options);
}

/** Checks each key's operations on its own (P-compositionality) against `registerModel`. */
export function checkOperations(ops: readonly Operation[], options: CheckOptions = {}): CheckResult {
  const maxStepsPerKey = options.maxStepsPerKey ?? DEFAULT_MAX_STEPS_PER_KEY;
  const maxMinimizeSteps = options.maxMinimizeStepsPerKey ?? DEFAULT_MAX_MINIMIZE_STEPS_PER_KEY;
  checkCount('maxStepsPerKey', maxStepsPerKey, 1);
  checkCount('maxMinimizeStepsPerKey', maxMinimizeSteps, 0);
  if (options.minimize !== undefined && typeof options.minimize !== 'boolean') {
    throw new CairnError(ErrorCode.INVALID_ARGUMENT, `option minimize must be a boolean, got ${String(options.minimize)}`, { option: 'minimize' });
  }
  const byKey = new Map<string, Operation[]>();
  for (const op of ops) {
    checkOperationShape(op);
    let list = byKey.get(op.key);
    if (list === undefined) byKey.set(op.key, (list = []));
    list.push(op);
  }
  const anomalies: Anomaly[] = [];
  const unknownKeys: string[] = [];
  let steps = 0;
  for (const [key, keyOps] of byKey) {
    // `fail` operations did not happen; a read whose outcome is unknown constrains nothing.
    const relevant = keyOps.filter((op) => op.status !== 'fail' && !(op.f === 'read' && op.status === 'info'));
    const result = searchLinearization(registerModel, relevant.map(toModelOperation), { maxSteps: maxStepsPerKey });
    steps += result.steps;
    if (result.verdict === 'unknown') unknownKeys.push(key);
    else if (result.verdict === false) {
      anomalies.push(explainKey(key, relevant, result, options.minimize ?? true, maxStepsPerKey, maxMinimizeSteps));
    }
  }
  return {
    valid: anomalies.length > 0 ? false : unknownKeys.length > 0 ? 'unknown' : true,
    keys: byKey.size,
    ops: ops.length,
    anomalies,
    unknownKeys,
    steps,
  };
}

/** The search's view of one register operation. `fail` operations must be removed first. */
export function toModelOperation(op: Operation): ModelOperation<RegisterInput, RegisterOutput> {
  assert(op.status !== 'fail', 'a fail operation never took effect and must not be searched');
  const ret = op.status === 'info' ? Infinity : op.completeIndex;
  switch (op.f) {
    case 'read':
      return { input: { f: 'read' }, output: op.status === 'info' ? undefined : op.output, call: op.invokeIndex, ret };
    case 'write':
      return { input: { f: 'write', value: op.input }, output: undefined, call: op.invokeIndex, ret };
    case 'cas':
      return { input: { f: 'cas', expected: op.input[0], value: op.input[1] }, output: undefined, call: op.invokeIndex, ret };
    default:
      return assertNever(op, 'operation');
  }
}

function checkOperationShape(op: Operation): void {
  let problem: string | undefined;
  if (!Number.isFinite(op.invokeIndex)) {
    problem = `invokeIndex must be finite, got ${String(op.invokeIndex)}`;
  } else if (op.status === 'ok' && !(op.completeIndex >= op.invokeIndex && Number.isFinite(op.completeIndex))) {
    problem = `an ok operation needs a finite completeIndex at or after its invokeIndex ${String(op.invokeIndex)}, got ${String(op.completeIndex)}`;
  } else if (op.status === 'ok' && op.f === 'read' && op.output === undefined) {
    problem = 'an ok read needs the value it read as its output';
  }
  if (problem !== undefined) {
    throw new CairnError(ErrorCode.INVALID_ARGUMENT, `operation ${String(op.id)} (process ${String(op.process)}, ${op.f} ${JSON.stringify(op.key)}): ${problem}`);
  }
}

function checkCount(option: string, value: number, min: number): void {
  if (!Number.isSafeInteger(value) || value < min) {
    throw new CairnError(ErrorCode.INVALID_ARGUMENT, `option ${option} must be an integer of at least ${String(min)}, got ${String(value)}`, { option });
  }
}

// ---- Explaining an anomaly ------------------------------------------------------------------

/**
 * Shrinks a non-linearizable key history and explains it, within a step budget:
 *
 * 1. Cut to the prefix up to the furthest completion the search reached (`SearchResult.stuck`):
 *    the search never looked past it, so it explores the same configurations on the prefix and
 *    fails the same way.
 * 2. Delta debugging (Zeller & Hildebrandt 2002, complement removal only): drop chunks of
 *    operations, halving the chunk size down to one, keeping each drop that leaves the history
 *    non-linearizable (and cutting to the new stuck prefix); then repeat single drops until
 *    none succeeds. The result is 1-minimal when the budget allows.
 *
 * Only drops that cannot create an anomaly are tried (`canDrop`), so the result is a failure
 * the full history already had, not one made by removing a write that something observed.
 */
function explainKey(
  key: string,
  relevant: readonly Operation[],
  first: SearchResult<Value>,
  minimize: boolean,
  maxStepsPerKey: number,
  maxMinimizeSteps: number,
): Anomaly {
  let current: readonly Operation[] = relevant;
  let result = first;
  if (minimize) {
    let budget = maxMinimizeSteps;
    ({ ops: current, result } = cutToStuckPrefix(current, result));
    /** Drops what it safely can of the operations `chosen` picks; true if still non-linearizable. */
    const tryDrop = (chosen: (op: Operation, i: number) => boolean): boolean => {
      if (budget <= 0) return false;
      const drop = droppable(current, chosen);
      if (drop === undefined) return false;
      const candidate = current.filter((_, i) => !drop.has(i));
      const r = searchLinearization(registerModel, candidate.map(toModelOperation), { maxSteps: Math.min(budget, maxStepsPerKey) });
      budget -= r.steps;
      if (r.verdict !== false) return false;
      ({ ops: current, result } = cutToStuckPrefix(candidate, r));
      return true;
    };
    // First, everything but the operation the search got stuck at: often that leaves only the
    // writes it needs and the search has little left to do.
    const stuckOp = result.stuck === undefined ? undefined : current[result.stuck.op];
    tryDrop((op) => op !== stuckOp);
    let chunk = 1;
    while (chunk * 2 <= current.length / 2) chunk *= 2;
    for (;;) {
      let changed = false;
      for (let start = 0; start < current.length && budget > 0; start += chunk) {
        // After a successful drop the survivors shift left; retrying the same start is fine.
        while (budget > 0 && tryDrop((_, i) => i >= start && i < start + chunk)) changed = true;
      }
      if (budget <= 0 || (chunk === 1 && !changed)) break;
      chunk = Math.max(1, chunk >> 1);
    }
  }
  return { key, ops: current, explanation: explain(current, result) };
}

/**
 * The operations invoked at or before the completion where the search got stuck, with the
 * result re-indexed to them.
 */
function cutToStuckPrefix(ops: readonly Operation[], result: SearchResult<Value>): { ops: readonly Operation[]; result: SearchResult<Value> } {
  const stuck = result.stuck;
  const stuckOp = stuck === undefined ? undefined : ops[stuck.op];
  if (stuck === undefined || stuckOp === undefined) return { ops, result };
  const prefix = ops.filter((op) => op.invokeIndex <= stuckOp.completeIndex);
  return { ops: prefix, result: { ...result, stuck: { op: prefix.indexOf(stuckOp), states: stuck.states } } };
}

/**
 * Of the operations `chosen` picks, the indexes of those that can be dropped without turning a
 * linearizable history into a non-linearizable one, so that a failure after the drop was a
 * failure before it; undefined if none. A read can always go: delete it from a linearization
 * and the rest still works. A write or CAS can go when no read that stays and no CAS reads or
 * expects the value it writes: in a linearization the operation right after it must then be a
 * write (anything else would observe its value), so deleting it changes nothing else. (Drop
 * the reads, then the CASes, then the writes, one at a time, and each step is such a drop.)
 */
function droppable(ops: readonly Operation[], chosen: (op: Operation, i: number) => boolean): Set<number> | undefined {
  const drop = new Set<number>();
  const observed = new Map<Value, number>();
  const observe = (v: Value): void => {
    observed.set(v, (observed.get(v) ?? 0) + 1);
  };
  ops.forEach((op, i) => {
    if (op.f === 'read') {
      if (chosen(op, i)) drop.add(i);
      else if (op.output !== undefined) observe(op.output);
    } else if (op.f === 'cas') {
      observe(op.input[0]);
    }
  });
  ops.forEach((op, i) => {
    if (op.f === 'read' || !chosen(op, i)) return;
    const writes = op.f === 'write' ? op.input : op.input[1];
    // A CAS a -> a observes its own value; that observer goes with it.
    const own = op.f === 'cas' && op.input[0] === writes ? 1 : 0;
    if ((observed.get(writes) ?? 0) - own === 0) drop.add(i);
  });
  return drop.size === 0 ? undefined : drop;
}

/** For each value written, the earliest invoke position of an operation that writes it. */
function firstWriters(ops: readonly Operation[]): Map<Value, number> {
  const first = new Map<Value, number>();
  for (const op of ops) {
    const v = op.f === 'write' ? op.input : op.f === 'cas' ? op.input[1] : undefined;
    if (v !== undefined && !(op.invokeIndex >= (first.get(v) ?? Infinity))) first.set(v, op.invokeIndex);
  }
  return first;
}

function explain(ops: readonly Operation[], result: SearchResult<Value>): string {
  const stuck = result.stuck;
  const op = stuck === undefined ? undefined : ops[stuck.op];
  if (stuck === undefined || op === undefined) {
    return `No order of these ${String(ops.length)} operations is consistent with both real time and a register.`;
  }
  const needed = op.f === 'read' ? op.output : op.f === 'cas' ? op.input[0] : undefined;
  const writer = needed === undefined || needed === null ? -Infinity : firstWriters(ops).get(needed);
  if (needed !== undefined && !(writer !== undefined && writer < op.completeIndex)) {
    const never = writer === undefined ? 'no operation on this key wrote' : 'no operation on this key had started to write before it completed';
    return op.f === 'read'
      ? `${describeOperation(op)} returned ${formatValue(needed)}, a value ${never}.`
      : `${describeOperation(op)} succeeded, but its expected value ${formatValue(needed)} is one ${never}.`;
  }
  const held = stuck.states.map(formatValue).join(' or ');
  const must = op.f === 'read' ? `it must return the register's value`
    : op.f === 'cas' ? `its expected value ${formatValue(op.input[0])} must be current when it takes effect`
      : 'it must take effect before it completes';
  return `No order of these ${String(ops.length)} operations is consistent with both real time and a register. ` +
    `Every order consistent with real time gets stuck at the completion of ${describeOperation(op)}: ${must}, ` +
    `but there the register could only hold ${held}.`;
}

export function formatValue(v: Value | undefined): string {
  return v === undefined ? '?' : JSON.stringify(v);
}

/** E.g. `p3 read "x" -> 1 (t=5..9)`. */
export function describeOperation(op: Operation): string {
  let what: string;
  switch (op.f) {
    case 'read':
      what = `read ${JSON.stringify(op.key)} -> ${formatValue(op.output)}`;
      break;
    case 'write':
      what = `write ${JSON.stringify(op.key)} ${formatValue(op.input)}`;
      break;
    case 'cas':
      what = `cas ${JSON.stringify(op.key)} ${formatValue(op.input[0])} -> ${formatValue(op.input[1])}`;
      break;
    default:
      return assertNever(op, 'operation');
  }
  const end = op.completeTime === Infinity ? '?' : String(op.completeTime);
  return `p${String(op.process)} ${what}${op.status === 'ok' ? '' : ` [${op.status}]`} (t=${String(op.invokeTime)}..${end})`;
}

/**
 * A readable timeline of an anomaly: one row per operation in invoke order, with a bar over
 * the history's event positions (`[` invoke, `]` completion, `>` never completed).
 */
export function formatAnomaly(anomaly: Anomaly): string {
  const ops = anomaly.ops;
  const positions = [...new Set(ops.flatMap((op) => (op.completeIndex === Infinity ? [op.invokeIndex] : [op.invokeIndex, op.completeIndex])))].sort((a, b) => a - b);
  const column = new Map(positions.map((p, i) => [p, i * 2] as const));
  const width = positions.length * 2 + 1;
  const rows = ops.map((op) => {
    const label = describeOperation(op);
    const start = column.get(op.invokeIndex) ?? 0;
    const end = op.completeIndex === Infinity ? width - 1 : column.get(op.completeIndex) ?? start;
    let bar = '';
    for (let c = 0; c < width; c++) {
      if (c === start) bar += '[';
      else if (c === end) bar += op.completeIndex === Infinity ? '>' : ']';
      else if (c > start && c < end) bar += '-';
      else bar += ' ';
    }
    return { label, bar };
  });
  const labelWidth = Math.max(...rows.map((r) => r.label.length), 9);
  const lines = [
    `key ${JSON.stringify(anomaly.key)} is not linearizable (${String(ops.length)} operation${ops.length === 1 ? '' : 's'} shown):`,
    `  ${anomaly.explanation}`,
    `  ${'operation'.padEnd(labelWidth)}  real-time order ->`,
    ...rows.map((r) => `  ${r.label.padEnd(labelWidth)}  ${r.bar.trimEnd()}`),
  ];
  return lines.join('\n');
}
