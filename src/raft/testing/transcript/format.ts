import { NO_NODE, assertNever } from '../../../base/index.js';
import { decodeConfigEntry, learners, voters } from '../../config.js';
import { TEST_COMMAND, decodeCommand } from '../cluster.js';
import { EntryType, type Config, type ConfigEntryBody, type Entry, type Message, type Ready, type SnapshotMeta } from '../../types.js';

/**
 * How transcripts print things. Compact and stable (after etcd raft's `raft.DescribeMessage`):
 * terms and indexes as `term/index`, node ids as written (`n1`), `none` for no node.
 */

export function node(id: string): string {
  return id === NO_NODE ? 'none' : id;
}

export function config(c: Config): string {
  const l = learners(c);
  return `voters=(${voters(c).join(' ')})${l.length > 0 ? ` learners=(${l.join(' ')})` : ''}`;
}

function change(c: ConfigEntryBody['change']): string {
  switch (c.type) {
    case 'bootstrap':
      return 'bootstrap';
    case 'add-learner':
    case 'add-voter':
    case 'promote':
    case 'remove':
      return `${c.type} ${c.id}`;
    default:
      return assertNever(c, 'config change');
  }
}

/** `2/4 cmd "x"`, `2/3 noop`, `2/5 conf add-learner n4`. */
export function entry(e: Entry): string {
  return `${e.term}/${e.index} ${entryBody(e.data)}`;
}

function entryBody(data: Uint8Array): string {
  const type = data[0];
  if (type === EntryType.Noop) return 'noop';
  if (type === EntryType.Config) return `conf ${change(decodeConfigEntry(data).change)}`;
  if (type === TEST_COMMAND) return `cmd ${JSON.stringify(decodeCommand(data))}`;
  return `type 0x${(type ?? 0).toString(16).padStart(2, '0')} (${data.length} bytes)`;
}

export function snapshotMeta(m: SnapshotMeta): string {
  return `${m.term}/${m.index} ${config(m.config)}`;
}

const MSG_NAMES: Record<Message['type'], string> = {
  app: 'MsgApp',
  'app-resp': 'MsgAppResp',
  vote: 'MsgVote',
  'vote-resp': 'MsgVoteResp',
  'pre-vote': 'MsgPreVote',
  'pre-vote-resp': 'MsgPreVoteResp',
  heartbeat: 'MsgHeartbeat',
  'heartbeat-resp': 'MsgHeartbeatResp',
  snap: 'MsgSnap',
  'snap-resp': 'MsgSnapResp',
  'timeout-now': 'MsgTimeoutNow',
  'read-index': 'MsgReadIndex',
  'read-index-resp': 'MsgReadIndexResp',
};

/** Accepts `app` or `MsgApp` (case-insensitive); undefined when it names no message type. */
export function parseMessageType(s: string): Message['type'] | undefined {
  const lower = s.toLowerCase();
  for (const [type, name] of Object.entries(MSG_NAMES) as Array<[Message['type'], string]>) {
    if (type === lower || name.toLowerCase() === lower) return type;
  }
  return undefined;
}

/** `n1->n2 MsgApp Term:2 Log:1/3 Commit:3 Entries:[2/4 cmd "x"]`. */
export function message(m: Message): string {
  const head = `${m.from}->${m.to} ${MSG_NAMES[m.type]} Term:${m.term}`;
  switch (m.type) {
    case 'app': {
      const ents = m.entries.length > 0 ? ` Entries:[${m.entries.map(entry).join(', ')}]` : '';
      return `${head} Log:${m.logTerm}/${m.index} Commit:${m.commit}${ents}`;
    }
    case 'app-resp':
      return `${head} Index:${m.index}${m.reject ? ` Rejected Hint:${m.hintTerm}/${m.hintIndex}` : ''}`;
    case 'vote':
    case 'pre-vote':
      return `${head} Log:${m.lastTerm}/${m.lastIndex}${m.transfer ? ' Transfer' : ''}`;
    case 'vote-resp':
    case 'pre-vote-resp':
      return `${head}${m.reject ? ' Rejected' : ''}`;
    case 'heartbeat':
      return `${head} Commit:${m.commit}${m.readSeq > 0 ? ` ReadSeq:${m.readSeq}` : ''}`;
    case 'heartbeat-resp':
      return `${head}${m.readSeq > 0 ? ` ReadSeq:${m.readSeq}` : ''}`;
    case 'snap':
      return `${head} Snapshot:${m.meta.term}/${m.meta.index} Bytes:[${m.offset},${m.offset + m.chunk.length}) of ${m.totalBytes}`;
    case 'snap-resp':
      return `${head} Snapshot:${m.snapIndex} Next:${m.nextOffset}`;
    case 'timeout-now':
      return head;
    case 'read-index':
      return `${head} Reqs:[${m.requestIds.join(',')}]`;
    case 'read-index-resp':
      return `${head} Reqs:[${m.requestIds.join(',')}]${m.reject ? ' Rejected' : ` Index:${m.index}`}`;
    default:
      return assertNever(m, 'message');
  }
}

/** A Ready, section by section (etcd `DescribeReady`); empty sections are left out. */
export function ready(rd: Ready): string[] {
  const out = [`Ready MustSync=${String(rd.mustSync)}:`];
  if (rd.softState) out.push(`Lead:${node(rd.softState.leader)} State:${rd.softState.role}`);
  if (rd.hardState) out.push(`HardState Term:${rd.hardState.term} Vote:${node(rd.hardState.vote)} Commit:${rd.hardState.commit}`);
  if (rd.snapshot) out.push(`Snapshot ${snapshotMeta(rd.snapshot.meta)} (${rd.snapshot.data.length} bytes)`);
  if (rd.entries.length > 0) out.push('Entries:', ...rd.entries.map(entry));
  if (rd.committedEntries.length > 0) out.push('CommittedEntries:', ...rd.committedEntries.map(entry));
  if (rd.messages.length > 0) out.push('Messages:', ...rd.messages.map(message));
  if (rd.readStates.length > 0) out.push('ReadStates:', ...rd.readStates.map((r) => `${r.requestId} at index ${r.index}`));
  if (rd.readFailures.length > 0) out.push('ReadFailures:', ...rd.readFailures.map((r) => `${r.requestId}: ${r.reason}`));
  return out;
}
