import { InteractionEnv } from './interaction-env.js';
import { diffLines, parseScript, rewriteScript, type Command } from './script.js';

/** One block whose output differs from the golden text. */
export interface Mismatch {
  readonly command: Command;
  /** `file:line: command`. */
  readonly where: string;
  /** A line diff of the block's output, `-` golden, `+` actual. */
  readonly diff: string;
}

export interface ScriptResult {
  readonly blocks: number;
  readonly mismatches: readonly Mismatch[];
  /** The file with every output replaced by what the run printed (for REWRITE=1). */
  readonly rewritten: string;
}

/**
 * Runs a transcript against a fresh cluster and compares each block's output with its golden
 * text. Pure: the caller reads and writes the file.
 */
export function runScript(file: string, text: string): ScriptResult {
  const items = parseScript(file, text);
  const env = new InteractionEnv(file);
  const outputs: string[][] = [];
  const mismatches: Mismatch[] = [];
  for (const item of items) {
    if (item.kind !== 'block') continue;
    const actual = env.handle(item.command);
    outputs.push(actual);
    if (actual.length !== item.expected.length || actual.some((l, k) => l !== item.expected[k])) {
      mismatches.push({
        command: item.command,
        where: `${file}:${item.command.line}: ${item.command.text}`,
        diff: diffLines(item.expected, actual),
      });
    }
  }
  return { blocks: outputs.length, mismatches, rewritten: rewriteScript(items, outputs) };
}
