/** The parts of a V8 CPU profile (`node --cpu-prof` writes *.cpuprofile) the bench's readers use. */

export interface CallFrame {
  readonly functionName: string;
  readonly url: string;
  /** Zero-based; absent in hand-built test profiles. */
  readonly lineNumber?: number;
}

export interface ProfileNode {
  readonly id: number;
  readonly callFrame: CallFrame;
  readonly hitCount?: number;
}

export interface CpuProfile {
  readonly nodes: readonly ProfileNode[];
  /** Microseconds, on the machine's monotonic clock (the same for every process). */
  readonly startTime: number;
  readonly endTime: number;
  readonly samples: readonly number[];
  /** Microseconds between consecutive samples (the first: since startTime). */
  readonly timeDeltas: readonly number[];
}
