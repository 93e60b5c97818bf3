import type { LogIndex } from '../base/index.js';
import type { Metrics } from '../api/index.js';
import type { LoadedLog, LogStore } from '../replica/index.js';

/** Times each log batch for the append and fsync latency metrics. */
export class TimedLogStore implements LogStore {
  constructor(
    private readonly inner: LogStore,
    private readonly metrics: Metrics,
  ) {}

  load(afterIndex: LogIndex): Promise<LoadedLog> {
    return this.inner.load(afterIndex);
  }

  async append(batch: Parameters<LogStore['append']>[0]): Promise<void> {
    const end = (batch.sync ? this.metrics.fsyncSeconds : this.metrics.appendSeconds).startTimer();
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
