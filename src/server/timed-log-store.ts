import type { LogIndex } from '../base/index.js';
import type { Metrics } from '../api/index.js';
import type { LoadedLog, LogStore } from '../replica/index.js';

export interface TimedLogStoreOptions {
  /**
   * The store reports the duration of each of its fsyncs itself (WalLogStore's `onSync`, wired
   * to `fsyncSeconds`): then every batch is timed as an append, until durable (queueing for the
   * writer included). Otherwise (LevelLogStore, whose fsync happens inside LevelDB) a synced
   * batch's whole time is the fsync figure and only unsynced batches count as appends.
   */
  readonly storeReportsSyncs: boolean;
}

/** Times each log batch for the append and fsync latency metrics. */
export class TimedLogStore implements LogStore {
  constructor(
    private readonly inner: LogStore,
    private readonly metrics: Metrics,
    private readonly options: TimedLogStoreOptions = { storeReportsSyncs: false },
  ) {}

  load(afterIndex: LogIndex): Promise<LoadedLog> {
    return this.inner.load(afterIndex);
  }

  async append(batch: Parameters<LogStore['append']>[0]): Promise<void> {
    const histogram = batch.sync && !this.options.storeReportsSyncs ? this.metrics.fsyncSeconds : this.metrics.appendSeconds;
    const end = histogram.startTimer();
    try {
      await this.inner.append(batch);
    } finally {
      end();
    }
  }

  compact(index: LogIndex): Promise<void> {
    return this.inner.compact(index);
  }

  close(): Promise<void> {
    return this.inner.close();
  }
}
