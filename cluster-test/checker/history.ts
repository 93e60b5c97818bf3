/**
 * Client histories of a key-value register (read, write, compare-and-set), in the Jepsen
 * format: one event per line as JSON (JSON Lines). See README.md in this folder for the format
 * as a contract other checkers can read.
 *
 * Real-time order is the order of events in the history (as in Jepsen and Knossos), not their
 * `time` fields: the recorder appends an invoke before the request leaves and a completion
 * after the reply arrives, so event order is the order one observer saw. `time` must not go
 * backwards and is kept for people reading a timeline.
 */
import { assert, assertNever, CairnError, ErrorCode } from '../../src/base/index.js';

/** A register value. `null` is "key absent", which is also every key's initial value. */
export type Value = string | number | null;
/** The value of a compare-and-set: `[expected, new]`. */
export type CasValue = readonly [expected: Value, next: Value];

export const OpFn = { read: 'read', write: 'write', cas: 'cas' } as const;
export type OpFn = (typeof OpFn)[keyof typeof OpFn];

export const EventType = { invoke: 'invoke', ok: 'ok', fail: 'fail', info: 'info' } as const;
export type EventType = (typeof EventType)[keyof typeof EventType];
/** How an operation ended: `ok` took effect; `fail` definitely did not; `info` is unknown. */
export type OpStatus = Exclude<EventType, 'invoke'>;

/** What an invoke carries for each function. A read's invoke value is always `null`. */
export interface InvokeValue {
  read: null;
  write: Value;
  cas: CasValue;
}
/** What a completion carries: a read returns the value read (`null` = absent). */
export interface CompleteValue {
  read: Value;
  write: Value;
  cas: CasValue;
}

interface EventOf<F extends OpFn> {
  readonly process: number;
  readonly type: EventType;
  readonly f: F;
  readonly key: string;
  readonly value: CompleteValue[F];
  /** Milliseconds or simulator ticks; never decreases along the history. */
  readonly time: number;
  /** Position in the history, assigned by the recorder. Informational; order is file order. */
  readonly index?: number;
}
/** One line of a history. */
export type HistoryEvent = { [F in OpFn]: EventOf<F> }[OpFn];

interface OperationOf<F extends OpFn> {
  /** Position of this operation in `pairOperations`' result (ordered by invoke). */
  readonly id: number;
  readonly process: number;
  readonly f: F;
  readonly key: string;
  readonly input: InvokeValue[F];
  /** The completion's value; `undefined` when the outcome is unknown (`info`, or no completion). */
  readonly output: CompleteValue[F] | undefined;
  readonly status: OpStatus;
  readonly invokeTime: number;
  /** `Infinity` for `info` or a missing completion: it may take effect at any later time. */
  readonly completeTime: number;
  /** Position of the invoke event in the history: the real-time order the checker uses. */
  readonly invokeIndex: number;
  /** Position of the completion event; `Infinity` for `info` or a missing completion. */
  readonly completeIndex: number;
}
/** An invoke paired with its completion. */
export type Operation = { [F in OpFn]: OperationOf<F> }[OpFn];

// ---- Recording ------------------------------------------------------------------------------

/** Returned by `HistoryRecorder.invoke`; pass it back to `complete`. */
export interface OpHandle<F extends OpFn = OpFn> {
  /** The process number recorded in the history (see `HistoryRecorder.invoke`). */
  readonly process: number;
  readonly f: F;
  readonly key: string;
  /** Position of the invoke event. */
  readonly index: number;
}

/**
 * Appends events to an in-memory history, enforcing the format's rules as it goes: at most one
 * outstanding operation per process, times that do not go backwards, finite values.
 */
export class HistoryRecorder {
  private readonly recorded: HistoryEvent[] = [];
  /** Caller's worker number -> process number currently recorded for it. */
  private readonly processOf = new Map<number, number>();
  private readonly usedProcesses = new Set<number>();
  private readonly crashed = new Set<number>();
  private readonly outstanding = new Map<number, OpHandle>();
  private lastTime = -Infinity;

