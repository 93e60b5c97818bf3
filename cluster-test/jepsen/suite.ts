/**
 * Suite mode (README.md "Suites"): the plan (which runs, their seeds and lengths) and the
 * summary (suite.txt, suite.json, suite.html). Pure functions; `runSuite` in run.ts executes a
 * plan, one fresh cluster per run.
 *
 * A suite is one run per nemesis, that nemesis alone with every workload at once, then, with two
 * or more nemeses, one run with all of them together ("mixed"). TIME is the suite's total
 * workload time, split evenly; no run is shorter than MIN_RUN_S (a run needs its 2 s lead-in and
 * one 3-6 s fault). Each run's seed is derived from the suite's seed and the run's label, so
 * adding a nemesis to the harness does not change the seeds of the others, and each run can be
 * replayed alone with the seed the suite prints.
 */
import { Rng } from './schedule.js';

/** The shortest run a suite plans (s): the schedule's 2 s lead-in, one fault of up to 6 s, the heal. */
export const MIN_RUN_S = 10;

export interface SuiteRunPlan {
  /** The nemesis's name, or `mixed` for the run with all of them. */
  readonly label: string;
  readonly nemeses: readonly string[];
  readonly seed: number;
  readonly timeS: number;
}

export interface SuitePlanOptions {
  readonly seed: number;
  readonly nemeses: readonly string[];
  /** The suite's total workload time (s), split over the runs. */
  readonly timeS: number;
  /** Each run's length (s) instead of splitting `timeS` (the CI suite: the same per nemesis however many there are). */
  readonly runTimeS?: number;
  /** Add the run with every nemesis together (default: when there are two or more). */
  readonly mixed?: boolean;
}

export interface SuitePlan {
  readonly runs: readonly SuiteRunPlan[];
  /** Why the plan differs from what was asked (runs stretched to the minimum), or undefined. */
  readonly note?: string;
}

/** FNV-1a over the label's UTF-16 units: a stable 32-bit hash. */
function fnv1a(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193) >>> 0;
  return h;
}

/** The seed of the suite's run `label`: a function of the suite's seed and the label only. */
export function runSeed(suiteSeed: number, label: string): number {
  return Math.floor(new Rng((suiteSeed ^ fnv1a(label)) >>> 0).next() * 2 ** 31);
}

export function planSuite(o: SuitePlanOptions): SuitePlan {
  if (o.nemeses.length === 0) throw new Error('a suite needs at least one nemesis (--nemesis all, or a list)');
  const labels = [...o.nemeses];
  if (o.mixed ?? o.nemeses.length >= 2) labels.push('mixed');
  let timeS: number;
  let note: string | undefined;
  if (o.runTimeS !== undefined) {
    if (!(o.runTimeS >= MIN_RUN_S)) throw new Error(`--run-time must be at least ${MIN_RUN_S} s, got ${String(o.runTimeS)}`);
    timeS = o.runTimeS;
  } else {
    if (!(o.timeS > 0)) throw new Error(`--time must be positive, got ${String(o.timeS)}`);
    timeS = Math.floor(o.timeS / labels.length);
    if (timeS < MIN_RUN_S) {
      note = `${o.timeS} s split over ${labels.length} runs is under ${MIN_RUN_S} s each: each run takes ${MIN_RUN_S} s (${MIN_RUN_S * labels.length} s in all)`;
      timeS = MIN_RUN_S;
    }
  }
  const runs = labels.map((label) => ({ label, nemeses: label === 'mixed' ? [...o.nemeses] : [label], seed: runSeed(o.seed, label), timeS }));
  return note === undefined ? { runs } : { runs, note };
}

export type RunVerdict = 'valid' | 'invalid' | 'unknown' | 'error';

/** The figures of one run that a suite tabulates. */
export interface RunTotals {
  /** Operations of every workload; `info` are those with an unknown outcome. */
  readonly ops: number;
  readonly ok: number;
  readonly fail: number;
  readonly info: number;
  readonly faults: number;
  readonly nemesisErrors: number;
  /** Each anomaly as its checker formats it (the smallest failing sub-history it found). */
  readonly anomalies: readonly string[];
}

/** One run of a suite as suite.json records it. */
export interface SuiteRunSummary extends RunTotals {
  readonly label: string;
  readonly nemeses: readonly string[];
  readonly seed: number;
  readonly timeS: number;
  readonly verdict: RunVerdict;
  /** The harness error that stopped the run (verdict `error`). */
  readonly error?: string;
  /** The run's results, relative to the suite's directory. */
  readonly dir: string;
  /** The command that replays this run alone. */
  readonly replay: string;
  readonly durationS: number;
}

export interface SuiteSummary {
  readonly seed: number;
  readonly nodes: number;
  readonly workloads: readonly string[];
  readonly plantedBugs: readonly string[];
  readonly verdict: RunVerdict;
  readonly durationS: number;
  readonly replay: string;
  readonly note?: string;
  readonly runs: readonly SuiteRunSummary[];
}

/** The suite's verdict: an error beats an invalid run, which beats an unknown one. */
export function suiteVerdict(runs: readonly { readonly verdict: RunVerdict }[]): RunVerdict {
  for (const v of ['error', 'invalid', 'unknown'] as const) if (runs.some((r) => r.verdict === v)) return v;
  return 'valid';
}

/** 0 every run valid, 1 an anomaly or an undecided check, 2 a harness error. */
export function suiteExitCode(verdict: RunVerdict): number {
  return verdict === 'valid' ? 0 : verdict === 'error' ? 2 : 1;
}

