/**
 * The simulated replicas' state machine: a string -> string map with put and compare-and-swap,
 * decided at apply time (ARCHITECTURE.md: "CAS is decided in the FSM"), so every replica
 * reaches the same verdict. Commands are envelopes: byte 0 is the type, the rest msgpack.
 */
import { Packr } from 'msgpackr';
import { EntryType } from './raft.js';
import { hashString } from './hash.js';
import { SimViolation } from './violation.js';

/** Application envelope types (>= 0x10; Raft owns 0x01 and 0x02). */
export const KvEnvelope = {
  Put: 0x10,
  Cas: 0x11,
} as const;

export type KvCommand =
  | { readonly type: 'put'; readonly opId: string; readonly key: string; readonly value: string }
  | { readonly type: 'cas'; readonly opId: string; readonly key: string; readonly expected: string | null; readonly value: string };

export interface KvResult {
  readonly opId: string;
  /** put: always true; cas: whether the expected value matched. */
  readonly ok: boolean;
}

const packr = new Packr({ useRecords: false, mapsAsObjects: true });

function envelope(type: number, body: unknown): Uint8Array {
  const packed = packr.pack(body);
  const out = new Uint8Array(packed.length + 1);
  out[0] = type;
  out.set(packed, 1);
  return out;
}

export function encodeCommand(cmd: KvCommand): Uint8Array {
  switch (cmd.type) {
    case 'put':
      return envelope(KvEnvelope.Put, { opId: cmd.opId, key: cmd.key, value: cmd.value });
    case 'cas':
      return envelope(KvEnvelope.Cas, { opId: cmd.opId, key: cmd.key, expected: cmd.expected, value: cmd.value });
  }
}

function field(body: unknown, name: string): unknown {
  return typeof body === 'object' && body !== null ? (body as Record<string, unknown>)[name] : undefined;
}

function str(body: unknown, name: string): string {
  const v = field(body, name);
  if (typeof v !== 'string') throw new SimViolation('exception', `KV command field ${name} is not a string`);
  return v;
}

/** Decodes an entry's envelope; undefined for the core's own entries (no-op, config). */
export function decodeCommand(data: Uint8Array): KvCommand | undefined {
  const type = data[0];
  if (type === EntryType.Noop || type === EntryType.Config) return undefined;
  const body: unknown = packr.unpack(data.subarray(1));
  switch (type) {
    case KvEnvelope.Put:
      return { type: 'put', opId: str(body, 'opId'), key: str(body, 'key'), value: str(body, 'value') };
    case KvEnvelope.Cas: {
      const expected = field(body, 'expected');
      return {
        type: 'cas',
        opId: str(body, 'opId'),
        key: str(body, 'key'),
        expected: typeof expected === 'string' ? expected : null,
        value: str(body, 'value'),
      };
    }
    default:
      // ARCHITECTURE.md: an unknown type without the 0x80 bit stops the node.
      throw new SimViolation('exception', `unknown envelope type 0x${(type ?? 0).toString(16)} in a committed entry`);
  }
}

export class KvStateMachine {
  private readonly data = new Map<string, string>();

  get(key: string): string | null {
    return this.data.get(key) ?? null;
  }

  /** Applies a committed entry's payload; undefined for entries that are not KV commands. */
  apply(payload: Uint8Array): KvResult | undefined {
    const cmd = decodeCommand(payload);
    if (cmd === undefined) return undefined;
    switch (cmd.type) {
      case 'put':
        this.data.set(cmd.key, cmd.value);
        return { opId: cmd.opId, ok: true };
      case 'cas': {
        const ok = this.get(cmd.key) === cmd.expected;
        if (ok) this.data.set(cmd.key, cmd.value);
        return { opId: cmd.opId, ok };
      }
    }
  }

  private sorted(): [string, string][] {
    return [...this.data.entries()].sort((x, y) => (x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : 0));
  }

  /** The snapshot payload: canonical (sorted), so equal states encode to equal bytes. */
  encode(): Uint8Array {
    return packr.pack({ v: 1, kv: this.sorted() });
  }

  static decode(bytes: Uint8Array): KvStateMachine {
    const body: unknown = packr.unpack(bytes);
    const kv = field(body, 'kv');
    if (field(body, 'v') !== 1 || !Array.isArray(kv)) throw new SimViolation('exception', 'KV snapshot is malformed');
    const sm = new KvStateMachine();
    for (const pair of kv as unknown[]) {
      if (!Array.isArray(pair) || typeof pair[0] !== 'string' || typeof pair[1] !== 'string') {
        throw new SimViolation('exception', 'KV snapshot holds a malformed pair');
      }
      sm.data.set(pair[0], pair[1]);
    }
    return sm;
  }

  /** A digest of the whole state, compared across nodes at every applied index. */
  digest(): string {
    let s = '';
    for (const [k, v] of this.sorted()) s += `${k}=${v};`;
    return hashString(s);
  }
}