  /**
   * Records an invoke. `process` is the caller's worker number; it is recorded as is until one
   * of that worker's operations ends in `info`, after which (as in Jepsen) the worker's next
   * operation is recorded under a fresh process number no other worker has used. The handle
   * says which number was recorded.
   */
  invoke<F extends OpFn>(process: number, f: F, key: string, value: InvokeValue[F], time: number): OpHandle<F> {
    assert(Number.isSafeInteger(process) && process >= 0, `invoke: process must be a non-negative integer, got ${String(process)}`);
    checkValueFor(f, 'invoke', value, (msg) => new TypeError(`invoke ${f} on key ${JSON.stringify(key)}: ${msg}`));
    // Check everything before changing anything, so a refused call records nothing.
    const current = this.processOf.get(process);
    const needsNumber = current === undefined || this.crashed.has(current);
    const recorded = !needsNumber ? current : current === undefined && !this.usedProcesses.has(process) ? process : this.freshProcess();
    assert(!this.outstanding.has(recorded), () =>
      `invoke ${f} on key ${JSON.stringify(key)}: process ${String(recorded)} already has an outstanding operation`);
    this.checkTime(time, 'invoke');
    this.lastTime = time;
    if (needsNumber) {
      this.processOf.set(process, recorded);
      this.usedProcesses.add(recorded);
    }
    const handle: OpHandle<F> = { process: recorded, f, key, index: this.recorded.length };
    this.outstanding.set(recorded, handle);
    this.push({ process: recorded, type: 'invoke', f, key, value, time } as HistoryEvent);
    return handle;
  }

  /** Records the completion of `handle`'s operation. */
  complete<F extends OpFn>(handle: OpHandle<F>, type: OpStatus, value: CompleteValue[F], time: number): void {
    assert(this.outstanding.get(handle.process) === handle, () =>
      `complete ${handle.f} on key ${JSON.stringify(handle.key)}: process ${String(handle.process)} has no such outstanding operation (completed twice?)`);
    assert(type === 'ok' || type === 'fail' || type === 'info', `complete: type must be ok, fail or info, got ${String(type)}`);
    checkValueFor(handle.f, type, value, (msg) => new TypeError(`complete ${handle.f} on key ${JSON.stringify(handle.key)}: ${msg}`));
    this.checkTime(time, 'complete');
    this.lastTime = time;
    this.outstanding.delete(handle.process);
    if (type === 'info') this.crashed.add(handle.process);
    this.push({ process: handle.process, type, f: handle.f, key: handle.key, value, time } as HistoryEvent);
  }

  /** The events so far, in order. */
  get events(): readonly HistoryEvent[] {
    return this.recorded;
  }

  /** Operations invoked but not yet completed (they pair as `info` if the history ends now). */
  get outstandingCount(): number {
    return this.outstanding.size;
  }

  toJsonLines(): string {
    return toJsonLines(this.recorded);
  }

  /** The lowest process number not yet recorded. A worker that later asks for it gets another. */
  private freshProcess(): number {
    let p = 0;
    while (this.usedProcesses.has(p)) p++;
    return p;
  }

  private checkTime(time: number, what: string): void {
    assert(Number.isFinite(time), `${what}: time must be a finite number, got ${String(time)}`);
    assert(time >= this.lastTime, () => `${what}: time went backwards from ${String(this.lastTime)} to ${String(time)}`);
  }

  private push(event: HistoryEvent): void {
    this.recorded.push({ ...event, index: this.recorded.length });
  }
}

// ---- JSON Lines -----------------------------------------------------------------------------

/** One JSON object per line, fields in a fixed order, with a trailing newline. */
export function toJsonLines(events: readonly HistoryEvent[]): string {
  let out = '';
  for (const e of events) {
    const line: Record<string, unknown> = { process: e.process, type: e.type, f: e.f, key: e.key, value: e.value, time: e.time };
    if (e.index !== undefined) line['index'] = e.index;
    out += JSON.stringify(line) + '\n';
  }
  return out;
}

