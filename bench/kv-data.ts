/**
 * The side-by-side benchmark's data set, shared by the load generator (bench/systems.ts) and
 * the fan-out phase's writer process (bench/fanout/writer-main.ts): 1,000 keys, 256-byte values.
 */
export const KEY_COUNT = 1000;
export const VALUE_BYTES = 256;

/** A 256-byte ASCII value that differs per writer and write. */
export function makeValue(worker: number, seq: number): string {
  const head = `w${worker}-s${seq}-`;
  return head + 'v'.repeat(VALUE_BYTES - head.length);
}

export const keyName = (k: number): string => `key-${String(k).padStart(6, '0')}`;

/** etcd's key for key k: `/bench/key-000000`.. */
export const etcdKey = (k: number): string => `/bench/${keyName(k)}`;

/** A watcher of this etcd prefix sees every key (and not the failover probe, `/bench/failover-probe`). */
export const ETCD_KEY_PREFIX = '/bench/key-';

/** Cairn: demo.v1.Album resources named key-000000.. in this namespace; the value is the `title`. */
export const CAIRN_TYPE = 'demo.v1.Album';
export const CAIRN_NAMESPACE = 'bench';
