/**
 * A node without TLS does not load the libraries only TLS needs (@peculiar/x509 and what it
 * pulls in: 3.4 MiB of heap), nor the CLI's HTTP client (undici: 3.5 MiB), which the `cairn`
 * executable shares with the agent: both are loaded on first use (docs/performance.md "Where a
 * node's memory goes", the idle node). A child process, so that nothing this test process
 * loaded counts.
 */
import t from 'tap';
import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

t.test('a dev agent serving a write loads neither @peculiar/x509 nor undici', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'cairn-lazy-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const here = new URL('.', import.meta.url).href;
  const script = `
    import { createRequire } from 'node:module';
    const { startAgent } = await import(${JSON.stringify(`${here}agent.js`)});
    const { devConfig } = await import(${JSON.stringify(`${here}testing/index.js`)});
    const { createLogger } = await import(${JSON.stringify(`${here}../platform/index.js`)});
    const { x509Loaded } = await import(${JSON.stringify(`${here}../auth/x509-lib.js`)});
    // Everything the cairn executable loads before it runs a command.
    await import(${JSON.stringify(`${here}../cli/program.js`)});
    const agent = await startAgent(devConfig(${JSON.stringify(dir)}), { logger: createLogger({ level: 'error', nodeId: 'dev' }) });
    await agent.ready;
    const require = createRequire(import.meta.url);
    const cjs = Object.keys(require.cache);
    await agent.close();
    process.stdout.write(JSON.stringify({ x509: x509Loaded(), peculiar: cjs.filter((k) => k.includes('@peculiar')).length, undici: cjs.filter((k) => k.includes('/undici/')).length }));
  `;
  const { stdout } = await run(process.execPath, ['--input-type=module', '-e', script], { timeout: 60_000 });
  const seen = JSON.parse(stdout) as { x509: boolean; peculiar: number; undici: number };
  t.same(seen, { x509: false, peculiar: 0, undici: 0 }, 'nothing loaded that only TLS or the CLI needs');
});
