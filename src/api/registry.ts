import { Ajv, type ValidateFunction } from 'ajv';
import { CairnError, ErrorCode } from '../base/index.js';
import type { JsonValue, Resource, TypeRef } from '../store/index.js';

export type Scope = 'cluster' | 'partition' | 'namespace';

/** What a mutate or validate hook sees: the resource as it would be written. */
export interface ProposedResource {
  readonly type: TypeRef;
  readonly partition: string;
  readonly namespace: string;
  readonly name: string;
  data: JsonValue;
  metadata: Record<string, string>;
}

export type AccessVerb = 'read' | 'list' | 'write' | 'delete' | 'status';

export interface TypeRegistration {
  readonly group: string;
  readonly groupVersion: string;
  readonly kind: string;
  readonly scope: Scope;
  /** JSON Schema (draft 2020-12 subset that ajv supports) for `data`. */
  readonly schema: object;
  /**
   * Fills defaults; runs before validate, before the command is proposed. It may edit
   * `res.data` in place: it gets a copy of the caller's data (made only for types with this hook).
   */
  readonly mutate?: (res: ProposedResource, current: Resource | undefined) => void;
  /**
   * Extra checks beyond the schema; return a reason to refuse (INVALID_ARGUMENT). Must not
   * edit `res`: without a mutate hook, `res.data` is the caller's own object.
   */
  readonly validate?: (res: ProposedResource, current: Resource | undefined) => string | undefined;
  /** Access decision for a caller's token (when access control is on); return false to refuse. */
  readonly access?: (verb: AccessVerb, res: { partition: string; namespace: string; name: string }, token: string | undefined) => boolean;
}

export interface RegisteredType extends TypeRegistration {
  readonly validateData: ValidateFunction;
}

const IDENT_RE = /^[a-z][a-z0-9]{0,62}$/;
const VERSION_RE = /^v[0-9]+((alpha|beta)[0-9]+)?$/;
const KIND_RE = /^[A-Z][A-Za-z0-9]{0,62}$/;

/** Parses `group.groupVersion.Kind` (e.g. `demo.v1.Artist`) or, when `versionOptional`, `group.Kind`. */
export function parseTypeString(s: string, versionOptional = false): { group: string; groupVersion: string | undefined; kind: string } {
  const parts = s.split('.');
  if (parts.length === 3) {
    const [group, groupVersion, kind] = parts as [string, string, string];
    if (IDENT_RE.test(group) && VERSION_RE.test(groupVersion) && KIND_RE.test(kind)) return { group, groupVersion, kind };
  } else if (parts.length === 2 && versionOptional) {
    const [group, kind] = parts as [string, string];
    if (IDENT_RE.test(group) && KIND_RE.test(kind)) return { group, groupVersion: undefined, kind };
  }
  throw new CairnError(
    ErrorCode.INVALID_ARGUMENT,
    `type ${JSON.stringify(s)} is not of the form group.version.Kind (e.g. demo.v1.Artist)${versionOptional ? ' or group.Kind' : ''}`,
  );
}

export function formatTypeRef(t: TypeRef): string {
  return `${t.group}.${t.groupVersion}.${t.kind}`;
}

/**
 * The type registry (Consul's resource type registry): which types exist, their scope, their
 * data schema and hooks. Built-in types (the demo types, the streaming domain) register
 * through the same call users use.
 */
export class TypeRegistry {
  private readonly types = new Map<string, RegisteredType>();
  private readonly ajv = new Ajv({ strict: true, allErrors: true });

  register(reg: TypeRegistration): void {
    if (!IDENT_RE.test(reg.group) || !VERSION_RE.test(reg.groupVersion) || !KIND_RE.test(reg.kind)) {
      throw new CairnError(ErrorCode.INVALID_ARGUMENT, `cannot register type ${reg.group}.${reg.groupVersion}.${reg.kind}: bad group, version or kind`);
    }
    const key = `${reg.group}.${reg.groupVersion}.${reg.kind}`;
    if (this.types.has(key)) throw new CairnError(ErrorCode.INVALID_ARGUMENT, `type ${key} is already registered`);
    for (const t of this.types.values()) {
      if (t.group === reg.group && t.kind === reg.kind && t.scope !== reg.scope) {
        throw new CairnError(ErrorCode.INVALID_ARGUMENT, `type ${key} must have the same scope as ${formatTypeRef(t)} (${t.scope})`);
      }
    }
    let validateData: ValidateFunction;
    try {
      validateData = this.ajv.compile(reg.schema);
    } catch (e) {
      throw new CairnError(ErrorCode.INVALID_ARGUMENT, `type ${key} has an invalid schema: ${e instanceof Error ? e.message : String(e)}`);
    }
    this.types.set(key, { ...reg, validateData });
  }

  /** The registration for an exact `group.version.Kind`, or INVALID_ARGUMENT. */
  resolve(type: string): RegisteredType {
    // A registered key is already a valid `group.version.Kind` (checked by `register` with the
    // same rules), so an exact hit needs no parsing: the common case, once per request.
    const direct = this.types.get(type);
    if (direct !== undefined) return direct;
    const p = parseTypeString(type);
    const t = this.types.get(`${p.group}.${p.groupVersion}.${p.kind}`);
    if (!t) throw new CairnError(ErrorCode.INVALID_ARGUMENT, `unknown resource type ${type}; registered: ${this.list().join(', ') || 'none'}`);
    return t;
  }

  /** Any version of a group and kind (for listing `group.Kind`). */
  resolveGroupKind(group: string, kind: string): RegisteredType {
    for (const t of this.types.values()) if (t.group === group && t.kind === kind) return t;
    throw new CairnError(ErrorCode.INVALID_ARGUMENT, `unknown resource type ${group}.${kind}; registered: ${this.list().join(', ') || 'none'}`);
  }

  list(): string[] {
    return [...this.types.keys()].sort();
  }

  all(): RegisteredType[] {
    return [...this.types.values()];
  }
}
