import { Packr } from 'msgpackr';
import type { LogIndex, NodeId, Term } from '../base/index.js';
import type { Config, Entry, Member, Message, SnapshotMeta } from '../raft/index.js';

/**
 * The wire form of Raft messages on the cluster port: one msgpack document per message. Entry
 * data (the envelopes) travel as msgpack binary, byte for byte. Everything read from the
 * network is validated field by field: a peer speaking nonsense gets its message dropped
 * with a clear reason, and never reaches the core.
 */
const packr = new Packr({ useRecords: false, mapsAsObjects: true, moreTypes: false, variableMapSize: true });

/** Upper bounds on what a peer may make us allocate. */
export const WIRE_LIMITS = {
  maxEntriesPerMessage: 100_000,
  maxSnapshotBytes: 2 ** 31 - 1,
  maxRequestIds: 100_000,
  maxMembers: 1_000,
  maxIdLength: 63,
  maxStringLength: 1024,
} as const;

export class WireError extends Error {
  override readonly name = 'WireError';
}

export function encodeMessage(m: Message): Uint8Array {
  return packr.pack(m);
}

type Obj = Record<string, unknown>;

function fail(msg: string): never {
  throw new WireError(msg);
}

function obj(v: unknown, what: string): Obj {
  if (typeof v !== 'object' || v === null || Array.isArray(v) || v instanceof Uint8Array) fail(`${what} is not an object`);
  return v as Obj;
}

function uint(v: unknown, what: string): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) fail(`${what} is not a non-negative integer`);
  return v;
}

function bool(v: unknown, what: string): boolean {
  if (typeof v !== 'boolean') fail(`${what} is not a boolean`);
  return v;
}

function str(v: unknown, what: string, max: number = WIRE_LIMITS.maxStringLength): string {
  if (typeof v !== 'string' || v.length > max) fail(`${what} is not a string of at most ${max} characters`);
  return v;
}

function id(v: unknown, what: string): NodeId {
  return str(v, what, WIRE_LIMITS.maxIdLength) as NodeId;
}

function bytes(v: unknown, what: string): Uint8Array {
  if (!(v instanceof Uint8Array)) fail(`${what} is not binary`);
  return v;
}

function array(v: unknown, what: string, max: number): unknown[] {
  if (!Array.isArray(v) || v.length > max) fail(`${what} is not an array of at most ${max} items`);
  return v;
}

function entry(v: unknown, k: number): Entry {
  const o = obj(v, `entries[${k}]`);
  const data = bytes(o['data'], `entries[${k}].data`);
  if (data.length === 0) fail(`entries[${k}].data is empty (an envelope needs a type byte)`);
  return { index: uint(o['index'], `entries[${k}].index`) as LogIndex, term: uint(o['term'], `entries[${k}].term`) as Term, data };
}

function member(v: unknown, k: number): Member {
  const o = obj(v, `members[${k}]`);
  const suffrage = o['suffrage'];
  if (suffrage !== 'voter' && suffrage !== 'learner') fail(`members[${k}].suffrage is invalid`);
  const autoPromote = o['autoPromote'];
  if (autoPromote !== undefined && typeof autoPromote !== 'boolean') fail(`members[${k}].autoPromote is not a boolean`);
  return { id: id(o['id'], `members[${k}].id`), suffrage, address: str(o['address'], `members[${k}].address`), ...(autoPromote === true ? { autoPromote } : {}) };
}

function config(v: unknown): Config {
  const o = obj(v, 'config');
  return { members: array(o['members'], 'config.members', WIRE_LIMITS.maxMembers).map(member) };
}

function meta(v: unknown): SnapshotMeta {
  const o = obj(v, 'meta');
  return { index: uint(o['index'], 'meta.index') as LogIndex, term: uint(o['term'], 'meta.term') as Term, config: config(o['config']) };
}

/** Decodes and validates one message. Throws `WireError` with the reason on anything malformed. */
export function decodeMessage(buf: Uint8Array): Message {
  let raw: unknown;
  try {
    raw = packr.unpack(buf);
  } catch (e) {
    fail(`not msgpack: ${e instanceof Error ? e.message : String(e)}`);
  }
  const o = obj(raw, 'message');
  const base = { from: id(o['from'], 'from'), to: id(o['to'], 'to'), term: uint(o['term'], 'term') as Term };
  const type = o['type'];
  switch (type) {
    case 'app': {
      const entries = array(o['entries'], 'entries', WIRE_LIMITS.maxEntriesPerMessage).map(entry);
      return { ...base, type, index: uint(o['index'], 'index') as LogIndex, logTerm: uint(o['logTerm'], 'logTerm') as Term, entries, commit: uint(o['commit'], 'commit') as LogIndex };
    }
    case 'app-resp':
      return {
        ...base,
        type,
        index: uint(o['index'], 'index') as LogIndex,
        reject: bool(o['reject'], 'reject'),
        hintIndex: uint(o['hintIndex'], 'hintIndex') as LogIndex,
        hintTerm: uint(o['hintTerm'], 'hintTerm') as Term,
      };
    case 'vote':
    case 'pre-vote':
      return {
        ...base,
        type,
        lastIndex: uint(o['lastIndex'], 'lastIndex') as LogIndex,
        lastTerm: uint(o['lastTerm'], 'lastTerm') as Term,
        transfer: bool(o['transfer'], 'transfer'),
      };
    case 'vote-resp':
    case 'pre-vote-resp':
      return { ...base, type, reject: bool(o['reject'], 'reject') };
    case 'heartbeat':
      return { ...base, type, commit: uint(o['commit'], 'commit') as LogIndex, readSeq: uint(o['readSeq'], 'readSeq') };
    case 'heartbeat-resp':
      return { ...base, type, readSeq: uint(o['readSeq'], 'readSeq') };
    case 'snap': {
      const totalBytes = uint(o['totalBytes'], 'totalBytes');
      if (totalBytes > WIRE_LIMITS.maxSnapshotBytes) fail(`totalBytes ${totalBytes} is over the limit`);
      const offset = uint(o['offset'], 'offset');
      const chunk = bytes(o['chunk'], 'chunk');
      if (offset + chunk.length > totalBytes) fail('chunk runs past totalBytes');
      return { ...base, type, meta: meta(o['meta']), offset, totalBytes, chunk };
    }
    case 'snap-resp':
      return {
        ...base,
        type,
        snapIndex: uint(o['snapIndex'], 'snapIndex') as LogIndex,
        nextOffset: uint(o['nextOffset'], 'nextOffset'),
        chunkOffset: uint(o['chunkOffset'], 'chunkOffset'),
      };
    case 'timeout-now':
      return { ...base, type };
    case 'read-index':
      return { ...base, type, requestIds: array(o['requestIds'], 'requestIds', WIRE_LIMITS.maxRequestIds).map((x, k) => str(x, `requestIds[${k}]`)) };
    case 'read-index-resp':
      return {
        ...base,
        type,
        requestIds: array(o['requestIds'], 'requestIds', WIRE_LIMITS.maxRequestIds).map((x, k) => str(x, `requestIds[${k}]`)),
        index: uint(o['index'], 'index') as LogIndex,
        reject: bool(o['reject'], 'reject'),
      };
    default:
      return fail(`unknown message type ${JSON.stringify(type)}`);
  }
}

/** msgpack for small structured payloads on the cluster port (results, details, config changes). */
export function packValue(v: unknown): Uint8Array {
  return packr.pack(v);
}

export function unpackValue(b: Uint8Array): unknown {
  return packr.unpack(b);
}
