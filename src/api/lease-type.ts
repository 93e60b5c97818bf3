import type { TypeRegistry } from './registry.js';

/** The built-in lock resource of out-of-process controllers (the controller runtime's runWithLock). */
export const LEASE_TYPE = 'cairn.v1.Lease';

/** `data` of a cairn.v1.Lease. */
export interface LeaseData {
  /** Who holds the lock (an identity unique per process); empty when released. */
  readonly holder: string;
  /** Others may take the lock once they have seen no renewal (no new version) for this long. */
  readonly leaseDurationMs: number;
  /** When the holder took it (the holder's wall clock, RFC 3339; informational). */
  readonly acquireTime?: string;
  /** When the holder last renewed it (the holder's wall clock, RFC 3339; informational). */
  readonly renewTime?: string;
  /** How many times the lock changed hands. */
  readonly transitions?: number;
}

/**
 * Registers `cairn.v1.Lease` (cluster-scoped): a named lock taken and renewed by
 * compare-and-swap on its version. Every agent registers it, so any process with a client can
 * elect one active instance of itself (API.md "Controllers").
 */
export function registerLeaseType(registry: TypeRegistry): void {
  registry.register({
    group: 'cairn',
    groupVersion: 'v1',
    kind: 'Lease',
    scope: 'cluster',
    schema: {
      type: 'object',
      properties: {
        holder: { type: 'string', maxLength: 253 },
        leaseDurationMs: { type: 'integer', minimum: 1, maximum: 86_400_000 },
        acquireTime: { type: 'string', maxLength: 64 },
        renewTime: { type: 'string', maxLength: 64 },
        transitions: { type: 'integer', minimum: 0 },
      },
      required: ['holder', 'leaseDurationMs'],
      additionalProperties: false,
    },
  });
}
