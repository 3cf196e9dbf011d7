import { BlockList, isIP } from 'node:net';
import { MsgbridgeError } from './errors.js';

/**
 * Which HTTP proxy, if any, a client uses for one origin: `HTTPS_PROXY`/`HTTP_PROXY`/
 * `ALL_PROXY`/`NO_PROXY` read the way curl reads them, or a configured proxy URL.
 * src/sender/README.md ("Egress proxy") has the rules and where they differ from curl's.
 */

/** An HTTP proxy, ready for a connection pool: where it listens and the `Proxy-Authorization` value, if any. */
export interface HttpProxy {
  host: string;
  port: number;
  /** `Basic <base64>` from the URL's user and password; never logged. */
  authorization: string | undefined;
  /** `http://host:port`: what logs and errors show (the credentials left out). */
  display: string;
}

export interface ProxyChoice {
  /** Undefined: the origin is reached directly. */
  proxy: HttpProxy | undefined;
  /** In words, for a log line: which setting chose the proxy, or why there is none. */
  reason: string;
}

/** curl's default port of an http:// proxy named without one. */
export const DEFAULT_PROXY_PORT = 1080;

/** `provider.proxy`-style setting: a proxy URL, or `direct` for none whatever the environment. */
export const DIRECT = 'direct';

/**
 * A proxy URL (`[http://][user:password@]host[:port][/]`) as an `HttpProxy`, or undefined with
 * a reason. The reason never repeats the password.
 */
export function parseProxyUrl(value: string): HttpProxy | { error: string } {
  const text = value.trim();
  const hasScheme = /^[a-z][a-z0-9+.-]*:\/\//i.test(text);
  if (hasScheme && !/^http:\/\//i.test(text)) {
    const scheme = text.slice(0, text.indexOf(':')).toLowerCase();
    return {
      error: `a ${scheme}:// proxy is not supported: name an http:// proxy (https targets go through it in a CONNECT tunnel, TLS end to end)`,
    };
  }
  let url: URL;
  try {
    url = new URL(hasScheme ? text : `http://${text}`);
  } catch {
    return { error: `not a URL: expected http://[user:password@]host[:port] (got ${redact(text)})` };
  }
  if (url.hostname === '')
    return { error: `no host: expected http://[user:password@]host[:port] (got ${redact(text)})` };
  if ((url.pathname !== '/' && url.pathname !== '') || url.search !== '' || url.hash !== '') {
    return {
      error: `a proxy URL has no path, query or fragment: expected http://[user:password@]host[:port] (got ${redact(text)})`,
    };
  }
  const port = url.port === '' ? DEFAULT_PROXY_PORT : Number(url.port);
  if (!(port >= 1 && port <= 65535)) return { error: `port ${url.port} is not from 1 to 65535` };
  const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
  let authorization: string | undefined;
  if (url.username !== '' || url.password !== '') {
    let user: string;
    let password: string;
    try {
      user = decodeURIComponent(url.username);
      password = decodeURIComponent(url.password);
    } catch {
      return { error: 'the user or password is not valid percent-encoding' };
    }
    authorization = `Basic ${Buffer.from(`${user}:${password}`, 'utf8').toString('base64')}`;
  }
  const shown = isIP(host) === 6 ? `[${host}]` : host;
  return { host, port, authorization, display: `http://${shown}:${port}` };
}

/** The text of a proxy URL with its password (and a user alone) replaced, for an error line. */
export function redact(text: string): string {
  return text.replace(/^([a-z][a-z0-9+.-]*:\/\/)?([^@/]*)@/i, (_, scheme: string | undefined) => `${scheme ?? ''}***@`);
}

export interface ProxyTarget {
  protocol: 'http:' | 'https:';
  /** Host name or IP address (IPv6 without brackets). */
  host: string;
  port: number;
}

type Env = Record<string, string | undefined>;

function firstSet(env: Env, names: string[]): { name: string; value: string } | undefined {
  for (const name of names) {
    const value = env[name]?.trim();
    if (value) return { name, value };
  }
  return undefined;
}

/**
 * The proxy for `target`. `configured`: null = the environment (`https_proxy`, `HTTPS_PROXY`
 * for an https target; `http_proxy`, `HTTP_PROXY` for http; then `all_proxy`, `ALL_PROXY`; the
 * lower-case name first), `direct` = none, else a proxy URL for every target. `NO_PROXY`
 * (`no_proxy` first) excludes hosts either way, as it does curl's `--proxy`. A bad value is a
 * CONFIG_INVALID error naming the setting, in one line.
 */
