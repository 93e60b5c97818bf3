import { AssertionError, type LogIndex } from '../base/index.js';
import { packBody, unpackBody } from './envelope.js';

/**
 * FSM snapshot framing: a sequence of frames, each a 4-byte big-endian length then that many
 * bytes. Frame 0 is the FSM header (msgpack: format, index, de-duplication window); the rest
 * are the store's own chunks, passed through untouched.
 */
export interface SnapshotHeader {
  readonly format: 1;
  readonly index: LogIndex;
  /** [request id, result, entry bytes?] (the size is absent in snapshots written before it was kept). */
  readonly dedupe: ReadonlyArray<readonly [string, unknown, unknown?]>;
  /**
   * The raised state-machine alarms (`['NO_SPACE']` or `[]`). Absent in snapshots written
   * before alarms existed: none raised. Older readers ignore the field (the format stays 1).
   */
  readonly alarms?: readonly string[];
  /**
   * The lease table (docs/api.md "Leases"): [lease id, granted TTL in seconds, revision of the
   * grant], in id order.
   * Which resources are attached is in the resources themselves (the store's `lease` field).
   * Absent in snapshots written before leases existed: no leases. An older reader would ignore
   * it, but it also cannot read a resource attached to a lease (a 16-field tuple), so it stops.
   */
  readonly leases?: ReadonlyArray<readonly [string, number, number]>;
}

function frame(bytes: Uint8Array): Uint8Array {
  const out = new Uint8Array(bytes.length + 4);
  new DataView(out.buffer).setUint32(0, bytes.length);
  out.set(bytes, 4);
  return out;
}

export function* writeSnapshotFrames(header: SnapshotHeader, bodies: Iterable<Uint8Array>): Generator<Uint8Array> {
  yield frame(packBody(header));
  for (const b of bodies) yield frame(b);
}

export function readSnapshotFrames(data: Uint8Array): { header: SnapshotHeader; bodies: Uint8Array[] } {
  const frames: Uint8Array[] = [];
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  let pos = 0;
  while (pos < data.length) {
    if (pos + 4 > data.length) throw new AssertionError(`snapshot data is truncated at byte ${pos}`);
    const len = view.getUint32(pos);
    if (pos + 4 + len > data.length) throw new AssertionError(`snapshot frame at byte ${pos} runs past the end`);
    frames.push(data.subarray(pos + 4, pos + 4 + len));
    pos += 4 + len;
  }
  const first = frames.shift();
  if (!first) throw new AssertionError('snapshot data is empty');
  const h = unpackBody(first) as Partial<SnapshotHeader> | null;
  if (!h || h.format !== 1 || typeof h.index !== 'number' || !Array.isArray(h.dedupe)) {
    throw new AssertionError('snapshot header is malformed or of an unknown format');
  }
  return { header: h as SnapshotHeader, bodies: frames };
}