/**
 * Parses and validates a JSON Lines history. Blank lines are skipped and unknown fields are
 * ignored. Throws a `CairnError` (INVALID_ARGUMENT, `details.line` 1-based) naming the line
 * and the field at fault.
 */
export function parseJsonLines(text: string): HistoryEvent[] {
  const events: HistoryEvent[] = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const raw = (lines[i] ?? '').trim();
    if (raw === '') continue;
    const lineNo = i + 1;
    const bad = (msg: string): CairnError =>
      new CairnError(ErrorCode.INVALID_ARGUMENT, `history line ${String(lineNo)}: ${msg}`, { line: lineNo });
    let parsed: unknown;
    try {
      parsed = JSON.parse(raw);
    } catch (e) {
      throw bad(`not valid JSON (${e instanceof Error ? e.message : String(e)})`);
    }
    events.push(parseEvent(parsed, bad));
  }
  return events;
}

/** Validates one decoded event (for histories that arrive as objects rather than text). */
export function parseEvent(raw: unknown, bad: (msg: string) => Error = (msg) => new CairnError(ErrorCode.INVALID_ARGUMENT, `history event: ${msg}`)): HistoryEvent {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw bad(`expected a JSON object, got ${describe(raw)}`);
  const o = raw as Record<string, unknown>;
  const { process, type, f, key, value, time, index } = o;
  if (typeof process !== 'number' || !Number.isSafeInteger(process) || process < 0) {
    throw bad(`"process" must be a non-negative integer, got ${describe(process)}`);
  }
  if (type !== 'invoke' && type !== 'ok' && type !== 'fail' && type !== 'info') {
    throw bad(`"type" must be "invoke", "ok", "fail" or "info", got ${describe(type)}`);
  }
  if (f !== 'read' && f !== 'write' && f !== 'cas') throw bad(`"f" must be "read", "write" or "cas", got ${describe(f)}`);
  if (typeof key !== 'string') throw bad(`"key" must be a string, got ${describe(key)}`);
  if (typeof time !== 'number' || !Number.isFinite(time)) throw bad(`"time" must be a finite number, got ${describe(time)}`);
  if (index !== undefined && (typeof index !== 'number' || !Number.isSafeInteger(index) || index < 0)) {
    throw bad(`"index" must be a non-negative integer when present, got ${describe(index)}`);
  }
  checkValueFor(f, type, value, (msg) => bad(`"value" of a ${f} ${type} ${msg}`));
  const event = { process, type, f, key, value, time } as HistoryEvent;
  return index === undefined ? event : { ...event, index };
}

function isValue(v: unknown): v is Value {
  return v === null || typeof v === 'string' || (typeof v === 'number' && Number.isFinite(v));
}

function checkValueFor(f: OpFn, type: EventType, value: unknown, bad: (msg: string) => Error): void {
  switch (f) {
    case 'read':
      if (type === 'invoke' ? value !== null : !isValue(value)) {
        throw bad(type === 'invoke' ? `must be null, got ${describe(value)}` : `must be a string, a finite number or null, got ${describe(value)}`);
      }
      return;
    case 'write':
      if (!isValue(value)) throw bad(`must be a string, a finite number or null, got ${describe(value)}`);
      return;
    case 'cas':
      if (!Array.isArray(value) || value.length !== 2 || !isValue(value[0]) || !isValue(value[1])) {
        throw bad(`must be [expected, new] (each a string, a finite number or null), got ${describe(value)}`);
      }
      return;
    default:
      assertNever(f, 'op function');
  }
}

function describe(v: unknown): string {
  if (v === undefined) return 'nothing';
  if (typeof v === 'number' && !Number.isFinite(v)) return String(v);
  const s = JSON.stringify(v);
  return s.length > 60 ? `${s.slice(0, 57)}...` : s;
}

// ---- Pairing --------------------------------------------------------------------------------

