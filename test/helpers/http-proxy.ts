import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, connect, type AddressInfo, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseProxyUrl, type HttpProxy } from '../../src/platform/proxy.js';

/**
 * HTTP proxies on loopback for the egress proxy tests: a small one written here (net + the
 * CONNECT and absolute-form halves of HTTP/1.1, enough to count what it saw and to refuse on
 * demand), and Debian's tinyproxy started with a configuration of the test's own.
 */

export interface TestProxy {
  port: number;
  url: string;
  /** CONNECT requests answered 200, absolute-form requests forwarded, client connections accepted. */
  counts(): { tunnels: number; forwarded: number; connections: number };
  /** The Proxy-Authorization header of every request it got, in order. */
  authorizations: (string | undefined)[];
  close(): Promise<void>;
}

export interface TestProxyOptions {
  /** Answer every CONNECT and every request with this status instead of forwarding (403, 407, 502...). */
  refuse?: number;
  /** Require this `user:password` (407 otherwise). */
  credentials?: string;
  /** Listen on this loopback port (default: any free one). */
  port?: number;
}

/** A proxy URL as the pool takes it; throws on one the sender would refuse. */
export function proxyOf(url: string): HttpProxy {
  const parsed = parseProxyUrl(url);
  if ('error' in parsed) throw new Error(parsed.error);
  return parsed;
}

/** One request head from `buffer`, or undefined while it is incomplete. */
function head(buffer: Buffer): { lines: string[]; length: number } | undefined {
  const end = buffer.indexOf('\r\n\r\n');
  if (end < 0) return undefined;
  return { lines: buffer.subarray(0, end).toString('latin1').split('\r\n'), length: end + 4 };
}

function header(lines: string[], name: string): string | undefined {
  const line = lines.find((l) => l.toLowerCase().startsWith(`${name}:`));
  return line?.slice(name.length + 1).trim();
}

