import {
  createTraceState,
  diag,
  isSpanContextValid,
  DiagLogLevel,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Context,
  type Link,
  type Span,
  type SpanContext,
} from '@opentelemetry/api';
import { parseTraceParent } from '@opentelemetry/core';
import { defaultResource, resourceFromAttributes } from '@opentelemetry/resources';
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BasicTracerProvider,
  BatchSpanProcessor,
  ParentBasedSampler,
  TraceIdRatioBasedSampler,
  type Sampler,
  type SpanExporter,
} from '@opentelemetry/sdk-trace-base';
import { ATTR_SERVICE_NAME } from '@opentelemetry/semantic-conventions';
import type { Logger } from './logger.js';
import type {
  StartSpanOptions,
  TraceAttributes,
  TraceSpan,
  TraceSpanKind,
  Tracer,
  TracingSettings,
} from './tracing.js';

/**
 * The OpenTelemetry SDK behind tracing.ts's Tracer, imported only when tracing is on. One
 * tracer provider per role (its own resource, `service.name`, sampler, batch processor and
 * OTLP/HTTP exporter), not registered globally: parents are passed explicitly as spans or
 * `traceparent` strings, so no context manager (AsyncLocalStorage) runs on any path.
 */

const KINDS: Record<TraceSpanKind, SpanKind> = {
  server: SpanKind.SERVER,
  client: SpanKind.CLIENT,
  producer: SpanKind.PRODUCER,
  consumer: SpanKind.CONSUMER,
  internal: SpanKind.INTERNAL,
};

export function createSdkTracer(settings: TracingSettings, role: string, logger: Logger | undefined): Tracer {
  if (logger) forwardExportErrors(logger);
  const provider = new BasicTracerProvider({
    resource: defaultResource().merge(
      resourceFromAttributes({
        ...settings.resourceAttributes,
        [ATTR_SERVICE_NAME]: settings.serviceName,
        'msgbridge.role': role,
      }),
    ),
    sampler: samplerOf(settings),
    spanProcessors: [new BatchSpanProcessor(new LazyExporter(settings))],
  });
  return new SdkTracer(provider, provider.getTracer('msgbridge'));
}

function samplerOf(settings: TracingSettings): Sampler {
  const ratio = () => new TraceIdRatioBasedSampler(settings.ratio);
  switch (settings.sampler) {
    case 'always_on':
      return new AlwaysOnSampler();
    case 'always_off':
      return new AlwaysOffSampler();
    case 'traceidratio':
      return ratio();
    case 'parentbased_always_on':
      return new ParentBasedSampler({ root: new AlwaysOnSampler() });
    case 'parentbased_always_off':
      return new ParentBasedSampler({ root: new AlwaysOffSampler() });
    case 'parentbased_traceidratio':
      return new ParentBasedSampler({ root: ratio() });
  }
}

/**
 * The OTLP/HTTP exporter of the configured protocol, loaded at the first export (its module
 * is the larger part of the SDK): protobuf (the OTLP default) or JSON.
 */
class LazyExporter implements SpanExporter {
  private exporter: Promise<SpanExporter> | undefined;

  constructor(private readonly settings: TracingSettings) {}

  private load(): Promise<SpanExporter> {
    const { url, headers, timeoutMs, protocol } = this.settings;
    const config = { url, headers, timeoutMillis: timeoutMs };
    this.exporter ??=
      protocol === 'http/json'
        ? import('@opentelemetry/exporter-trace-otlp-http').then((m) => new m.OTLPTraceExporter(config))
        : import('@opentelemetry/exporter-trace-otlp-proto').then((m) => new m.OTLPTraceExporter(config));
    return this.exporter;
  }

  export(spans: Parameters<SpanExporter['export']>[0], done: Parameters<SpanExporter['export']>[1]): void {
    this.load().then(
      (exporter) => exporter.export(spans, done),
      (error: unknown) => done({ code: 1, error: error as Error }),
    );
  }

  async shutdown(): Promise<void> {
    if (this.exporter) await (await this.exporter).shutdown();
  }

  async forceFlush(): Promise<void> {
    if (this.exporter) await (await this.exporter).forceFlush?.();
  }
}

let errorsForwarded = false;

/**
 * Export failures (collector down, refused) reach the SDK's diagnostic logger: forwarded to the
 * process's log at warn, at most one line a minute, so an unreachable collector is said without
 * flooding the log. Spans that cannot be exported are dropped (the batch queue is bounded).
 */
