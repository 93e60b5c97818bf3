import * as net from 'node:net';

/**
 * Helpers shared by the agent tests of this folder. Test-only: nothing imports it but tests.
 */

/** A TCP port on 127.0.0.1 that was free a moment ago (for configs that need a port before binding). */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
}

/** Polls `cond` every 10 ms until it holds; fails naming `what` after `ms`. */
export async function waitUntil(cond: () => boolean, ms: number, what: string): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}
