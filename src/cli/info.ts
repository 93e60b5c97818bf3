/**
 * `cairn info`: one node's status from GET /v1/agent/self (API.md "Cluster and operations"):
 * its role, term, leader and indexes, and the data quota (docs/security.md "Quotas"): the
 * stored data's size against the quota, and any raised alarm, shown first and loudly, since a
 * raised NO_SPACE alarm means writes that grow the data are being refused.
 */
import type { Command } from 'commander';
import { clientOptions, connection, printJson, withClientOptions, type CliIo } from './context.js';
import { requestJson, unexpected, type RequestOptions } from './http.js';
import { formatFields } from './table.js';

const TIMEOUT_MS = 10_000;

export interface AgentInfo {
  readonly id: string;
  readonly role: string;
  readonly term: number;
  readonly leader: string | null;
  readonly commitIndex: number;
  readonly appliedIndex: number;
  readonly alarms: readonly string[];
  readonly dataBytes: number | undefined;
  readonly quotaBytes: number | undefined;
  readonly failed: string | null;
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const num = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);

/** Narrows GET /v1/agent/self's body, or says what is wrong with it. Older agents have no alarms or sizes: none shown. */
export function asAgentInfo(v: unknown): AgentInfo | string {
  if (!isRecord(v)) return 'expected an object';
  const { id, role, term, leader, commit_index: commit, applied_index: applied, alarms, data_bytes: data, quota_bytes: quota, failed } = v;
  if (typeof id !== 'string' || typeof role !== 'string') return "expected string 'id' and 'role'";
  if (num(term) === undefined || num(commit) === undefined || num(applied) === undefined) return "expected numbers 'term', 'commit_index' and 'applied_index'";
  if (alarms !== undefined && (!Array.isArray(alarms) || !alarms.every((a) => typeof a === 'string'))) return "expected 'alarms' to be a list of strings";
  return {
    id,
    role,
    term: term as number,
    leader: typeof leader === 'string' ? leader : null,
    commitIndex: commit as number,
    appliedIndex: applied as number,
    alarms: (alarms as string[] | undefined) ?? [],
    dataBytes: num(data),
    quotaBytes: num(quota),
    failed: typeof failed === 'string' ? failed : null,
  };
}

/** Bytes for people: 4194304 -> "4.0 MiB (4194304 bytes)". */
export function formatBytes(n: number): string {
  const units = ['bytes', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return u === 0 ? `${n} bytes` : `${v.toFixed(1)} ${units[u] as string} (${n} bytes)`;
}

/** The alarm banner (empty when none is raised), then the fields. */
export function formatAgentInfo(i: AgentInfo): string {
  const banner = i.alarms.map((a) =>
    a === 'NO_SPACE'
      ? 'ALARM NO_SPACE: the data quota is reached; writes that grow the data are refused (507 NO_SPACE) until deletes bring the data to 90% of the quota\n'
      : `ALARM ${a}\n`,
  );
  const used = i.dataBytes !== undefined && i.quotaBytes !== undefined && i.quotaBytes > 0 ? ` (${((100 * i.dataBytes) / i.quotaBytes).toFixed(1)}% of the quota)` : '';
  const fields: [string, string][] = [
    ['id', i.id],
    ['role', i.role],
    ['term', String(i.term)],
    ['leader', i.leader ?? '(none known)'],
    ['commit index', String(i.commitIndex)],
    ['applied index', String(i.appliedIndex)],
    ...(i.dataBytes !== undefined ? ([['data', `${formatBytes(i.dataBytes)}${used}`]] as [string, string][]) : []),
    ...(i.quotaBytes !== undefined ? ([['quota', formatBytes(i.quotaBytes)]] as [string, string][]) : []),
    ['alarms', i.alarms.length === 0 ? 'none' : i.alarms.join(', ')],
    ...(i.failed !== null ? ([['failed', i.failed]] as [string, string][]) : []),
  ];
  return banner.join('') + formatFields(fields);
}

export function registerInfoCommand(program: Command, io: CliIo): void {
  withClientOptions(program.command('info').description("show a node's status: role, leader, indexes, data size, quota and alarms (GET /v1/agent/self)"), io, TIMEOUT_MS).action(
    async (_opts: unknown, cmd: Command) => {
      const options = clientOptions(cmd, io);
      const req: RequestOptions = { ...connection(options), method: 'GET', path: '/v1/agent/self', write: false };
      const body = await requestJson(req);
      const info = asAgentInfo(body);
      if (typeof info === 'string') throw unexpected(req, info);
      if (options.json) printJson(io, body);
      else io.stdout(formatAgentInfo(info));
    },
  );
}
