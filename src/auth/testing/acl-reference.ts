/**
 * A deliberately naive model of access control (docs/security.md "Tokens and roles"), sharing no
 * code with `acl.ts`: the property tests compare `authorize` and `mayListSome` with it. Written
 * the slow, obvious way: a type pattern is matched by listing every pattern that names the type,
 * a list is "may show something" by enumerating concrete items over a finite universe.
 */

export interface RefRule {
  readonly verbs: readonly string[];
  readonly types: readonly string[];
  readonly partitions: readonly string[];
  readonly namespaces: readonly string[];
  readonly namePrefix: string;
}

export type RefIdentity =
  | { readonly kind: 'open' }
  | { readonly kind: 'node'; readonly nodeId: string }
  | { readonly kind: 'token'; readonly accessorId: string; readonly roles: readonly string[]; readonly management: boolean; readonly rules: readonly RefRule[] }
  | { readonly kind: 'anonymous'; readonly rules: readonly RefRule[] };

export interface RefTarget {
  readonly group: string;
  readonly groupVersion: string | undefined;
  readonly kind: string;
  readonly partition: string;
  readonly namespace: string;
  readonly name: string;
  readonly namePrefix?: string;
}

/** Every pattern that covers this type: `*`, `group.*`, `group.Kind` and (when the target has one) `group.version.Kind`. */
export function refPatternsNaming(t: { group: string; groupVersion: string | undefined; kind: string }): string[] {
  const out = ['*', t.group + '.*', t.group + '.' + t.kind];
  if (t.groupVersion !== undefined) out.push(t.group + '.' + t.groupVersion + '.' + t.kind);
  return out;
}

function refTenancy(allowed: readonly string[], value: string): boolean {
  // A wildcard request needs a rule that allows every value.
  if (value === '*') return allowed.indexOf('*') >= 0;
  for (const a of allowed) if (a === '*' || a === value) return true;
  return false;
}

function refNameOk(rule: RefRule, t: RefTarget): boolean {
  if (rule.namePrefix.length === 0) return true;
  const subject = t.name.length > 0 ? t.name : t.namePrefix ?? '';
  return subject.slice(0, rule.namePrefix.length) === rule.namePrefix;
}

export function refAuthorize(id: RefIdentity, verb: string, t: RefTarget): boolean {
  if (id.kind === 'open' || id.kind === 'node') return true;
  if (id.kind === 'token' && id.management) return true;
  const naming = refPatternsNaming(t);
  for (const rule of id.rules) {
    if (rule.verbs.indexOf(verb) < 0) continue;
    if (!rule.types.some((p) => naming.indexOf(p) >= 0)) continue;
    if (!refTenancy(rule.partitions, t.partition)) continue;
    if (!refTenancy(rule.namespaces, t.namespace)) continue;
    if (!refNameOk(rule, t)) continue;
    return true;
  }
  return false;
}

/** The finite universe a list filter is expanded over. */
export interface RefUniverse {
  readonly versions: readonly string[];
  readonly partitions: readonly string[];
  readonly namespaces: readonly string[];
  readonly names: readonly string[];
}

/**
 * Whether some concrete item inside the filter (each wildcard replaced by every value of the
 * universe, names extending the filter's prefix) is authorized: what `mayListSome` must say
 * true for, at the least.
 */
export function refSomeItemVisible(id: RefIdentity, verb: string, filter: RefTarget, u: RefUniverse): boolean {
  const versions = filter.groupVersion === undefined ? u.versions : [filter.groupVersion];
  const partitions = filter.partition === '*' ? u.partitions : [filter.partition];
  const namespaces = filter.namespace === '*' ? u.namespaces : [filter.namespace];
  const prefix = filter.namePrefix ?? '';
  const names = u.names.filter((n) => n.startsWith(prefix));
  for (const v of versions)
    for (const p of partitions)
      for (const ns of namespaces)
        for (const name of names) {
          if (refAuthorize(id, verb, { group: filter.group, groupVersion: v, kind: filter.kind, partition: p, namespace: ns, name })) return true;
        }
  return false;
}
