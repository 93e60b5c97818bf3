import { createServer, type Server } from 'node:net';

/**
 * Helpers shared by the agent tests of this folder, the real-process harnesses of cluster-test
 * and the benchmarks. Test-only: nothing imports it but tests, harnesses and benchmarks.
 */

/** `n` distinct free TCP ports on 127.0.0.1 (all held open until every one is chosen). */
export async function freePorts(n: number): Promise<number[]> {
  const servers: Server[] = [];
  try {
    const ports: number[] = [];
    for (let i = 0; i < n; i++) {
      const s = createServer();
      servers.push(s);
      await new Promise<void>((resolve, reject) => {
        s.once('error', reject);
        s.listen(0, '127.0.0.1', () => resolve());
      });
      const a = s.address();
      if (a === null || typeof a === 'string') throw new Error('no port assigned');
      ports.push(a.port);
    }
    return ports;
  } finally {
    await Promise.all(servers.map((s) => new Promise<void>((resolve) => s.close(() => resolve()))));
  }
}

/** A TCP port on 127.0.0.1 that was free a moment ago (for configs that need a port before binding). */
export async function freePort(): Promise<number> {
  return (await freePorts(1))[0] as number;
}

/** Polls `cond` every 10 ms until it holds; fails naming `what` after `ms`. */
export async function waitUntil(cond: () => boolean, ms: number, what: string): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}
