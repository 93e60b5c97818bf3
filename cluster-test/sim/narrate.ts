/**
 * Turns the event log into a readable story for `cli.js demo`: elections, faults, crashes and
 * restarts, snapshot installs, the quiet phase and the verdicts, with a progress line for the
 * clients every simulated second. Ticks and individual deliveries are left out.
 */
export class Narrator {
  private ok = 0;
  private info = 0;
  private fail = 0;
  private maxApplied = 0;
  private nextReportMs = 1000;

  /** Feeds one event-log line; returns the narration lines it produces (often none). */
  line(raw: string): string[] {
    const m = /^\s*(\d+) (\S+)\s+(.*)$/.exec(raw);
    if (m === null) return [];
    const time = Number(m[1]);
    const who = m[2] ?? '';
    const what = m[3] ?? '';
    const out: string[] = [];
    while (time >= this.nextReportMs) {
      out.push(this.say(this.nextReportMs, `clients so far: ${this.ok} ok, ${this.info} unknown outcome, ${this.fail} failed; highest applied index ${this.maxApplied}`));
      this.nextReportMs += 1000;
    }
    const story = this.story(who, what);
    if (story !== undefined) out.push(this.say(time, story));
    return out;
  }

  private say(time: number, text: string): string {
    return `[${(time / 1000).toFixed(3).padStart(7)}s] ${text}`;
  }

  private story(who: string, what: string): string | undefined {
    if (who === 'cli') {
      const c = /^\S+ p\d+ (ok|info|fail)\b/.exec(what);
      if (c?.[1] === 'ok') this.ok++;
      else if (c?.[1] === 'info') this.info++;
      else if (c?.[1] === 'fail') this.fail++;
      return undefined;
    }
    if (who === 'sim') {
      if (what.startsWith('seed ')) return `simulation: ${what}`;
      return what;
    }
    if (who === 'nem') return `nemesis: ${what}`;
    if (who === 'net') return undefined;
    const applied = /\bapply (?:\d+\.\.)?(\d+)\b/.exec(what);
    if (applied !== null) this.maxApplied = Math.max(this.maxApplied, Number(applied[1]));
    if (what.startsWith('leader of term')) return `${who} is elected ${what}`;
    if (what.startsWith('crash')) return `${who} loses power ${what.slice('crash '.length)}`;
    const start = /^start inc (\d+) (.*)$/.exec(what);
    if (start !== null && Number(start[1]) > 1) return `${who} restarts from its disk: ${start[2] ?? ''}`;
    if (start !== null && what.includes(' t0 ')) return `${who} starts empty, to join the cluster`;
    if (what.startsWith('restore snap')) return `${who} installs a snapshot from the leader: ${what.slice('restore '.length)}`;
    return undefined;
  }
}
