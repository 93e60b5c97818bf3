import { isIP } from 'node:net';

/**
 * The HTTP API's checks against cross-site requests from a browser (issue 15, item 5; etcd
 * CVE-2018-1099). DNS rebinding: a page on attacker.example re-points its name at 127.0.0.1
 * and reads the API as "same origin"; the browser still sends `Host: attacker.example`, so the
 * server answers only Host names it knows. Cross-site writes: a page can send a "simple" POST
 * (text/plain, form encodings) without the preflight that CORS requires for
 * `application/json`; requiring that type for every PUT, POST and PATCH leaves a browser no way
 * to send one without this server's consent (which it never gives: no CORS headers).
 */

/** Always answered: the loopback names (a browser page cannot make its own name one of these). */
export const LOOPBACK_HOSTS: readonly string[] = ['localhost', '127.0.0.1', '[::1]'];

/**
 * The host of a Host header value (or an allow-list entry) in a comparable form: lower case,
 * without the port and a trailing dot; IPv6 in brackets. Undefined when it is not a host name,
 * an IPv4 address or a bracketed IPv6 address (with an optional port).
 */
export function normalizeHostHeader(value: string): string | undefined {
  const v = value.trim().toLowerCase();
  const m = /^(\[[0-9a-f:.]+\]|[a-z0-9_.-]+?)\.?(?::([0-9]{1,5}))?$/.exec(v);
  if (!m || m[1] === undefined || m[1] === '') return undefined;
  const host = m[1];
  if (host.startsWith('[')) return isIP(host.slice(1, -1)) === 6 ? host : undefined;
  if (host.startsWith('.') || host.includes('..')) return undefined;
  return host;
}

/**
 * Which Host headers the HTTP API answers: the loopback names, any IP literal (a rebinding
 * attack needs a name the attacker controls; an IP literal in Host means the client asked for
 * that address itself), this node's own host names, and the configured ones. `*` allows every
 * Host (the check is off).
 */
export class HostAllowList {
  private readonly names: ReadonlySet<string>;
  private readonly any: boolean;

  constructor(hosts: readonly string[]) {
    this.any = hosts.includes('*');
    const names = new Set(LOOPBACK_HOSTS);
    for (const h of hosts) {
      const n = h === '*' ? undefined : normalizeHostHeader(h);
      if (n !== undefined) names.add(n);
    }
    this.names = names;
  }

  /** Whether a request with this Host header may be answered. A request without one is not. */
  allows(hostHeader: string | undefined): boolean {
    if (this.any) return true;
    if (hostHeader === undefined) return false;
    const host = normalizeHostHeader(hostHeader);
    if (host === undefined) return false;
    if (this.names.has(host)) return true;
    return isIP(host.startsWith('[') ? host.slice(1, -1) : host) !== 0;
  }
}

/** Whether a Content-Type header names `type` (parameters such as `charset` allowed). */
export function isMediaType(header: string | undefined, type: string): boolean {
  if (header === undefined) return false;
  return (header.split(';')[0] ?? '').trim().toLowerCase() === type;
}