export async function startTestProxy(options: TestProxyOptions = {}): Promise<TestProxy> {
  let tunnels = 0;
  let forwarded = 0;
  let connections = 0;
  const authorizations: (string | undefined)[] = [];
  const sockets = new Set<Socket>();
  const expected =
    options.credentials === undefined ? undefined : `Basic ${Buffer.from(options.credentials).toString('base64')}`;

  const refuse = (client: Socket, status: number, keepOpen: boolean) => {
    const text = status === 407 ? 'Proxy Authentication Required' : status === 403 ? 'Forbidden' : 'Bad Gateway';
    client.write(
      `HTTP/1.1 ${status} ${text}\r\n${status === 407 ? 'Proxy-Authenticate: Basic realm="test"\r\n' : ''}Content-Length: 0\r\n${keepOpen ? '' : 'Connection: close\r\n'}\r\n`,
    );
    if (!keepOpen) client.end();
  };

  const server: Server = createServer((client) => {
    connections += 1;
    sockets.add(client);
    client.on('close', () => sockets.delete(client));
    client.on('error', () => undefined);
    let buffer = Buffer.alloc(0);
    let upstream: Socket | undefined;
    // Absolute-form requests on one client connection, each forwarded on one upstream connection kept per client.
    const onData = (chunk: Buffer) => {
      buffer = Buffer.concat([buffer, chunk]);
      for (;;) {
        const h = head(buffer);
        if (!h) return;
        const [method, target] = h.lines[0]!.split(' ') as [string, string];
        const authorization = header(h.lines, 'proxy-authorization');
        authorizations.push(authorization);
        const refusal = options.refuse ?? (expected !== undefined && authorization !== expected ? 407 : undefined);
        if (method === 'CONNECT') {
          client.off('data', onData);
          if (refusal !== undefined) return refuse(client, refusal, false);
          const [host, port] = [
            target.slice(0, target.lastIndexOf(':')).replace(/^\[(.*)\]$/, '$1'),
            Number(target.slice(target.lastIndexOf(':') + 1)),
          ];
          const rest = buffer.subarray(h.length);
          const tunnel = connect({ host, port }, () => {
            tunnels += 1;
            client.write('HTTP/1.1 200 Connection established\r\n\r\n');
            if (rest.length > 0) tunnel.write(rest);
            client.pipe(tunnel).pipe(client);
          });
          tunnel.on('error', () => client.destroy());
          client.on('close', () => tunnel.destroy());
          return;
        }
        const length = Number(header(h.lines, 'content-length') ?? '0');
        if (buffer.length < h.length + length) return;
        const body = buffer.subarray(h.length, h.length + length);
        buffer = buffer.subarray(h.length + length);
        if (refusal !== undefined) {
          refuse(client, refusal, true);
          continue;
        }
        const url = new URL(target);
        const lines = [
          `${method} ${url.pathname}${url.search} HTTP/1.1`,
          ...h.lines.slice(1).filter((l) => !/^proxy-/i.test(l)),
        ];
        upstream ??= connectUpstream(client, url);
        forwarded += 1;
        upstream.write(Buffer.concat([Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1'), body]));
      }
    };
    client.on('data', onData);
  });

  // The origin's answers go back as they come: one request at a time per client connection.
  function connectUpstream(client: Socket, url: URL): Socket {
    const upstream = connect({ host: url.hostname.replace(/^\[(.*)\]$/, '$1'), port: Number(url.port || 80) });
    upstream.on('data', (chunk) => client.write(chunk));
    upstream.on('end', () => client.end());
    upstream.on('error', () => client.destroy());
    client.on('close', () => upstream.destroy());
    return upstream;
  }

  await new Promise<void>((resolve) => server.listen(options.port ?? 0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    port,
    url: `http://${options.credentials ? `${options.credentials}@` : ''}127.0.0.1:${port}`,
    counts: () => ({ tunnels, forwarded, connections }),
    authorizations,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/** A port nothing listens on (bound, then released): connections to it are refused. */
export async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

export interface Tinyproxy {
  port: number;
  url: string;
  /** Requests tinyproxy logged, by method (`CONNECT`, `POST`...). */
  requests(): { method: string; target: string }[];
  log(): string;
  close(): Promise<void>;
}

/**
 * Debian's tinyproxy in the foreground on a free loopback port, with a configuration of its own
 * in a temporary directory (the system service is never used). Fails with what to install when
 * it is missing, as the other tests that need a Debian program do.
 */
export async function startTinyproxy(
  options: { credentials?: string; logLevel?: 'Info' | 'Warning'; maxClients?: number } = {},
): Promise<Tinyproxy> {
  const probe = spawnSync('tinyproxy', ['-v'], { encoding: 'utf8' });
  if ((probe.error as NodeJS.ErrnoException | undefined)?.code === 'ENOENT') {
    throw new Error(
      "tinyproxy not found on PATH: install Debian's tinyproxy package (apt-get install -y tinyproxy), as .ci/run does",
    );
  }
  const dir = mkdtempSync(join(tmpdir(), 'msgbridge-tinyproxy-'));
  const port = await closedPort();
  const logFile = join(dir, 'tinyproxy.log');
  const [user, password] = options.credentials?.split(':') ?? [];
  writeFileSync(
    join(dir, 'tinyproxy.conf'),
    [
      `Port ${port}`,
      'Listen 127.0.0.1',
      'Timeout 60',
      `LogFile "${logFile}"`,
      `LogLevel ${options.logLevel ?? 'Info'}`,
      `MaxClients ${options.maxClients ?? 200}`,
      'Allow 127.0.0.1',
      'DisableViaHeader Yes',
      ...(user !== undefined ? [`BasicAuth ${user} ${password}`] : []),
      '',
    ].join('\n'),
  );
  const child: ChildProcess = spawn('tinyproxy', ['-d', '-c', join(dir, 'tinyproxy.conf')], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout?.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (output += d.toString()));
  const read = () => {
    try {
      return readFileSync(logFile, 'utf8');
    } catch {
      return '';
    }
  };
  const deadline = Date.now() + 10_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`tinyproxy exited at start (${child.exitCode}): ${output}${read()}`);
    const listening = await new Promise<boolean>((resolve) => {
      const s = connect({ host: '127.0.0.1', port }, () => (s.destroy(), resolve(true)));
      s.on('error', () => resolve(false));
    });
    if (listening) break;
    if (Date.now() > deadline) throw new Error(`tinyproxy did not listen on ${port} within 10 s: ${output}${read()}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    port,
    url: `http://${options.credentials ? `${options.credentials}@` : ''}127.0.0.1:${port}`,
    requests: () =>
      [...read().matchAll(/Request \(file descriptor \d+\): (\S+) (\S+) HTTP\/1\.[01]/g)].map((m) => ({
        method: m[1]!,
        target: m[2]!,
      })),
    log: read,
    close: async () => {
      if (child.exitCode === null) {
        const exited = new Promise((r) => child.once('exit', r));
        child.kill('SIGTERM');
        await exited;
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
