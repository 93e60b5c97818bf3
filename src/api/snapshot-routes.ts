import { crc32 } from 'node:zlib';
import { ulid } from './ids.js';
import { CairnError, ErrorCode, type Clock } from '../base/index.js';
import { CommandType } from '../fsm/index.js';
import type { Coordinator } from '../replica/index.js';
import type { Router } from './http-server.js';
import { SNAPSHOT_TARGET, type AclTarget } from '../auth/index.js';

/** Snapshots as an authorization target: save and restore are `admin` only. */
const SNAPSHOT: AclTarget = { ...SNAPSHOT_TARGET, partition: '', namespace: '', name: '' };
import { START_WAIT_DEFAULT_MS, type ServedNode } from './served-node.js';

/**
 * Save and restore a point-in-time snapshot of the whole store (API.md "Cluster and
 * operations"). The file: 8-byte magic `CAIRNSV1`, the FSM snapshot frames, then a 4-byte
 * big-endian crc32 of the frames. Restore is committed through Raft as one log entry, so
 * every replica replaces its store at the same index; watchers are reset.
 */
export const SNAPSHOT_MAGIC = Buffer.from('CAIRNSV1', 'ascii');

/** A restore travels as one log entry and one gRPC message (64 MiB): keep well under. */
export const MAX_RESTORE_BYTES = 48 * 1024 * 1024;

export function addSnapshotRoutes(router: Router, node: Pick<ServedNode, 'coordinator'>, clock: Clock): void {
  // A request that arrives while the node starts waits for it (starting is not failing).
  const serving = (): Promise<Coordinator> => node.coordinator(START_WAIT_DEFAULT_MS);

  router.add('GET', '/v1/snapshot', async (_req, res) => {
    const view = await (await serving()).snapshot();
    res.writeHead(200, { 'content-type': 'application/octet-stream', 'cairn-snapshot-index': String(view.index) });
    res.write(SNAPSHOT_MAGIC);
    let crc = 0;
    for (const chunk of view.chunks()) {
      crc = crc32(chunk, crc);
      if (!res.write(chunk)) await new Promise<void>((resolve) => res.once('drain', resolve));
    }
    const trailer = Buffer.alloc(4);
    trailer.writeUInt32BE(crc >>> 0);
    res.end(trailer);
    return { status: 'streamed' };
  }, { access: { verb: 'admin', target: SNAPSHOT }, audit: 'snapshot.save' });

  router.add(
    'PUT',
    '/v1/snapshot',
    async (req) => {
      const b = req.body;
      if (b.length < SNAPSHOT_MAGIC.length + 4 || !b.subarray(0, SNAPSHOT_MAGIC.length).equals(SNAPSHOT_MAGIC)) {
        throw new CairnError(ErrorCode.INVALID_ARGUMENT, 'the body is not a Cairn snapshot (bad magic); save one with GET /v1/snapshot');
      }
      const frames = b.subarray(SNAPSHOT_MAGIC.length, b.length - 4);
      const want = b.readUInt32BE(b.length - 4);
      if ((crc32(frames) >>> 0) !== want) throw new CairnError(ErrorCode.INVALID_ARGUMENT, 'the snapshot fails its checksum: it is truncated or corrupt');
      const result = await (await serving()).propose(CommandType.Restore, {
        requestId: ulid(),
        time: new Date(clock.nowMs()).toISOString(),
        uid: ulid(),
        generation: ulid(),
        snapshot: frames,
      });
      if (!result.ok) throw new CairnError(ErrorCode.INVALID_ARGUMENT, `the snapshot could not be restored: ${result.error.message}`);
      if (result.kind !== 'restore') throw new CairnError(ErrorCode.INTERNAL, `unexpected ${result.kind} result for a restore`);
      return { status: 200, json: { restored: true, revision: String(result.revision), resources: result.resources } };
    },
    // The file as saved (GET /v1/snapshot answers this type; `cairn snapshot restore` sends it).
    { maxBodyBytes: MAX_RESTORE_BYTES, contentType: 'application/octet-stream', access: { verb: 'admin', target: SNAPSHOT }, audit: 'snapshot.restore' },
  );
}