/**
 * Pairs each invoke with its process's next completion, in invoke order. An invoke with no
 * completion pairs as `info` (outcome unknown, `completeTime` Infinity). Throws a `CairnError`
 * (INVALID_ARGUMENT, `details.event` 0-based) when the history breaks the format: a completion
 * with no outstanding invoke, a second invoke while one is outstanding, an operation after
 * `info` on the same process, a completion whose f or key differs from its invoke, or time
 * going backwards.
 */
export function pairOperations(events: readonly HistoryEvent[]): Operation[] {
  const open = new Map<number, { event: HistoryEvent; position: number; slot: number }>();
  const crashed = new Set<number>();
  const slots: (Operation | undefined)[] = [];
  const invokes: { event: HistoryEvent; position: number }[] = [];
  let lastTime = -Infinity;
  for (let i = 0; i < events.length; i++) {
    const e = events[i];
    assert(e !== undefined, 'events array has a hole');
    if (e.time < lastTime) throw badEvent(i, e, `time ${String(e.time)} is before the previous event's time ${String(lastTime)}`);
    lastTime = e.time;
    const pending = open.get(e.process);
    if (e.type === 'invoke') {
      if (pending !== undefined) throw badEvent(i, e, `process already has an outstanding operation (invoked at event ${String(pending.position)})`);
      if (crashed.has(e.process)) throw badEvent(i, e, 'process issued an operation after one of its operations ended in info');
      open.set(e.process, { event: e, position: i, slot: slots.length });
      slots.push(undefined);
      invokes.push({ event: e, position: i });
      continue;
    }
    if (pending === undefined) throw badEvent(i, e, 'completion with no outstanding invoke on this process');
    if (pending.event.f !== e.f || pending.event.key !== e.key) {
      throw badEvent(i, e, `completion does not match its invoke (${pending.event.f} ${JSON.stringify(pending.event.key)} at event ${String(pending.position)})`);
    }
    open.delete(e.process);
    if (e.type === 'info') crashed.add(e.process);
    slots[pending.slot] = makeOperation(pending.slot, pending.event, pending.position, e.type === 'info' ? undefined : { event: e, position: i });
  }
  return slots.map((op, slot) => {
    if (op !== undefined) return op;
    const inv = invokes[slot];
    assert(inv !== undefined, 'pairing lost an invoke');
    return makeOperation(slot, inv.event, inv.position, undefined);
  });
}

function badEvent(i: number, e: HistoryEvent, msg: string): CairnError {
  return new CairnError(ErrorCode.INVALID_ARGUMENT, `history event ${String(i)} (process ${String(e.process)}, ${e.type} ${e.f} ${JSON.stringify(e.key)}): ${msg}`, { event: i });
}

/** `done` is the `ok` or `fail` completion, or undefined when the outcome is unknown. */
function makeOperation(id: number, inv: HistoryEvent, invokeIndex: number, done: { event: HistoryEvent; position: number } | undefined): Operation {
  // Object literals written out in full (not spread from a common base): pairing builds one per
  // operation and spreads were most of its cost.
  const status: OpStatus = done === undefined ? 'info' : done.event.type === 'fail' ? 'fail' : 'ok';
  const completeTime = done === undefined ? Infinity : done.event.time;
  const completeIndex = done === undefined ? Infinity : done.position;
  const out = done?.event;
  const { process, key, time: invokeTime } = inv;
  switch (inv.f) {
    case 'read':
      return { id, process, f: 'read', key, input: null, output: out?.f === 'read' ? out.value : undefined, status, invokeTime, completeTime, invokeIndex, completeIndex };
    case 'write':
      return { id, process, f: 'write', key, input: inv.value, output: out?.f === 'write' ? out.value : undefined, status, invokeTime, completeTime, invokeIndex, completeIndex };
    case 'cas':
      return { id, process, f: 'cas', key, input: inv.value, output: out?.f === 'cas' ? out.value : undefined, status, invokeTime, completeTime, invokeIndex, completeIndex };
    default:
      return assertNever(inv, 'op function');
  }
}
