import { createServer } from 'node:net';

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

/**
 * Listens on `host:port` and closes again: the port it got (0 asks for any free one). Rejects
 * with the listen error (EADDRINUSE: the port is taken).
 */
export function probePort(host: string, port = 0): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.once('error', reject);
    server.listen(port, host, () => {
      const address = server.address();
      server.close(() =>
        typeof address === 'object' && address ? resolve(address.port) : reject(new Error(`no port on ${host}`)),
      );
    });
  });
}
