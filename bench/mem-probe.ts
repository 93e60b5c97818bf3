/**
 * A `node --import` preload that writes the process's memory figures to a file every second
 * (issue 18, item 1; bench/README.md "mem-load and heap-summary"). Nothing in src/ loads it:
 *
 *   MEM_PROBE_DIR=/tmp/probe node --import ./dist/bench/mem-probe.js bin/cairn agent ...
 *
 * writes $MEM_PROBE_DIR/<pid>.json: process.memoryUsage() (rss, heapTotal, heapUsed, external,
 * arrayBuffers), v8.getHeapStatistics() and the used/committed size of each V8 heap space.
 * prom-client's default metrics (the node's /metrics) have the heap and external figures but
 * not arrayBuffers nor the committed size per space, which is what tells the young
 * generation's reserve (semi-spaces) from the old generation.
 */
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import v8 from 'node:v8';

const dir = process.env['MEM_PROBE_DIR'];
if (dir !== undefined && dir !== '') {
  mkdirSync(dir, { recursive: true });
  const file = path.join(dir, `${process.pid}.json`);
  const write = (): void => {
    const sample = {
      pid: process.pid,
      atMs: Date.now(),
      argv: process.argv.slice(1),
      memoryUsage: process.memoryUsage(),
      heap: v8.getHeapStatistics(),
      spaces: v8.getHeapSpaceStatistics().map((s) => ({ space: s.space_name, size: s.space_size, used: s.space_used_size, available: s.space_available_size, physical: s.physical_space_size })),
    };
    // Written aside and renamed, so a reader never sees half a file.
    writeFileSync(`${file}.tmp`, JSON.stringify(sample));
    renameSync(`${file}.tmp`, file);
  };
  write();
  setInterval(write, 1_000).unref();
}
