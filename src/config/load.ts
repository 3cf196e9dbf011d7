import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { z } from 'zod';
import { errorMessage, MsgbridgeError } from '../platform/errors.js';
import { readBusinessesJson } from './businesses-file.js';
import { configSchema, type Config } from './schema.js';

export const DEFAULT_CONFIG_PATH = fileURLToPath(new URL('../../config/default.json', import.meta.url));

type Env = Record<string, string | undefined>;
type Json = Record<string, unknown>;

export interface LoadConfigOptions {
  env?: Env;
  /** Replaces MSGBRIDGE_CONFIG (used by the CLI's --config). */
  configFile?: string;
  /** Applied after the files and before the environment (used by tests and `dev`). */
  overrides?: DeepPartial<Config>;
}

export type DeepPartial<T> = T extends (infer U)[]
  ? U[]
  : T extends object
    ? { [K in keyof T]?: DeepPartial<T[K]> }
    : T;

/**
 * config/default.json, then the file named by MSGBRIDGE_CONFIG, then environment variables;
 * secrets may come from `<VAR>_FILE`. Validated once; a bad value names the field, what was
 * expected and where the value came from.
 */
export function loadConfig(options: LoadConfigOptions = {}): Config {
  const env = options.env ?? process.env;
  const sources = new Map<string, string>();
  let raw = readJsonFile(DEFAULT_CONFIG_PATH);
  const overridePath = options.configFile ?? nonEmpty(env.MSGBRIDGE_CONFIG);
  if (overridePath !== undefined) {
    const override = readJsonFile(overridePath);
    raw = deepMerge(raw, override);
    for (const path of leafPaths(override)) sources.set(path, overridePath);
  }
  if (options.overrides) raw = deepMerge(raw, options.overrides as Json);
  applyEnv(raw, env, sources);
  refuseRenamed(raw, sources);
  const parsed = configSchema.safeParse(raw);
  if (!parsed.success) throw configError(parsed.error, sources);
  return parsed.data;
}

function readJsonFile(path: string): Json {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new MsgbridgeError('CONFIG_FILE_UNREADABLE', `cannot read configuration file ${path}: ${errorMessage(err)}`, {
      cause: err,
    });
  }
  try {
    const value: unknown = JSON.parse(text);
    if (typeof value !== 'object' || value === null || Array.isArray(value))
      throw new Error('expected a JSON object at the top level');
    return value as Json;
  } catch (err) {
    throw new MsgbridgeError('CONFIG_INVALID', `configuration file ${path} is not valid JSON: ${errorMessage(err)}`, {
      cause: err,
    });
  }
}

/** Objects merge key by key; arrays and scalars replace. */
export function deepMerge(base: Json, override: Json): Json {
  const out: Json = { ...base };
  for (const [key, value] of Object.entries(override)) {
    if (value === undefined) continue;
    const current = out[key];
    out[key] = isPlainObject(current) && isPlainObject(value) ? deepMerge(current, value) : value;
  }
  return out;
}

