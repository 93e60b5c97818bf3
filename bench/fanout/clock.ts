/**
 * The clock every process of a run shares: CLOCK_MONOTONIC through process.hrtime, which is
 * system-wide on Linux, so a send time taken in the writer process and a receive time taken in
 * the watcher process can be subtracted. (performance.now() counts from each process's own
 * start, and Date.now() has whole milliseconds and can step.)
 */
export function monoMs(): number {
  return Number(process.hrtime.bigint()) / 1e6;
}