const pad = (s: string, n: number): string => (s.length >= n ? s : s + ' '.repeat(n - s.length));
const padL = (s: string, n: number): string => (s.length >= n ? s : ' '.repeat(n - s.length) + s);

/** suite.txt: a header, one table row per run, then each invalid run's anomalies and replay. */
export function renderSuiteText(s: SuiteSummary): string {
  const out: string[] = [];
  out.push(`suite seed ${s.seed}: ${s.nodes} nodes, workloads ${s.workloads.join(',')}, ${s.runs.length} runs, ${s.durationS.toFixed(0)} s${s.plantedBugs.length > 0 ? `, PLANTED BUGS ${s.plantedBugs.join(',')}` : ''}`);
  out.push(`verdict: ${s.verdict.toUpperCase()}`);
  out.push(`replay the suite: ${s.replay}`);
  if (s.note !== undefined) out.push(`note: ${s.note}`);
  out.push('');
  out.push(`${pad('run', 12)} ${padL('seed', 10)} ${padL('time', 5)} ${pad('verdict', 8)} ${padL('ops', 7)} ${padL('ok', 7)} ${padL('fail', 6)} ${padL('info', 6)} ${padL('faults', 6)} ${padL('anomalies', 9)}  results`);
  for (const r of s.runs) {
    out.push(
      `${pad(r.label, 12)} ${padL(String(r.seed), 10)} ${padL(`${r.timeS}s`, 5)} ${pad(r.verdict.toUpperCase(), 8)} ${padL(String(r.ops), 7)} ${padL(String(r.ok), 7)} ${padL(String(r.fail), 6)} ${padL(String(r.info), 6)} ${padL(String(r.faults), 6)} ${padL(String(r.anomalies.length), 9)}  ${r.dir}`,
    );
  }
  for (const r of s.runs) {
    if (r.verdict === 'valid') continue;
    out.push('', `${r.label} (seed ${r.seed}): ${r.verdict.toUpperCase()}${r.error !== undefined ? `: ${r.error}` : ''}`, `  replay alone: ${r.replay}`);
    for (const a of r.anomalies) out.push(...a.split('\n').map((l) => `  ${l}`));
  }
  return out.join('\n') + '\n';
}

const esc = (s: string): string => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

/** suite.html: the table, then each run's timeline (its timeline.svg) and anomalies. */
export function renderSuiteHtml(s: SuiteSummary): string {
  const color: Record<RunVerdict, string> = { valid: '#2e7d32', invalid: '#c62828', unknown: '#ef6c00', error: '#6a1b9a' };
  const rows = s.runs
    .map(
      (r) =>
        `<tr><td><a href="#${esc(r.label)}">${esc(r.label)}</a></td><td>${r.seed}</td><td>${r.timeS} s</td><td style="color:${color[r.verdict]};font-weight:bold">${r.verdict.toUpperCase()}</td><td>${r.ops}</td><td>${r.ok}</td><td>${r.fail}</td><td>${r.info}</td><td>${r.faults}</td><td>${r.anomalies.length}</td><td><a href="${esc(r.dir)}/report.txt">report</a></td></tr>`,
    )
    .join('\n');
  const sections = s.runs
    .map(
      (r) => `<h2 id="${esc(r.label)}">${esc(r.label)}: <span style="color:${color[r.verdict]}">${r.verdict.toUpperCase()}</span></h2>
<p>seed ${r.seed}, ${r.timeS} s, nemesis ${esc(r.nemeses.join(','))}; ${r.ops} ops (${r.ok} ok, ${r.fail} fail, ${r.info} unknown), ${r.faults} faults injected${r.nemesisErrors > 0 ? `, ${r.nemesisErrors} nemesis errors` : ''}. Replay alone: <code>${esc(r.replay)}</code></p>
${r.error !== undefined ? `<pre>${esc(r.error)}</pre>` : ''}${r.anomalies.length > 0 ? `<pre>${esc(r.anomalies.join('\n\n'))}</pre>` : ''}
${r.verdict === 'error' ? '' : `<a href="${esc(r.dir)}/timeline.svg"><img src="${esc(r.dir)}/timeline.svg" width="960" alt="timeline of ${esc(r.label)}"></a>`}`,
    )
    .join('\n');
  return `<!doctype html>
<html><head><meta charset="utf-8"><title>cairn cluster-test suite ${s.seed}</title>
<style>body{font-family:sans-serif;margin:1em 2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}td:first-child{text-align:left}pre{background:#f6f6f6;padding:6px;overflow:auto}</style></head>
<body><h1>Suite seed ${s.seed}: <span style="color:${color[s.verdict]}">${s.verdict.toUpperCase()}</span></h1>
<p>${s.nodes} nodes, workloads ${esc(s.workloads.join(','))}, ${s.runs.length} runs, ${s.durationS.toFixed(0)} s${s.plantedBugs.length > 0 ? `, <b>planted bugs ${esc(s.plantedBugs.join(','))}</b>` : ''}. Replay: <code>${esc(s.replay)}</code></p>
${s.note !== undefined ? `<p>${esc(s.note)}</p>` : ''}
<table><tr><th>run</th><th>seed</th><th>time</th><th>verdict</th><th>ops</th><th>ok</th><th>fail</th><th>unknown</th><th>faults</th><th>anomalies</th><th></th></tr>
${rows}
</table>
${sections}
</body></html>
`;
}
