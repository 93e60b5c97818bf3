import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { decodeBatch, parseSegmentName, readRecord, RecordType, WAL_DIR } from '../wal-format.js';

/** One intact record of a WAL segment, as found on disk (test support for damage tests). */
export interface WalRecord {
  readonly file: string;
  readonly seq: number;
  /** File offset of the record's length field. */
  readonly offset: number;
  /** Bytes that mean something: the 8-byte header, the type byte and the payload (no padding). */
  readonly length: number;
  readonly type: 'segment' | 'batch';
  /** For batches: the entries' index range (count 0 without entries) and whether it holds a hard state. */
  readonly firstIndex: number;
  readonly count: number;
  readonly hasHardState: boolean;
  /** The commit index of the record's hard state (every batch carries the newest one). */
  readonly commit: number | undefined;
}

/** The segment files of `<dataDir>/wal`, in log order. */
export async function walSegments(dataDir: string): Promise<string[]> {
  const dir = path.join(dataDir, WAL_DIR);
  return (await readdir(dir))
    .filter((n) => parseSegmentName(n) !== undefined)
    .sort()
    .map((n) => path.join(dir, n));
}

/** Every intact record of every segment, in log order, up to each segment's end or first damage. */
export async function walRecords(dataDir: string): Promise<WalRecord[]> {
  const out: WalRecord[] = [];
  for (const file of await walSegments(dataDir)) {
    const seq = parseSegmentName(path.basename(file))?.seq ?? -1;
    const buf = await readFile(file);
    let off = 0;
    for (;;) {
      const r = readRecord(buf, off, seq);
      if (r.kind !== 'record') break;
      const batch = r.type === RecordType.batch ? decodeBatch(r.body, { keepFrom: Number.POSITIVE_INFINITY }) : undefined;
      out.push({
        file,
        seq,
        offset: off,
        length: 8 + r.body.length,
        type: r.type === RecordType.batch ? 'batch' : 'segment',
        firstIndex: batch?.ok ? batch.value.firstIndex : 0,
        count: batch?.ok ? batch.value.count : 0,
        hasHardState: batch?.ok === true && batch.value.hardState !== undefined,
        commit: batch?.ok === true ? batch.value.hardState?.commit : undefined,
      });
      off = r.next;
    }
  }
  return out;
}

/** The last record that wrote entry `index` (the one a load uses). */
export async function walRecordOf(dataDir: string, index: number): Promise<WalRecord> {
  const holding = (await walRecords(dataDir)).filter((r) => r.count > 0 && r.firstIndex <= index && index < r.firstIndex + r.count);
  const last = holding[holding.length - 1];
  if (last === undefined) throw new Error(`no WAL record holds entry ${index} in ${dataDir}`);
  return last;
}