function isPlainObject(value: unknown): value is Json {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function leafPaths(value: Json, prefix = ''): string[] {
  return Object.entries(value).flatMap(([k, v]) =>
    isPlainObject(v) ? leafPaths(v, `${prefix}${k}.`) : [`${prefix}${k}`],
  );
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value.trim() === '' ? undefined : value;
}

/** A variable, or the content of the file named by `<name>_FILE` (trailing newline trimmed). */
export function readEnvSecret(env: Env, name: string): string | undefined {
  const direct = nonEmpty(env[name]);
  const file = nonEmpty(env[`${name}_FILE`]);
  if (direct !== undefined && file !== undefined) {
    throw new MsgbridgeError('CONFIG_INVALID', `set either ${name} or ${name}_FILE, not both`);
  }
  if (file === undefined) return direct;
  try {
    return readFileSync(file, 'utf8').replace(/\r?\n$/, '');
  } catch (err) {
    throw new MsgbridgeError('CONFIG_FILE_UNREADABLE', `cannot read ${name}_FILE (${file}): ${errorMessage(err)}`, {
      cause: err,
    });
  }
}

/** Numbers and booleans as such, so that the schema reports a type error on anything else. */
function scalar(value: string): unknown {
  const trimmed = value.trim();
  if (/^-?\d+(\.\d+)?$/.test(trimmed)) return Number(trimmed);
  if (trimmed === 'true') return true;
  if (trimmed === 'false') return false;
  return value;
}

function setPath(target: Json, path: string[], value: unknown): void {
  let node = target;
  for (const key of path.slice(0, -1)) {
    if (!isPlainObject(node[key])) node[key] = {};
    node = node[key] as Json;
  }
  node[path[path.length - 1]!] = value;
}

function applyEnv(raw: Json, env: Env, sources: Map<string, string>): void {
  const set = (path: string, value: unknown, source: string) => {
    setPath(raw, path.split('.'), value);
    sources.set(path, source);
  };

  // Generic form for any key: MSGBRIDGE__ingress__maxBodyBytes=2097152 (JSON values accepted).
  // Whole sections first, then deeper keys: the more specific variable wins whatever the order of
  // the environment (MSGBRIDGE__kafka__topics__sendRequests over MSGBRIDGE__kafka__topics).
  const generic = Object.entries(env)
    .filter(([name]) => name.startsWith('MSGBRIDGE__'))
    .sort(([a], [b]) => a.split('__').length - b.split('__').length);
  for (const [name, value] of generic) {
    if (value === undefined) continue;
    const path = name.slice('MSGBRIDGE__'.length).split('__').filter(Boolean);
    if (path.length === 0) continue;
    let parsed: unknown;
    try {
      parsed = JSON.parse(value);
    } catch {
      parsed = value;
    }
    set(path.join('.'), parsed, name);
  }

  const brokers = nonEmpty(env.KAFKA_BROKERS);
  if (brokers !== undefined) {
    set(
      'kafka.brokers',
      brokers
        .split(',')
        .map((b) => b.trim())
        .filter(Boolean),
      'KAFKA_BROKERS',
    );
  }
  const clientId = nonEmpty(env.KAFKA_CLIENT_ID);
  if (clientId !== undefined) set('kafka.clientId', clientId, 'KAFKA_CLIENT_ID');
  const ssl = nonEmpty(env.KAFKA_SSL);
  if (ssl !== undefined) set('kafka.ssl', scalar(ssl), 'KAFKA_SSL');
  const tlsFiles = (
    [
      ['KAFKA_SSL_CA_FILE', 'caFile'],
      ['KAFKA_SSL_CERT_FILE', 'certFile'],
      ['KAFKA_SSL_KEY_FILE', 'keyFile'],
    ] as const
  ).filter(([name]) => nonEmpty(env[name]) !== undefined);
  if (tlsFiles.length > 0) {
    // A CA or a client certificate means TLS: an explicit KAFKA_SSL=false contradicts it.
    if (ssl !== undefined && scalar(ssl) === false) {
      throw new MsgbridgeError(
        'CONFIG_INVALID',
        `KAFKA_SSL=false contradicts ${tlsFiles.map(([name]) => name).join(', ')}: unset one of them`,
      );
    }
    const kafka = isPlainObject(raw.kafka) ? raw.kafka : {};
    const current = isPlainObject(kafka.ssl) ? kafka.ssl : {};
    for (const [name, field] of tlsFiles) {
      current[field] = env[name]!.trim();
      sources.set(`kafka.ssl.${field}`, name);
    }
    setPath(raw, ['kafka', 'ssl'], current);
  }
  const saslMechanism = nonEmpty(env.KAFKA_SASL_MECHANISM);
  if (saslMechanism !== undefined) {
    set(
      'kafka.sasl',
      {
        mechanism: saslMechanism.toLowerCase(),
        username: env.KAFKA_SASL_USERNAME ?? '',
        password: readEnvSecret(env, 'KAFKA_SASL_PASSWORD') ?? '',
      },
      'KAFKA_SASL_MECHANISM/KAFKA_SASL_USERNAME/KAFKA_SASL_PASSWORD',
    );
  }

  const simple: [string, string][] = [
    ['MSGBRIDGE_PROVIDER_URL', 'provider.url'],
    ['MSGBRIDGE_PROVIDER_PROXY', 'provider.proxy'],
    ['MSGBRIDGE_INGRESS_PORT', 'ingress.port'],
    ['MSGBRIDGE_INGRESS_ADMIN_PORT', 'ingress.adminPort'],
    ['MSGBRIDGE_SENDER_ADMIN_PORT', 'sender.adminPort'],
    ['MSGBRIDGE_TRACKER_ADMIN_PORT', 'tracker.adminPort'],
    ['MSGBRIDGE_INGRESS_WORKERS', 'ingress.workers'],
    ['MSGBRIDGE_SIMULATOR_PORT', 'simulator.port'],
    ['MSGBRIDGE_TRACKER_PORT', 'tracker.port'],
    ['MSGBRIDGE_TRACKER_STATE_DIR', 'tracker.stateDir'],
    ['MSGBRIDGE_SENDER_STATE_DIR', 'sender.stateDir'],
    ['MSGBRIDGE_TRACKER_ADVERTISED_URL', 'tracker.advertisedUrl'],
    ['MSGBRIDGE_TRACKER_TOKENS_FILE', 'tracker.accessTokensFile'],
    ['MSGBRIDGE_LOG_LEVEL', 'log.level'],
  ];
  const verbatim = new Set([
    'provider.url',
    'provider.proxy',
    'log.level',
    'tracker.stateDir',
    'sender.stateDir',
    'tracker.advertisedUrl',
    'tracker.accessTokensFile',
  ]);
  for (const [name, path] of simple) {
    const value = nonEmpty(env[name]);
    if (value !== undefined) set(path, verbatim.has(path) ? value.trim() : scalar(value), name);
  }

  const businessesFile = nonEmpty(env.MSGBRIDGE_BUSINESSES_FILE);
  if (businessesFile !== undefined) set('businessesFile', businessesFile, 'MSGBRIDGE_BUSINESSES_FILE');
  // The file replaces the configured list. It is reloaded alone while the roles run, so the
  // single-business shorthand cannot be layered on it.
  if (typeof raw.businessesFile === 'string' && raw.businessesFile !== '') {
    const shorthand = [
      'MSGBRIDGE_BUSINESS_ID',
      'MSGBRIDGE_SIGNING_SECRET',
      'MSGBRIDGE_SIGNING_SECRET_FILE',
      'MSGBRIDGE_API_KEY',
      'MSGBRIDGE_API_KEY_FILE',
    ].filter((name) => nonEmpty(env[name]) !== undefined);
    if (shorthand.length > 0) {
      throw new MsgbridgeError(
        'CONFIG_INVALID',
        `set the businesses either in the businesses file (${raw.businessesFile}) or with ${shorthand.join(', ')}, not both: the file is reloaded while running, the variables are not`,
      );
    }
    set('businesses', readBusinessesJson(raw.businessesFile), raw.businessesFile);
  }
  applySingleBusiness(raw, env, sources);
}

/**
 * The single-business shorthand: MSGBRIDGE_BUSINESS_ID with MSGBRIDGE_SIGNING_SECRET
 * (comma-separated during a rotation) and MSGBRIDGE_API_KEY. It updates the business of that
 * id or adds it; without an id, the secrets apply to the only configured business.
 */
function applySingleBusiness(raw: Json, env: Env, sources: Map<string, string>): void {
  const id = nonEmpty(env.MSGBRIDGE_BUSINESS_ID)?.trim();
  const secrets = readEnvSecret(env, 'MSGBRIDGE_SIGNING_SECRET');
  const apiKey = readEnvSecret(env, 'MSGBRIDGE_API_KEY');
  if (id === undefined && secrets === undefined && apiKey === undefined) return;

  const list = Array.isArray(raw.businesses) ? (raw.businesses as Json[]) : [];
  raw.businesses = list;
  let index: number;
  if (id !== undefined) {
    index = list.findIndex((b) => isPlainObject(b) && b.id === id);
    if (index < 0) {
      list.push({ id, signingSecrets: [], apiKey: null });
      index = list.length - 1;
    }
    sources.set(`businesses.${index}.id`, 'MSGBRIDGE_BUSINESS_ID');
  } else if (list.length === 1) {
    index = 0;
  } else {
    throw new MsgbridgeError(
      'CONFIG_INVALID',
      `MSGBRIDGE_SIGNING_SECRET and MSGBRIDGE_API_KEY need MSGBRIDGE_BUSINESS_ID when ${list.length} businesses are configured`,
    );
  }
  const business = list[index]!;
  if (secrets !== undefined) {
    business.signingSecrets = secrets
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean);
    sources.set(`businesses.${index}.signingSecrets`, 'MSGBRIDGE_SIGNING_SECRET');
  }
  if (apiKey !== undefined) {
    business.apiKey = apiKey.trim();
    sources.set(`businesses.${index}.apiKey`, 'MSGBRIDGE_API_KEY');
  }
}

