/**
 * The datadriven file format (after cockroachdb/datadriven, as used by etcd raft's
 * `testdata/*.txt`): a sequence of blocks
 *
 *     command arg1 key=value key=(a,b)
 *     ----
 *     expected output lines
 *     <blank line>
 *
 * Lines starting with `#` and blank lines between blocks are kept verbatim, so a rewrite
 * changes only the outputs. Pure text in, text out: the test file does the file I/O.
 */

/** One argument: `value`, `(a,b)`, `key=value` or `key=(a,b)`. */
export interface Arg {
  readonly key: string | undefined;
  readonly values: readonly string[];
  /** Written in parentheses (a list, even of one). */
  readonly list: boolean;
}

export interface Command {
  readonly name: string;
  readonly args: readonly Arg[];
  /** The command line as written. */
  readonly text: string;
  /** 1-based line of the command in its file. */
  readonly line: number;
}

export interface Block {
  readonly kind: 'block';
  readonly command: Command;
  readonly expected: readonly string[];
}

export interface Verbatim {
  readonly kind: 'verbatim';
  readonly text: string;
}

export type ScriptItem = Block | Verbatim;

export class ScriptError extends Error {
  override readonly name = 'ScriptError';
}

export const SEPARATOR = '----';

export function parseScript(file: string, text: string): ScriptItem[] {
  const lines = text.split('\n');
  if (lines[lines.length - 1] === '') lines.pop();
  const items: ScriptItem[] = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i] as string;
    if (line.trim() === '' || line.startsWith('#')) {
      items.push({ kind: 'verbatim', text: line });
      i++;
      continue;
    }
    const command = parseCommand(file, line, i + 1);
    i++;
    if (lines[i] !== SEPARATOR) {
      throw new ScriptError(`${file}:${i + 1}: expected '${SEPARATOR}' after the command '${line}'`);
    }
    i++;
    const expected: string[] = [];
    while (i < lines.length && (lines[i] as string) !== '') {
      expected.push(lines[i] as string);
      i++;
    }
    if (i < lines.length) i++; // the blank line that ends the block
    items.push({ kind: 'block', command, expected });
  }
  return items;
}

/** The script with each block's output replaced by `outputs[k]` (one per block, in order). */
export function rewriteScript(items: readonly ScriptItem[], outputs: readonly (readonly string[])[]): string {
  const out: string[] = [];
  let k = 0;
  for (const item of items) {
    if (item.kind === 'verbatim') {
      out.push(item.text);
      continue;
    }
    const actual = outputs[k++];
    if (actual === undefined) throw new ScriptError(`no output for the command at line ${item.command.line}`);
    out.push(item.command.text, SEPARATOR, ...actual, '');
  }
  while (out.length > 0 && out[out.length - 1] === '') out.pop();
  return `${out.join('\n')}\n`;
}

function parseCommand(file: string, line: string, lineNo: number): Command {
  const fail = (why: string): never => {
    throw new ScriptError(`${file}:${lineNo}: ${why} in '${line}'`);
  };
  const tokens: Arg[] = [];
  let name: string | undefined;
  let i = 0;
  const n = line.length;
  const readValue = (): { values: string[]; list: boolean } => {
    if (line[i] === '(') {
      const close = line.indexOf(')', i);
      if (close < 0) fail('unclosed parenthesis');
      const inner = line.slice(i + 1, close).trim();
      i = close + 1;
      return { values: inner === '' ? [] : inner.split(/\s*,\s*|\s+/), list: true };
    }
    if (line[i] === '"') {
      let j = i + 1;
      while (j < n && line[j] !== '"') j += line[j] === '\\' ? 2 : 1;
      if (j >= n) fail('unclosed quote');
      const raw = line.slice(i, j + 1);
      i = j + 1;
      let parsed: unknown;
      try {
        parsed = JSON.parse(raw);
      } catch {
        return fail(`bad string ${raw}`);
      }
      return { values: [String(parsed)], list: false };
    }
    let j = i;
    while (j < n && !/\s/.test(line[j] as string)) j++;
    const word = line.slice(i, j);
    i = j;
    return { values: [word], list: false };
  };
  while (i < n) {
    while (i < n && /\s/.test(line[i] as string)) i++;
    if (i >= n) break;
    if (name === undefined) {
      let j = i;
      while (j < n && !/\s/.test(line[j] as string)) j++;
      name = line.slice(i, j);
      i = j;
      continue;
    }
    const keyMatch = /^([a-z][a-z0-9-]*)=/.exec(line.slice(i));
    if (keyMatch) {
      i += keyMatch[0].length;
      const v = readValue();
      tokens.push({ key: keyMatch[1], ...v });
    } else {
      tokens.push({ key: undefined, ...readValue() });
    }
  }
  if (name === undefined) return fail('empty command');
  return { name, args: tokens, text: line, line: lineNo };
}

/**
 * A line diff (longest common subsequence) of expected vs actual output, `-` for expected
 * lines missing from the actual output and `+` for new ones, with a little context.
 */
export function diffLines(expected: readonly string[], actual: readonly string[], context = 2): string {
  const n = expected.length;
  const m = actual.length;
  const lcs: number[][] = Array.from({ length: n + 1 }, () => new Array<number>(m + 1).fill(0));
  for (let a = n - 1; a >= 0; a--) {
    for (let b = m - 1; b >= 0; b--) {
      const row = lcs[a] as number[];
      row[b] = expected[a] === actual[b] ? ((lcs[a + 1] as number[])[b + 1] as number) + 1 : Math.max((lcs[a + 1] as number[])[b] as number, row[b + 1] as number);
    }
  }
  const ops: Array<{ op: ' ' | '-' | '+'; text: string }> = [];
  let a = 0;
  let b = 0;
  while (a < n || b < m) {
    if (a < n && b < m && expected[a] === actual[b]) {
      ops.push({ op: ' ', text: expected[a] as string });
      a++;
      b++;
    } else if (a < n && (b >= m || ((lcs[a + 1] as number[])[b] as number) >= ((lcs[a] as number[])[b + 1] as number))) {
      ops.push({ op: '-', text: expected[a] as string });
      a++;
    } else {
      ops.push({ op: '+', text: actual[b] as string });
      b++;
    }
  }
  const keep = ops.map((o, k) => o.op !== ' ' || ops.slice(Math.max(0, k - context), k + context + 1).some((x) => x.op !== ' '));
  const out: string[] = [];
  let skipped = false;
  ops.forEach((o, k) => {
    if (keep[k]) {
      out.push(`${o.op} ${o.text}`);
      skipped = false;
    } else if (!skipped) {
      out.push('  ...');
      skipped = true;
    }
  });
  return out.join('\n');
}