function forwardExportErrors(logger: Logger): void {
  if (errorsForwarded) return;
  errorsForwarded = true;
  let last = 0;
  const report = (message: string, ...args: unknown[]) => {
    const now = Date.now();
    if (now - last < 60_000) return;
    last = now;
    const detail = args
      .map((a) =>
        a instanceof Error
          ? a.message
          : typeof a === 'string'
            ? a
            : (() => {
                try {
                  return JSON.stringify(a);
                } catch {
                  return String(a);
                }
              })(),
      )
      .join(' ');
    logger.warn(
      { detail: `${message} ${detail}`.trim().slice(0, 500) },
      'OpenTelemetry: spans could not be exported (the next such line in a minute at the earliest)',
    );
  };
  diag.setLogger(
    { error: report, warn: report, info: () => {}, debug: () => {}, verbose: () => {} },
    { logLevel: DiagLogLevel.WARN, suppressOverrideMessage: true },
  );
}

class SdkTracer implements Tracer {
  readonly enabled = true;

  constructor(
    private readonly provider: BasicTracerProvider,
    private readonly tracer: ReturnType<BasicTracerProvider['getTracer']>,
  ) {}

  startSpan(name: string, kind: TraceSpanKind, options?: StartSpanOptions): TraceSpan {
    let parentContext: Context = ROOT_CONTEXT;
    const parent = options?.parent;
    if (parent instanceof SdkSpan) parentContext = trace.setSpan(ROOT_CONTEXT, parent.span);
    else if (typeof parent === 'string') {
      const remote = remoteContext(parent, options?.tracestate);
      if (remote) parentContext = trace.setSpanContext(ROOT_CONTEXT, remote);
    }
    let links: Link[] | undefined;
    if (options?.links) {
      for (const traceparent of options.links) {
        const linked = traceparent === undefined ? undefined : remoteContext(traceparent, undefined);
        if (linked) (links ??= []).push({ context: linked });
      }
    }
    // The attributes are set once the sampler decided (none of the samplers msgbridge offers reads
    // them): a span left out then costs no attribute object at all, which is most spans at 1%.
    const span = this.tracer.startSpan(name, { kind: KINDS[kind], links }, parentContext);
    const attributes = options?.attributes;
    if (attributes && span.isRecording()) {
      for (const key in attributes) {
        const value = attributes[key];
        if (value !== undefined) span.setAttribute(key, value);
      }
    }
    return new SdkSpan(span);
  }

  async shutdown(timeoutMs: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      this.provider.shutdown().catch(() => undefined),
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, timeoutMs);
        timer.unref();
      }),
    ]);
    clearTimeout(timer);
  }
}

function remoteContext(traceparent: string, tracestate: string | undefined): SpanContext | undefined {
  // The propagator's own rules: the header's form, then no all-zero ids.
  const parsed = parseTraceParent(traceparent);
  if (!parsed || !isSpanContextValid(parsed)) return undefined;
  parsed.isRemote = true;
  if (tracestate) parsed.traceState = createTraceState(tracestate);
  return parsed;
}

function definedAttributes(
  attributes: TraceAttributes | undefined,
): Record<string, string | number | boolean> | undefined {
  if (!attributes) return undefined;
  const out: Record<string, string | number | boolean> = {};
  for (const key in attributes) {
    const value = attributes[key];
    if (value !== undefined) out[key] = value;
  }
  return out;
}

class SdkSpan implements TraceSpan {
  private ended = false;
  private header: string | undefined;

  constructor(readonly span: Span) {}

  get traceparent(): string {
    if (this.header === undefined) {
      const c = this.span.spanContext();
      this.header = `00-${c.traceId}-${c.spanId}-${(c.traceFlags & 1) === 1 ? '01' : '00'}`;
    }
    return this.header;
  }

  get recording(): boolean {
    return this.span.isRecording();
  }

  setAttribute(key: string, value: string | number | boolean): void {
    this.span.setAttribute(key, value);
  }

  addEvent(name: string, attributes?: TraceAttributes): void {
    this.span.addEvent(name, definedAttributes(attributes));
  }

  fail(errorType: string, message?: string): void {
    this.span.setAttribute('error.type', errorType);
    this.span.setStatus({ code: SpanStatusCode.ERROR, message });
  }

  end(): void {
    if (this.ended) return;
    this.ended = true;
    this.span.end();
  }
}
