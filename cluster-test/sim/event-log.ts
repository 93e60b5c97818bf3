/**
 * The event log: one compact text line per step ("   1230 n2 deliver n1->n2 app t3 i5..7").
 * Every line is hashed (sha256) as it is written, so two runs of one seed can be compared by
 * digest without keeping the lines; the full text is kept only when asked for. The last lines
 * are always kept, to show the context of a violation.
 */
import { createHash, type Hash } from 'node:crypto';

export class EventLog {
  private readonly hash: Hash = createHash('sha256');
  private readonly lines: string[] | undefined;
  private readonly tail: string[] = [];
  private tailPos = 0;
  private count = 0;

  constructor(
    private readonly now: () => number,
    options: { keep: boolean; tailLines?: number; onLine?: (line: string) => void },
  ) {
    this.lines = options.keep ? [] : undefined;
    this.tailLines = options.tailLines ?? 80;
    this.onLine = options.onLine;
  }

  private readonly tailLines: number;
  private readonly onLine: ((line: string) => void) | undefined;

  /** Appends one line; `who` is a node id, or a role such as "net", "client", "nemesis". */
  add(who: string, what: string): void {
    const line = `${String(this.now()).padStart(7)} ${who.padEnd(3)} ${what}`;
    this.hash.update(line);
    this.hash.update('\n');
    this.count++;
    this.lines?.push(line);
    if (this.tail.length < this.tailLines) this.tail.push(line);
    else {
      this.tail[this.tailPos] = line;
      this.tailPos = (this.tailPos + 1) % this.tailLines;
    }
    this.onLine?.(line);
  }

  get size(): number {
    return this.count;
  }

  /** The last lines written, oldest first. */
  recent(): string[] {
    return [...this.tail.slice(this.tailPos), ...this.tail.slice(0, this.tailPos)];
  }

  /** The full text (only when constructed with keep: true). */
  text(): string | undefined {
    return this.lines === undefined ? undefined : this.lines.join('\n') + (this.lines.length > 0 ? '\n' : '');
  }

  /** sha256 of every line written so far (each followed by a newline). Call once, at the end. */
  digest(): string {
    return this.hash.copy().digest('hex');
  }
}
