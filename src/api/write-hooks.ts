import { CairnError, ErrorCode } from '../base/index.js';
import type { PreparedPut, PutInput, WriteHooks } from '../fsm/index.js';
import type { Resource } from '../store/index.js';
import { formatTypeRef, type ProposedResource, type RegisteredType, type TypeRegistry } from './registry.js';
import { checkProposed } from './resource-service.js';

/**
 * The state machine's port to the type registry (fsm `WriteHooks`): what an unconditional
 * write (envelope 0x14) runs at apply, the same steps a read-then-CAS write ran before
 * proposing (resource-service.ts `write`): the proposed object is the client's data with the
 * client's metadata (the current resource's when the client gave none), the type's mutate
 * hook fills defaults against the current resource, then the data schema and the validate
 * hook judge it against the current resource. A refusal is the error the API gave before
 * (`INVALID_ARGUMENT`, "data does not match the schema of ..." or "data refused by ...").
 *
 * Deterministic as long as the hooks are (they are pure functions of the proposed object and
 * the current resource: no clock, no randomness). A hook that throws something other than a
 * CairnError is a bug in the hook: the write is refused with INTERNAL, on every replica alike.
 * A type this node does not register answers `undefined` (the FSM stops the node).
 */
export function registryWriteHooks(registry: TypeRegistry): WriteHooks {
  return {
    prepare(input: PutInput, current: Resource | undefined): PreparedPut | undefined {
      const typeName = formatTypeRef(input.type);
      let t: RegisteredType;
      try {
        t = registry.resolve(typeName);
      } catch {
        return undefined;
      }
      const proposed: ProposedResource = {
        type: { group: t.group, groupVersion: t.groupVersion, kind: t.kind },
        partition: input.tenancy.partition,
        namespace: input.tenancy.namespace,
        name: input.name,
        data: input.data,
        metadata: { ...(input.metadata ?? current?.metadata ?? {}) },
      };
      try {
        t.mutate?.(proposed, current);
        checkProposed(t, typeName, proposed, current);
      } catch (e) {
        if (e instanceof CairnError) return { ok: false, error: e };
        return { ok: false, error: new CairnError(ErrorCode.INTERNAL, `the hooks of ${typeName} failed: ${e instanceof Error ? e.message : String(e)}`) };
      }
      return { ok: true, data: proposed.data, metadata: proposed.metadata };
    },
  };
}
