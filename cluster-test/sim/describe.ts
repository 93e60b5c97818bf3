/** Compact one-line descriptions of messages and Readies for the event log. */
import { assertNever, type Entry, type Message, type Ready } from './raft.js';

function span(entries: readonly Entry[]): string {
  const first = entries[0];
  const last = entries[entries.length - 1];
  if (first === undefined || last === undefined) return '-';
  return first.index === last.index ? `${first.index}` : `${first.index}..${last.index}`;
}

export function describeMessage(m: Message): string {
  switch (m.type) {
    case 'app':
      return `app t${m.term} prev ${m.index}/${m.logTerm} ents ${span(m.entries)} c${m.commit}`;
    case 'app-resp':
      return m.reject ? `app-resp t${m.term} reject ${m.index} hint ${m.hintIndex}/${m.hintTerm}` : `app-resp t${m.term} ok ${m.index}`;
    case 'vote':
    case 'pre-vote':
      return `${m.type} t${m.term} last ${m.lastIndex}/${m.lastTerm}${m.transfer ? ' transfer' : ''}`;
    case 'vote-resp':
    case 'pre-vote-resp':
      return `${m.type} t${m.term} ${m.reject ? 'reject' : 'grant'}`;
    case 'heartbeat':
      return `hb t${m.term} c${m.commit} rs${m.readSeq}`;
    case 'heartbeat-resp':
      return `hb-resp t${m.term} rs${m.readSeq}`;
    case 'snap':
      return `snap t${m.term} i${m.meta.index}/${m.meta.term} off ${m.offset}+${m.chunk.length}/${m.totalBytes}`;
    case 'snap-resp':
      return `snap-resp t${m.term} i${m.snapIndex} next ${m.nextOffset}`;
    case 'timeout-now':
      return `timeout-now t${m.term}`;
    case 'read-index':
      return `read-index t${m.term} [${m.requestIds.join(',')}]`;
    case 'read-index-resp':
      return `read-index-resp t${m.term} ${m.reject ? 'reject' : `i${m.index}`} [${m.requestIds.join(',')}]`;
    default:
      return assertNever(m, 'message');
  }
}

export function describeReady(rd: Ready): string {
  const parts: string[] = ['ready'];
  if (rd.softState !== undefined) parts.push(`role ${rd.softState.role}`);
  if (rd.hardState !== undefined) parts.push(`hs t${rd.hardState.term} v${rd.hardState.vote || '-'} c${rd.hardState.commit}`);
  if (rd.snapshot !== undefined) parts.push(`snap i${rd.snapshot.meta.index}/${rd.snapshot.meta.term}`);
  if (rd.entries.length > 0) parts.push(`ents ${span(rd.entries)}`);
  if (rd.committedEntries.length > 0) parts.push(`apply ${span(rd.committedEntries)}`);
  if (rd.messages.length > 0) parts.push(`msgs ${rd.messages.length}`);
  if (rd.readStates.length > 0) parts.push(`reads ${rd.readStates.map((r) => `${r.requestId}@${r.index}`).join(',')}`);
  if (rd.readFailures.length > 0) parts.push(`read-fail ${rd.readFailures.map((r) => `${r.requestId}:${r.reason}`).join(',')}`);
  if (rd.mustSync) parts.push('sync');
  return parts.join(' ');
}
