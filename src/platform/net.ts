/**
 * The http:// URL at which a server listening on `host:port` is reached from this machine:
 * the wildcard addresses become loopback, IPv6 literals get their brackets.
 */
export function localUrl(host: string, port: number): string {
  const reachable = loopbackHost(host);
  return `http://${reachable.includes(':') ? `[${reachable}]` : reachable}:${port}`;
}

/** A listen address narrowed to loopback when it is a wildcard (for local-only modes). */
export function loopbackHost(host: string): string {
  return host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host;
}