export function chooseProxy(
  target: ProxyTarget,
  configured: string | null,
  env: Env,
  configuredName = 'provider.proxy',
): ProxyChoice {
  if (configured !== null && configured.trim().toLowerCase() === DIRECT)
    return { proxy: undefined, reason: `${configuredName} is "${DIRECT}"` };
  const scheme = target.protocol === 'https:' ? 'https' : 'http';
  const source =
    configured !== null
      ? { name: configuredName, value: configured }
      : firstSet(env, [`${scheme}_proxy`, `${scheme.toUpperCase()}_PROXY`, 'all_proxy', 'ALL_PROXY']);
  if (!source)
    return { proxy: undefined, reason: `no ${scheme}_proxy, ${scheme.toUpperCase()}_PROXY or ALL_PROXY is set` };
  const parsed = parseProxyUrl(source.value);
  if ('error' in parsed)
    throw new MsgbridgeError('CONFIG_INVALID', `invalid configuration:\n  - ${source.name}: ${parsed.error}`);
  const noProxy = firstSet(env, ['no_proxy', 'NO_PROXY']);
  if (noProxy) {
    const entry = noProxyMatch(noProxy.value, target.host, target.port);
    if (typeof entry === 'object')
      throw new MsgbridgeError('CONFIG_INVALID', `invalid configuration:\n  - ${noProxy.name}: ${entry.error}`);
    if (entry !== undefined) return { proxy: undefined, reason: `${noProxy.name} names it ("${entry}")` };
  }
  return { proxy: parsed, reason: `from ${source.name}` };
}

/**
 * The `NO_PROXY` entry that matches `host` (and `port`), undefined when none does, or an error
 * for an entry that cannot be read. Entries are separated by commas or white space:
 * `*` (every host); a name, which matches itself and every name below it, with or without a
 * leading dot (`example.com`, `.example.com` and `*.example.com` all match `api.example.com`
 * and `example.com`); an IP address or a CIDR range (`10.0.0.0/8`, `fd00::/8`), matched
 * against a host given as an address (no name is resolved); any of these with `:port`
 * (`[::1]:8080` for IPv6), which then matches that port only. Case and a final dot are ignored.
 */
export function noProxyMatch(list: string, host: string, port: number): string | undefined | { error: string } {
  const name = host.toLowerCase().replace(/\.$/, '');
  const hostIp = isIP(name);
  for (const raw of list.split(/[\s,]+/)) {
    const entry = raw.trim().toLowerCase();
    if (entry === '') continue;
    if (entry === '*') return raw;
    const parsed = splitPort(entry);
    if ('error' in parsed) return { error: `entry "${raw}": ${parsed.error}` };
    if (parsed.port !== undefined && parsed.port !== port) continue;
    const pattern = parsed.host;
    const [address, bits] = pattern.split('/') as [string, string | undefined];
    const family = isIP(address);
    if (family !== 0) {
      const max = family === 4 ? 32 : 128;
      const prefix = bits === undefined ? max : Number(bits);
      if (!Number.isInteger(prefix) || prefix < 0 || prefix > max || (bits !== undefined && !/^\d+$/.test(bits)))
        return { error: `entry "${raw}": a CIDR prefix is 0 to ${max}` };
      if (hostIp !== family) continue;
      const range = new BlockList();
      range.addSubnet(address, prefix, family === 4 ? 'ipv4' : 'ipv6');
      if (range.check(name, family === 4 ? 'ipv4' : 'ipv6')) return raw;
      continue;
    }
    if (bits !== undefined) return { error: `entry "${raw}": a CIDR range needs an IP address` };
    const domain = pattern.replace(/^\*?\./, '').replace(/\.$/, '');
    if (domain === '' || !/^[a-z0-9_-]+(\.[a-z0-9_-]+)*$/.test(domain))
      return { error: `entry "${raw}" is not a host name, domain, IP address or CIDR range` };
    if (hostIp !== 0) continue;
    if (name === domain || name.endsWith(`.${domain}`)) return raw;
  }
  return undefined;
}

/** `host`, `host:port`, `[v6]`, `[v6]:port`, or a bare IPv6 address or range (several colons). */
function splitPort(entry: string): { host: string; port: number | undefined } | { error: string } {
  const bracketed = /^\[([^\]]+)\](?::(\d+))?(\/\d+)?$/.exec(entry);
  if (bracketed) return withPort(`${bracketed[1]}${bracketed[3] ?? ''}`, bracketed[2]);
  const colons = entry.split(':').length - 1;
  if (colons === 1) {
    const [host, port] = entry.split(':') as [string, string];
    return withPort(host, port);
  }
  return { host: entry, port: undefined };
}

function withPort(
  host: string,
  port: string | undefined,
): { host: string; port: number | undefined } | { error: string } {
  if (port === undefined) return { host, port: undefined };
  const n = Number(port);
  if (!/^\d{1,5}$/.test(port) || n < 1 || n > 65535) return { error: `port ${port} is not from 1 to 65535` };
  return { host, port: n };
}
