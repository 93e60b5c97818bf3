import { Packr } from 'msgpackr';
import { AssertionError, type NodeId } from '../base/index.js';
import { EntryType, type Config, type ConfigChange, type ConfigEntryBody, type Member } from './types.js';

// Plain msgpack: no records extension, so any msgpack reader can decode envelope bodies.
const packr = new Packr({ useRecords: false, mapsAsObjects: true, moreTypes: false });

export const EMPTY_CONFIG: Config = { members: [] };

export function voters(config: Config): NodeId[] {
  return config.members.filter((m) => m.suffrage === 'voter').map((m) => m.id);
}

export function learners(config: Config): NodeId[] {
  return config.members.filter((m) => m.suffrage === 'learner').map((m) => m.id);
}

export function memberOf(config: Config, id: NodeId): Member | undefined {
  return config.members.find((m) => m.id === id);
}

export function isVoter(config: Config, id: NodeId): boolean {
  return memberOf(config, id)?.suffrage === 'voter';
}

export function makeConfig(members: readonly Member[]): Config {
  const sorted = [...members].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  for (let i = 1; i < sorted.length; i++) {
    if (sorted[i]?.id === sorted[i - 1]?.id) throw new AssertionError(`duplicate member ${String(sorted[i]?.id)} in config`);
  }
  return { members: sorted };
}

/**
 * Applies one single-server change (thesis §4.1), or says why it is not allowed.
 * Removing the last voter is refused: a cluster without voters can never commit again.
 */
export function applyConfigChange(config: Config, change: ConfigChange): Config | string {
  const existing = memberOf(config, change.id);
  switch (change.type) {
    case 'add-learner':
    case 'add-voter': {
      if (existing) return `node ${change.id} is already a ${existing.suffrage}`;
      const suffrage = change.type === 'add-voter' ? 'voter' : 'learner';
      const autoPromote = change.type === 'add-learner' && change.autoPromote === true;
      return makeConfig([...config.members, { id: change.id, suffrage, address: change.address, ...(autoPromote ? { autoPromote } : {}) }]);
    }
    case 'promote': {
      if (!existing) return `node ${change.id} is not a member`;
      if (existing.suffrage === 'voter') return `node ${change.id} is already a voter`;
      return makeConfig(config.members.map((m) => (m.id === change.id ? { id: m.id, address: m.address, suffrage: 'voter' as const } : m)));
    }
    case 'remove': {
      if (!existing) return `node ${change.id} is not a member`;
      const next = makeConfig(config.members.filter((m) => m.id !== change.id));
      if (voters(next).length === 0) return `removing ${change.id} would leave no voters`;
      return next;
    }
  }
}

export function encodeConfigEntry(body: ConfigEntryBody): Uint8Array {
  const packed = packr.pack(body);
  const out = new Uint8Array(packed.length + 1);
  out[0] = EntryType.Config;
  out.set(packed, 1);
  return out;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function decodeMember(v: unknown): Member {
  if (!isRecord(v) || typeof v['id'] !== 'string' || typeof v['address'] !== 'string') {
    throw new AssertionError('config entry has a malformed member');
  }
  const suffrage = v['suffrage'];
  if (suffrage !== 'voter' && suffrage !== 'learner') throw new AssertionError('config entry has a bad suffrage');
  return { id: v['id'] as NodeId, suffrage, address: v['address'], ...(v['autoPromote'] === true ? { autoPromote: true } : {}) };
}

/**
 * Decodes a config entry from our own log. A malformed one means the log is corrupt (the
 * log store checksums entries), so it is an assertion, not a recoverable error.
 */
export function decodeConfigEntry(data: Uint8Array): ConfigEntryBody {
  if (data[0] !== EntryType.Config) throw new AssertionError(`entry type ${String(data[0])} is not a config entry`);
  const v: unknown = packr.unpack(data.subarray(1));
  if (!isRecord(v) || !isRecord(v['change']) || !isRecord(v['config']) || !Array.isArray(v['config']['members'])) {
    throw new AssertionError('config entry body is malformed');
  }
  const config = makeConfig((v['config']['members'] as unknown[]).map(decodeMember));
  const c = v['change'];
  const id = c['id'] as NodeId;
  let change: ConfigEntryBody['change'];
  switch (c['type']) {
    case 'bootstrap':
      change = { type: 'bootstrap' };
      break;
    case 'add-learner':
      change = { type: c['type'], id, address: String(c['address']), ...(c['autoPromote'] === true ? { autoPromote: true } : {}) };
      break;
    case 'add-voter':
      change = { type: c['type'], id, address: String(c['address']) };
      break;
    case 'promote':
    case 'remove':
      change = { type: c['type'], id };
      break;
    default:
      throw new AssertionError(`config entry has an unknown change type ${String(c['type'])}`);
  }
  return { change, config };
}

export const NOOP_ENTRY_DATA: Uint8Array = Uint8Array.of(EntryType.Noop, 0xc0 /* msgpack nil */);

export function describeConfig(config: Config): string {
  return config.members.map((m) => (m.suffrage === 'voter' ? m.id : `${m.id}(learner)`)).join(',');
}
