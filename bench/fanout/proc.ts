/**
 * What the benchmark reads about the server process from outside: CPU time and resident
 * memory from /proc (Linux), heap and watch gauges from the node's /metrics.
 */
import { spawnSync } from 'node:child_process';
import { readdir, readFile } from 'node:fs/promises';

export interface ProcCpu {
  /** User plus system CPU time of the process, in clock ticks. */
  readonly ticks: number;
}

/** utime + stime from the text of /proc/<pid>/stat (fields 14 and 15, counted after the parenthesized command name, which may hold spaces). */
export function parseProcStat(text: string): ProcCpu {
  const close = text.lastIndexOf(')');
  if (close < 0) throw new Error(`/proc stat not understood: ${text.slice(0, 80)}`);
  // After ") " the fields start at field 3 (state).
  const f = text.slice(close + 2).trim().split(/\s+/);
  const utime = Number(f[14 - 3]);
  const stime = Number(f[15 - 3]);
  if (!Number.isFinite(utime) || !Number.isFinite(stime)) throw new Error(`/proc stat has no utime/stime: ${text.slice(0, 120)}`);
  return { ticks: utime + stime };
}

export interface ProcMemory {
  /** VmRSS: resident set now. */
  readonly rssBytes: number;
  /** VmHWM: the resident set's peak since the process started. */
  readonly peakRssBytes: number;
}

/** VmRSS and VmHWM from the text of /proc/<pid>/status (reported in kB). */
export function parseProcStatus(text: string): ProcMemory {
  const kb = (key: string): number => {
    const m = new RegExp(`^${key}:\\s+(\\d+)\\s+kB`, 'm').exec(text);
    if (m === null) throw new Error(`/proc status has no ${key}`);
    return Number(m[1]) * 1024;
  };
  return { rssBytes: kb('VmRSS'), peakRssBytes: kb('VmHWM') };
}

export interface SchedStat {
  /** Time the thread ran on a CPU (ns). */
  readonly runNs: number;
  /** Time it was runnable but waited for a CPU (ns): other work taking the CPUs. */
  readonly waitNs: number;
}

/** The text of /proc/<pid>/schedstat: "<run ns> <run-queue wait ns> <timeslices>" (the process's main thread). */
export function parseSchedStat(text: string): SchedStat {
  const [run, wait] = text.trim().split(/\s+/).map(Number);
  if (run === undefined || wait === undefined || !Number.isFinite(run) || !Number.isFinite(wait)) throw new Error(`/proc schedstat not understood: ${text.slice(0, 80)}`);
  return { runNs: run, waitNs: wait };
}

/** Scheduler statistics of a process's main thread (for Node, the JavaScript thread); undefined where /proc has none. */
export async function readSchedStat(pid: number | 'self'): Promise<SchedStat | undefined> {
  try {
    return parseSchedStat(await readFile(`/proc/${pid}/schedstat`, 'utf8'));
  } catch {
    return undefined;
  }
}

/**
 * Scheduler statistics summed over every thread of a process (/proc/<pid>/task/<tid>/schedstat):
 * for a Go server such as etcd, whose work runs on many threads, the main thread's alone says
 * little. Threads that exit between two samples take their share with them. Undefined where /proc
 * has none.
 */
export async function readSchedStatAllThreads(pid: number): Promise<SchedStat | undefined> {
  try {
    const tids = await readdir(`/proc/${pid}/task`);
    let runNs = 0;
    let waitNs = 0;
    for (const tid of tids) {
      try {
        const s = parseSchedStat(await readFile(`/proc/${pid}/task/${tid}/schedstat`, 'utf8'));
        runNs += s.runNs;
        waitNs += s.waitNs;
      } catch {
        // the thread exited meanwhile
      }
    }
    return { runNs, waitNs };
  } catch {
    return undefined;
  }
}

export async function readProcCpu(pid: number): Promise<ProcCpu> {
  return parseProcStat(await readFile(`/proc/${pid}/stat`, 'utf8'));
}

export async function readProcMemory(pid: number): Promise<ProcMemory> {
  return parseProcStatus(await readFile(`/proc/${pid}/status`, 'utf8'));
}

/** Clock ticks per second of /proc's CPU times (`getconf CLK_TCK`; 100 on every common Linux). */
export function clockTicksPerSecond(): number {
  const r = spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' });
  const n = Number(r.stdout?.trim());
  return r.status === 0 && Number.isInteger(n) && n > 0 ? n : 100;
}

/**
 * The value of one sample in Prometheus text format: `name` with exactly the given labels
 * (none: the unlabelled sample). Undefined when absent.
 */
export function metricValue(text: string, name: string, labels: Readonly<Record<string, string>> = {}): number | undefined {
  const want = Object.entries(labels)
    .map(([k, v]) => `${k}="${v}"`)
    .sort()
    .join(',');
  for (const line of text.split('\n')) {
    if (line.startsWith('#') || !line.startsWith(name)) continue;
    const rest = line.slice(name.length);
    let got = '';
    let value: string;
    if (rest.startsWith('{')) {
      const end = rest.indexOf('}');
      got = rest
        .slice(1, end)
        .split(',')
        .filter((s) => s !== '')
        .sort()
        .join(',');
      value = rest.slice(end + 1).trim();
    } else if (rest.startsWith(' ')) {
      value = rest.trim();
    } else continue; // a longer name with this prefix
    if (got === want) return Number(value.split(' ')[0]);
  }
  return undefined;
}
