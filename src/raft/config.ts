import { Packr } from 'msgpackr';
import { AssertionError, CairnError, ErrorCode, type NodeId } from '../base/index.js';
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

/** A node id: a lowercase DNS label (the rule of `nodeId` in src/base and of --node-id). */
const NODE_ID_RE = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;
/** host:port, the host a DNS name, an IPv4 address or a bracketed IPv6 address. */
const ADDRESS_RE = /^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]{1,253}):([0-9]{1,5})$/;

/**
 * The one check of a membership change that comes from outside the core (an operator's HTTP
 * request, a follower's forwarded request, a joining node): a known kind of change, a node id
 * that is a lowercase DNS label, an address that is host:port with a port in 1-65535, no other
 * fields. Returns the change as the core takes it; throws INVALID_ARGUMENT naming what is wrong.
 * Whether the change makes sense for the configuration is the core's business (INVALID_CONFIG_CHANGE).
 */
export function parseConfigChange(v: unknown): ConfigChange {
  const bad = (why: string): CairnError => new CairnError(ErrorCode.INVALID_ARGUMENT, `refused a membership change: ${why}`);
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw bad('it is not an object');
  const o = v as Record<string, unknown>;
  const type = o['type'];
  const allowed =
    type === 'add-learner' ? ['type', 'id', 'address', 'autoPromote'] : type === 'add-voter' ? ['type', 'id', 'address'] : type === 'promote' || type === 'remove' ? ['type', 'id'] : undefined;
  if (allowed === undefined) throw bad(`unknown type ${JSON.stringify(type)} (add-learner, add-voter, promote, remove)`);
  for (const k of Object.keys(o)) if (!allowed.includes(k)) throw bad(`unexpected field ${JSON.stringify(k)} for ${String(type)}`);
  const id = o['id'];
  if (typeof id !== 'string' || !NODE_ID_RE.test(id)) throw bad(`id ${JSON.stringify(id)} is not a node id (a lowercase DNS label of at most 63 characters)`);
  const nid = id as NodeId;
  if (type === 'promote' || type === 'remove') return { type, id: nid };
  const address = o['address'];
  const m = typeof address === 'string' ? ADDRESS_RE.exec(address) : null;
  const port = m ? Number(m[2]) : 0;
  if (typeof address !== 'string' || !m || port < 1 || port > 65535) throw bad(`address ${JSON.stringify(address)} of ${id} is not host:port (port 1-65535)`);
  if (type === 'add-voter') return { type: 'add-voter', id: nid, address };
  const auto = o['autoPromote'];
  if (auto !== undefined && typeof auto !== 'boolean') throw bad('autoPromote must be a boolean');
  return auto === true ? { type: 'add-learner', id: nid, address, autoPromote: true } : { type: 'add-learner', id: nid, address };
}