/** Settings renamed since an earlier release: the old name gets the new one, not just "unrecognized key". */
const RENAMED: [string, string][] = [
  ['sender.healthHost', 'sender.adminHost'],
  ['sender.healthPort', 'sender.adminPort'],
];

function refuseRenamed(raw: Json, sources: Map<string, string>): void {
  const found = RENAMED.filter(
    ([old]) =>
      old.split('.').reduce<unknown>((node, key) => (isPlainObject(node) ? node[key] : undefined), raw) !== undefined,
  );
  if (found.length === 0) return;
  const lines = found.map(
    ([old, now]) =>
      `  - ${old}: renamed ${now} (the private port of /healthz, /readyz and /metrics)${sources.has(old) ? ` (from ${sources.get(old)})` : ''}`,
  );
  throw new MsgbridgeError('CONFIG_INVALID', `invalid configuration:\n${lines.join('\n')}`);
}

function configError(error: z.ZodError, sources: Map<string, string>): MsgbridgeError {
  const lines = error.issues.map((issue) => {
    const path = issue.path.map(String).join('.');
    const source = sourceOf(path, sources);
    return `  - ${path || '(root)'}: ${issue.message}${source ? ` (from ${source})` : ''}`;
  });
  return new MsgbridgeError('CONFIG_INVALID', `invalid configuration:\n${lines.join('\n')}`, {
    details: { issues: error.issues.map((i) => ({ path: i.path.map(String).join('.'), message: i.message })) },
  });
}

function sourceOf(path: string, sources: Map<string, string>): string | undefined {
  for (let p = path; p !== ''; p = p.includes('.') ? p.slice(0, p.lastIndexOf('.')) : '') {
    const source = sources.get(p);
    if (source !== undefined) return source;
  }
  return undefined;
}
