import * as path from 'node:path';
import { AGENT_DEFAULTS, type AgentConfig } from '../config.js';
import { freePorts } from './net.js';

/**
 * Agent configurations for tests that run agents in their own process: ports the OS picks
 * (gRPC ports chosen up front, since peers must know them), a fast tick, the demo types, and
 * 256 KiB log segments (a new one is preallocated with zeros: 64 MiB per node would cost every
 * test a burst of disk writes, and small ones make tests roll segments over and compact them).
 */
export const TEST_WAL_SEGMENT_BYTES = 256 * 1024;

/** A single node like `cairn agent --dev`. */
export function devConfig(dataDir: string, overrides: Partial<AgentConfig> = {}): AgentConfig {
  return {
    ...AGENT_DEFAULTS,
    nodeId: 'dev',
    dataDir,
    grpcAddr: '127.0.0.1:0',
    advertiseAddr: '127.0.0.1:0',
    httpAddr: '127.0.0.1:0',
    bootstrap: true,
    dev: true,
    tickMs: 20,
    walSegmentBytes: TEST_WAL_SEGMENT_BYTES,
    ...overrides,
  };
}

/** `n` nodes n1..nN (data in `dir`/nI) forming one cluster with --bootstrap-expect n. */
export async function clusterConfigs(dir: string, n: number, overrides: Partial<AgentConfig> = {}): Promise<AgentConfig[]> {
  const addrs = (await freePorts(n)).map((p) => `127.0.0.1:${p}`);
  return addrs.map((addr, i) => ({
    ...AGENT_DEFAULTS,
    nodeId: `n${i + 1}`,
    dataDir: path.join(dir, `n${i + 1}`),
    grpcAddr: addr,
    advertiseAddr: addr,
    httpAddr: '127.0.0.1:0',
    bootstrapExpect: n,
    join: addrs.filter((a) => a !== addr),
    demoTypes: true,
    tickMs: 20,
    walSegmentBytes: TEST_WAL_SEGMENT_BYTES,
    ...overrides,
  }));
}
