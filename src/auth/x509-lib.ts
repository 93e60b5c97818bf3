/**
 * @peculiar/x509 (and reflect-metadata, which it needs loaded first), loaded on first use: a
 * node without TLS never parses or makes a certificate, and loading the library costs 3.4 MiB
 * of heap (docs/performance.md "Where a node's memory goes", the idle node). The package is
 * CommonJS (its `main`), so a synchronous require gives the same module an import would.
 */
import { webcrypto } from 'node:crypto';
import { createRequire } from 'node:module';
import type * as X509 from '@peculiar/x509';

const require = createRequire(import.meta.url);
let loaded: typeof X509 | undefined;

export function x509Lib(): typeof X509 {
  if (loaded === undefined) {
    require('reflect-metadata');
    const lib = require('@peculiar/x509') as typeof X509;
    lib.cryptoProvider.set(webcrypto as unknown as Parameters<typeof lib.cryptoProvider.set>[0]);
    loaded = lib;
  }
  return loaded;
}

/** Whether the library was loaded in this process (tests: a node without TLS never loads it). */
export function x509Loaded(): boolean {
  return loaded !== undefined;
}
