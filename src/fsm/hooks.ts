import type { CairnError } from '../base/index.js';
import type { JsonValue, Resource, Tenancy, TypeRef } from '../store/index.js';

/** What the type's hooks are given for an unconditional write: the object as the client sent it. */
export interface PutInput {
  readonly type: TypeRef;
  readonly tenancy: Tenancy;
  readonly name: string;
  /** The client's data, not yet mutated. A fresh copy (decoded from the entry): the hooks may change it. */
  readonly data: JsonValue;
  /** The client's metadata; absent: keep the current resource's (`{}` when there is none). */
  readonly metadata: Readonly<Record<string, string>> | undefined;
}

/** The object to store after the hooks, or the hooks' refusal (INVALID_ARGUMENT, as before proposing). */
export type PreparedPut =
  | { readonly ok: true; readonly data: JsonValue; readonly metadata: Readonly<Record<string, string>> }
  | { readonly ok: false; readonly error: CairnError };

/**
 * The port through which the state machine runs a type's hooks (its mutate hook, its data
 * schema, its validate hook) when it applies an unconditional write (envelope 0x14), against
 * the resource as stored at that log position. The API layer implements it from the type
 * registry (`registryWriteHooks`); the server wires it in.
 *
 * Must be deterministic: a pure function of its arguments (no clock, no randomness, no I/O),
 * and the same on every node (every node registers the same types: the registry is part of
 * what a replica applies). `undefined` means this node does not know the type: the FSM stops
 * the node rather than apply the entry without its hooks and diverge.
 */
export interface WriteHooks {
  prepare(input: PutInput, current: Resource | undefined): PreparedPut | undefined;
}

/**
 * An unconditional write of a type this node has no hooks for: applying it without them could
 * store something other nodes refused or changed, so the node stops (as for an unknown entry
 * type) until it is configured like the rest of the cluster.
 */
export class MissingWriteHooksError extends Error {
  override readonly name = 'MissingWriteHooksError';
}
