import { MsgbridgeError } from './errors.js';
import type { Logger } from './logger.js';

/**
 * OpenTelemetry tracing, off unless the standard OTEL_* variables ask for it (the variables:
 * docs/configuration.md, "Tracing"; the spans: README.md beside this file, "Tracing"). This file is what the roles see:
 * the settings read from the environment, and a tiny tracer interface whose spans are continued and propagated as W3C
 * `traceparent` strings, so that no role (and no pure file) imports @opentelemetry. The SDK itself lives in
 * tracing-sdk.ts and is imported only when tracing is on: off, nothing of it is loaded, and a
 * call site pays one boolean test (`tracer.enabled`) before any span work.
 */

type Env = Record<string, string | undefined>;

export type OtlpProtocol = 'http/protobuf' | 'http/json';
export type SamplerName =
  | 'always_on'
  | 'always_off'
  | 'traceidratio'
  | 'parentbased_always_on'
  | 'parentbased_always_off'
  | 'parentbased_traceidratio';

/** What the OTEL_* variables configure (undefined from `readTracingSettings`: tracing off). */
export interface TracingSettings {
  /** The full traces URL (…/v1/traces). */
  url: string;
  protocol: OtlpProtocol;
  /** Sent with every export (authentication of a hosted backend): never logged. */
  headers: Record<string, string>;
  timeoutMs: number;
  serviceName: string;
  /** OTEL_RESOURCE_ATTRIBUTES, service.name excluded. */
  resourceAttributes: Record<string, string>;
  sampler: SamplerName;
  /** The ratio of the traceidratio samplers (0..1). */
  ratio: number;
}

const SAMPLERS: readonly SamplerName[] = [
  'always_on',
  'always_off',
  'traceidratio',
  'parentbased_always_on',
  'parentbased_always_off',
  'parentbased_traceidratio',
];
const PROTOCOLS: readonly OtlpProtocol[] = ['http/protobuf', 'http/json'];
const DEFAULT_TIMEOUT_MS = 10_000;

const set = (value: string | undefined): string | undefined => {
  const trimmed = value?.trim();
  return trimmed === undefined || trimmed === '' ? undefined : trimmed;
};

function invalid(variable: string, value: string, expected: string): MsgbridgeError {
  return new MsgbridgeError(
    'CONFIG_INVALID',
    `invalid configuration:\n  - ${variable}=${JSON.stringify(value)}: ${expected}`,
  );
}

/**
 * The tracing settings of the OTEL_* variables, or undefined when tracing is off (no endpoint,
 * OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none). A bad value is a CONFIG_INVALID naming
 * the variable, what was expected and the value (never a header's value: it may be a secret).
 */
