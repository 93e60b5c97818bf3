/**
 * Cheap decoding of what watchers receive: only what the benchmark needs (the event kind and
 * its revision) and how many bytes it took. Ten thousand watchers at 200 changes/s would be
 * two million messages a second; decoding each resource would measure the load generator's
 * protobuf and JSON parsers instead of the server.
 */

/** WatchEvent's oneof `event`, by field number (proto/cairn/resource/v1/resource.proto). */
export const EventKind = {
  none: 0,
  change: 3,
  delete: 4,
  tail: 5,
  bookmark: 6,
  newSnapshotToFollow: 7,
  endOfSnapshot: 8,
  /** NDJSON only: the stream's closing error line. */
  error: 100,
} as const;
export type EventKind = (typeof EventKind)[keyof typeof EventKind];

export interface EventHeader {
  readonly kind: EventKind;
  /** The event's revision; 0 when the message has none. */
  readonly revision: number;
}

/** gRPC's length prefix (1 compression flag byte + 4 length bytes) in front of every message. */
export const GRPC_MESSAGE_PREFIX_BYTES = 5;

const KIND_BY_FIELD: ReadonlyMap<number, EventKind> = new Map([
  [3, EventKind.change],
  [4, EventKind.delete],
  [5, EventKind.tail],
  [6, EventKind.bookmark],
  [7, EventKind.newSnapshotToFollow],
  [8, EventKind.endOfSnapshot],
]);

/**
 * The kind and revision of an encoded cairn.resource.v1.WatchEvent, reading only its tags,
 * `watch` (1) and `revision` (2): it stops at the oneof field without looking inside the
 * resource. Fields may come in any order (protobuf allows it); the server writes 1 and 2 first.
 * Throws on bytes that are not a WatchEvent (a truncated field, an unknown wire type).
 */
export function decodeWatchEventHeader(buf: Uint8Array): EventHeader {
  let pos = 0;
  let revision = 0;
  let kind: EventKind = EventKind.none;
  const varint = (): number => {
    let v = 0;
    for (let shift = 0; ; shift += 7) {
      if (pos >= buf.length || shift > 49) throw new Error(`WatchEvent: bad varint at byte ${pos} of ${buf.length}`);
      const b = buf[pos++] as number;
      v += (b & 0x7f) * 2 ** shift;
      if (b < 0x80) return v;
    }
  };
  while (pos < buf.length) {
    const tag = varint();
    const field = Math.floor(tag / 8);
    const wire = tag & 7;
    switch (wire) {
      case 0:
        varint();
        break;
      case 1:
        pos += 8;
        break;
      case 5:
        pos += 4;
        break;
      case 2: {
        const len = varint();
        if (pos + len > buf.length) throw new Error(`WatchEvent: field ${field} runs past the end (${pos + len} > ${buf.length})`);
        if (field === 2) {
          revision = 0;
          for (let i = pos; i < pos + len; i++) revision = revision * 10 + ((buf[i] as number) - 48);
        } else {
          const k = KIND_BY_FIELD.get(field);
          if (k !== undefined) kind = k;
        }
        pos += len;
        break;
      }
      default:
        throw new Error(`WatchEvent: unsupported wire type ${wire} (field ${field})`);
    }
    // The oneof is written last; once both are known the rest need not be read.
    if (kind !== EventKind.none && revision !== 0) break;
  }
  return { kind, revision };
}

/**
 * One message a watcher received, as far as the benchmark reads it, whatever the system: the
 * revisions of the changes it carries (one per Cairn WatchEvent; one or more per etcd
 * WatchResponse, whose watcher's changes can queue up into one message) and what else it was.
 */