export function readTracingSettings(env: Env, defaultServiceName: string): TracingSettings | undefined {
  const disabled = set(env.OTEL_SDK_DISABLED)?.toLowerCase();
  if (disabled !== undefined && disabled !== 'true' && disabled !== 'false')
    throw invalid('OTEL_SDK_DISABLED', env.OTEL_SDK_DISABLED!, 'expected true or false');
  const exporter = set(env.OTEL_TRACES_EXPORTER)?.toLowerCase();
  if (exporter !== undefined && exporter !== 'otlp' && exporter !== 'none') {
    throw invalid(
      'OTEL_TRACES_EXPORTER',
      env.OTEL_TRACES_EXPORTER!,
      'expected otlp or none (msgbridge exports traces over OTLP/HTTP only)',
    );
  }
  const tracesEndpoint = set(env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT);
  const endpoint = set(env.OTEL_EXPORTER_OTLP_ENDPOINT);
  if (disabled === 'true' || exporter === 'none' || (tracesEndpoint === undefined && endpoint === undefined))
    return undefined;

  // The signal's own endpoint is used as it is; the general one gets the signal's path.
  const url =
    tracesEndpoint !== undefined
      ? httpUrl('OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', tracesEndpoint)
      : `${httpUrl('OTEL_EXPORTER_OTLP_ENDPOINT', endpoint!).replace(/\/+$/, '')}/v1/traces`;
  const protocolVariable =
    set(env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL) !== undefined
      ? 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL'
      : 'OTEL_EXPORTER_OTLP_PROTOCOL';
  const protocolValue = set(env[protocolVariable]) ?? 'http/protobuf';
  if (!PROTOCOLS.includes(protocolValue as OtlpProtocol)) {
    throw invalid(
      protocolVariable,
      protocolValue,
      protocolValue === 'grpc'
        ? 'grpc is not supported by msgbridge: use http/protobuf (the default) or http/json, with the collector’s OTLP/HTTP port (4318)'
        : 'expected http/protobuf or http/json',
    );
  }
  const headers = {
    ...keyValues('OTEL_EXPORTER_OTLP_HEADERS', env.OTEL_EXPORTER_OTLP_HEADERS, false),
    ...keyValues('OTEL_EXPORTER_OTLP_TRACES_HEADERS', env.OTEL_EXPORTER_OTLP_TRACES_HEADERS, false),
  };
  const timeoutVariable =
    set(env.OTEL_EXPORTER_OTLP_TRACES_TIMEOUT) !== undefined
      ? 'OTEL_EXPORTER_OTLP_TRACES_TIMEOUT'
      : 'OTEL_EXPORTER_OTLP_TIMEOUT';
  const timeoutValue = set(env[timeoutVariable]);
  let timeoutMs = DEFAULT_TIMEOUT_MS;
  if (timeoutValue !== undefined) {
    timeoutMs = Number(timeoutValue);
    if (!/^\d+$/.test(timeoutValue) || timeoutMs < 1 || timeoutMs > 600_000)
      throw invalid(timeoutVariable, timeoutValue, 'expected milliseconds, an integer from 1 to 600000');
  }
  const resourceAttributes = keyValues('OTEL_RESOURCE_ATTRIBUTES', env.OTEL_RESOURCE_ATTRIBUTES, true);
  const serviceName = set(env.OTEL_SERVICE_NAME) ?? set(resourceAttributes['service.name']) ?? defaultServiceName;
  delete resourceAttributes['service.name'];

  const samplerValue = set(env.OTEL_TRACES_SAMPLER)?.toLowerCase() ?? 'parentbased_always_on';
  if (!SAMPLERS.includes(samplerValue as SamplerName))
    throw invalid('OTEL_TRACES_SAMPLER', env.OTEL_TRACES_SAMPLER!, `expected one of ${SAMPLERS.join(', ')}`);
  const sampler = samplerValue as SamplerName;
  let ratio = 1;
  const ratioValue = set(env.OTEL_TRACES_SAMPLER_ARG);
  if (ratioValue !== undefined && sampler.endsWith('traceidratio')) {
    ratio = Number(ratioValue);
    if (!/^(\d+(\.\d*)?|\.\d+)(e-?\d+)?$/i.test(ratioValue) || !(ratio >= 0 && ratio <= 1))
      throw invalid(
        'OTEL_TRACES_SAMPLER_ARG',
        ratioValue,
        `expected the sampling ratio of ${sampler}, a number from 0 to 1 (0.01 = 1%)`,
      );
  }
  return {
    url,
    protocol: protocolValue as OtlpProtocol,
    headers,
    timeoutMs,
    serviceName,
    resourceAttributes,
    sampler,
    ratio,
  };
}

function httpUrl(variable: string, value: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw invalid(
      variable,
      value,
      'expected an http:// or https:// URL (the collector’s OTLP/HTTP endpoint, e.g. http://localhost:4318)',
    );
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw invalid(
      variable,
      value,
      'expected an http:// or https:// URL (the collector’s OTLP/HTTP endpoint, e.g. http://localhost:4318)',
    );
  return value;
}

/** `k1=v1,k2=v2` (W3C baggage form, values percent-encoded); a header's value is never repeated in an error. */
function keyValues(variable: string, value: string | undefined, showValue: boolean): Record<string, string> {
  const out: Record<string, string> = {};
  if (set(value) === undefined) return out;
  for (const [index, item] of value!.split(',').entries()) {
    if (item.trim() === '') continue;
    const eq = item.indexOf('=');
    const key = eq < 0 ? '' : item.slice(0, eq).trim();
    let decoded: string | undefined;
    try {
      decoded = eq < 0 ? undefined : decodeURIComponent(item.slice(eq + 1).trim());
    } catch {
      decoded = undefined;
    }
    if (key === '' || decoded === undefined) {
      const shown = showValue ? JSON.stringify(item.trim()) : `entry ${index + 1}`;
      throw new MsgbridgeError(
        'CONFIG_INVALID',
        `invalid configuration:\n  - ${variable}: ${shown} is not key=value (comma-separated, values percent-encoded)`,
      );
    }
    out[key] = decoded;
  }
  return out;
}

// ---- the interface the roles use ----

export type TraceSpanKind = 'server' | 'client' | 'producer' | 'consumer' | 'internal';
export type TraceAttributes = Record<string, string | number | boolean | undefined>;

/** A span in progress. */
export interface TraceSpan {
  /** Its W3C `traceparent`: what goes into the headers of a record or call it causes. */
  readonly traceparent: string;
  /** False for a span the sampler left out (it still propagates its trace, unsampled). */
  readonly recording: boolean;
  setAttribute(key: string, value: string | number | boolean): void;
  addEvent(name: string, attributes?: TraceAttributes): void;
  /** Marks it failed: status ERROR and `error.type`. */
  fail(errorType: string, message?: string): void;
  /** Ends it; later calls change nothing. */
  end(): void;
}

export interface StartSpanOptions {
  /** A span of this process, or a W3C `traceparent` received (an invalid one starts a new trace). */
  parent?: TraceSpan | string;
  /** W3C `tracestate` received with a `traceparent` parent. */
  tracestate?: string;
  /** `traceparent`s of the spans this one was caused by (invalid ones are left out). */
  links?: readonly (string | undefined)[];
  attributes?: TraceAttributes;
}

export interface Tracer {
  /** False: tracing is off, and callers do no span work at all. */
  readonly enabled: boolean;
  startSpan(name: string, kind: TraceSpanKind, options?: StartSpanOptions): TraceSpan;
  /** Exports every ended span (drain), then stops; bounded by `timeoutMs`, never throws. */
  shutdown(timeoutMs: number): Promise<void>;
}

const NOOP_SPAN: TraceSpan = {
  traceparent: '',
  recording: false,
  setAttribute() {},
  addEvent() {},
  fail() {},
  end() {},
};

/** A span the sampler left out, standing for its parent's trace: nothing but its traceparent. */
function unsampled(traceparent: string): TraceSpan {
  return { ...NOOP_SPAN, traceparent };
}

/** Tracing off. */
export const NOOP_TRACER: Tracer = {
  enabled: false,
  startSpan: () => NOOP_SPAN,
  shutdown: async () => {},
};

/** How long a drain waits for the last spans to be exported (ms). */
export const TRACING_FLUSH_MS = 2000;

export interface StartTracingOptions {
  /** The role, for the default service name (`msgbridge-<role>`) and the `msgbridge.role` resource attribute. */
  role: string;
  /** Where the OTEL_* variables are read (default process.env). */
  env?: Env;
  logger?: Logger;
}

/**
 * The role's tracer: NOOP_TRACER when the variables leave tracing off (the SDK is then never
 * imported), else an SDK tracer provider of its own exporting over OTLP/HTTP. Throws
 * CONFIG_INVALID on a bad variable.
 */
export async function startTracing(options: StartTracingOptions): Promise<Tracer> {
  const settings = readTracingSettings(options.env ?? process.env, `msgbridge-${options.role}`);
  if (!settings) return NOOP_TRACER;
  const { createSdkTracer } = await import('./tracing-sdk.js');
  const tracer = createSdkTracer(settings, options.role, options.logger);
  options.logger?.info(
    {
      url: settings.url,
      protocol: settings.protocol,
      serviceName: settings.serviceName,
      sampler: settings.sampler,
      ...(settings.sampler.endsWith('traceidratio') ? { ratio: settings.ratio } : {}),
    },
    'OpenTelemetry tracing on',
  );
  return tracer;
}

// ---- conventions shared by the roles (OpenTelemetry semantic conventions) ----

/**
 * A Kafka producer span of one record (messaging semantic conventions: `send <topic>`, kind
 * producer), from the publish call to its acks=all acknowledgement; its `traceparent` is the
 * one written into the record's headers. The record key is a recipient or a customer number
 * (personal data in some jurisdictions): it is recorded, as the conventions say, only when
 * tracing is on.
 */
export function startKafkaSendSpan(
  tracer: Tracer,
  parent: TraceSpan | string | undefined,
  topic: string,
  key: string | undefined,
): TraceSpan {
  // Every sampler offered decides a child as its parent (parent-based, or by the trace id it
  // shares): a span left out has children left out too, so none is made; the record carries the
  // parent's traceparent (unsampled), which is all the next role needs.
  if (typeof parent === 'object' && !parent.recording) return unsampled(parent.traceparent);
  return tracer.startSpan(`send ${topic}`, 'producer', {
    parent,
    attributes: {
      'messaging.system': 'kafka',
      'messaging.operation.type': 'send',
      'messaging.operation.name': 'send',
      'messaging.destination.name': topic,
      'messaging.kafka.message.key': key,
    },
  });
}

/**
 * A Kafka consumer span of one record (`process <topic>`, kind consumer), continuing and linking
 * its `traceparent`; `alsoCausedBy`: the traceparents of other records it links to.
 */
export function startKafkaProcessSpan(
  tracer: Tracer,
  record: {
    topic: string;
    partition: number;
    offset: string;
    traceparent: string | undefined;
    key?: string | undefined;
  },
  groupId: string,
  alsoCausedBy?: readonly (string | undefined)[],
): TraceSpan {
  return tracer.startSpan(`process ${record.topic}`, 'consumer', {
    parent: record.traceparent,
    links: alsoCausedBy ? [record.traceparent, ...alsoCausedBy] : [record.traceparent],
    attributes: {
      'messaging.system': 'kafka',
      'messaging.operation.type': 'process',
      'messaging.operation.name': 'process',
      'messaging.destination.name': record.topic,
      'messaging.destination.partition.id': String(record.partition),
      'messaging.kafka.offset': Number(record.offset),
      'messaging.consumer.group.name': groupId,
      'messaging.kafka.message.key': record.key,
    },
  });
}

/** A header value as the one string it carries (Kafka headers may repeat or be bytes). */
export function headerText(value: string | Buffer | (string | Buffer)[] | undefined): string | undefined {
  if (value === undefined) return undefined;
  if (Array.isArray(value)) return headerText(value[0]);
  return typeof value === 'string' ? value : value.toString('latin1');
}