export interface WatchMessage {
  /** Bytes on the wire: the message plus gRPC's 5-byte prefix. */
  readonly bytes: number;
  /** Revisions of the change and delete events it carries, in order (often empty or one). */
  readonly changes: readonly number[];
  readonly bookmark: boolean;
  /** etcd: the answer to the watch's create request (the watcher is registered). */
  readonly created: boolean;
  /** etcd: the server canceled the watch (compaction, or an error); the stream carries no more of it. */
  readonly canceled: boolean;
}

const NO_CHANGES: readonly number[] = [];

/** A Cairn WatchList message (a cairn.resource.v1.WatchEvent) as a WatchMessage. */
export function decodeCairnWatchMessage(buf: Uint8Array): WatchMessage {
  const h = decodeWatchEventHeader(buf);
  const change = h.kind === EventKind.change || h.kind === EventKind.delete;
  return { bytes: buf.length + GRPC_MESSAGE_PREFIX_BYTES, changes: change ? [h.revision] : NO_CHANGES, bookmark: h.kind === EventKind.bookmark, created: false, canceled: false };
}

/**
 * A Cairn WatchListBatched message (a cairn.resource.v1.WatchEventBatch: WatchEvents as field
 * 1) as one WatchMessage: the revisions of every change and delete it carries, in order.
 * Throws on bytes that are not a WatchEventBatch.
 */
export function decodeCairnWatchBatch(buf: Uint8Array): WatchMessage {
  let pos = 0;
  let changes: number[] | undefined;
  let bookmark = false;
  while (pos < buf.length) {
    if (buf[pos] !== 0x0a) throw new Error(`WatchEventBatch: unexpected tag ${buf[pos]} at byte ${pos}`);
    pos++;
    let len = 0;
    for (let shift = 0; ; shift += 7) {
      if (pos >= buf.length || shift > 28) throw new Error(`WatchEventBatch: bad length at byte ${pos} of ${buf.length}`);
      const b = buf[pos++] as number;
      len += (b & 0x7f) * 2 ** shift;
      if (b < 0x80) break;
    }
    if (pos + len > buf.length) throw new Error(`WatchEventBatch: event runs past the end (${pos + len} > ${buf.length})`);
    const h = decodeWatchEventHeader(buf.subarray(pos, pos + len));
    if (h.kind === EventKind.change || h.kind === EventKind.delete) (changes ??= []).push(h.revision);
    else if (h.kind === EventKind.bookmark) bookmark = true;
    pos += len;
  }
  return { bytes: buf.length + GRPC_MESSAGE_PREFIX_BYTES, changes: changes ?? NO_CHANGES, bookmark, created: false, canceled: false };
}

const NDJSON_HEAD = /^\{"type":"([a-z_]+)"(?:,"watch":\d+)?,"revision":"(\d+)"/;
const NDJSON_KIND: Readonly<Record<string, EventKind>> = {
  change: EventKind.change,
  delete: EventKind.delete,
  tail: EventKind.tail,
  bookmark: EventKind.bookmark,
  error: EventKind.error,
};

/** The kind and revision of one line of `POST /v1/watch` (API.md "Watch"), read from its head only. */
export function decodeNdjsonHeader(line: string): EventHeader {
  const m = NDJSON_HEAD.exec(line.length > 96 ? line.slice(0, 96) : line);
  if (m === null) {
    if (line.startsWith('{"type":"error"')) return { kind: EventKind.error, revision: 0 };
    throw new Error(`watch line not understood: ${line.slice(0, 80)}`);
  }
  return { kind: NDJSON_KIND[m[1] as string] ?? EventKind.none, revision: Number(m[2]) };
}

/**
 * Splits a byte stream into lines. Watch lines are ASCII apart from user data; bytes are
 * counted on the raw chunks, so a multi-byte character split between chunks costs nothing here.
 */
export class LineSplitter {
  private rest = '';

  /** The complete lines in `chunk` (plus what was left from before), without their newlines. */
  push(chunk: string): string[] {
    const text = this.rest + chunk;
    const lines = text.split('\n');
    this.rest = lines.pop() ?? '';
    return lines;
  }
}
