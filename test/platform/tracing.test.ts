import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { isMsgbridgeError } from '../../src/platform/errors.js';
import { NOOP_TRACER, readTracingSettings, startKafkaSendSpan, startTracing } from '../../src/platform/tracing.js';

const read = (env: Record<string, string>) => readTracingSettings(env, 'msgbridge-ingress');

/** The CONFIG_INVALID message of a refused environment. */
function refusal(env: Record<string, string>): string {
  try {
    read(env);
  } catch (err) {
    expect(isMsgbridgeError(err, 'CONFIG_INVALID')).toBe(true);
    return (err as Error).message;
  }
  throw new Error('accepted');
}

const ENDPOINT = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' };

describe('tracing settings from the OTEL_* variables', () => {
  it('is off without an endpoint, with OTEL_SDK_DISABLED=true and with OTEL_TRACES_EXPORTER=none', async () => {
    expect(read({})).toBeUndefined();
    expect(
      read({ OTEL_SERVICE_NAME: 'x', OTEL_TRACES_SAMPLER: 'always_on', OTEL_EXPORTER_OTLP_ENDPOINT: '  ' }),
    ).toBeUndefined();
    expect(read({ ...ENDPOINT, OTEL_SDK_DISABLED: 'true' })).toBeUndefined();
    expect(read({ ...ENDPOINT, OTEL_SDK_DISABLED: 'TRUE' })).toBeUndefined();
    expect(read({ ...ENDPOINT, OTEL_TRACES_EXPORTER: 'none' })).toBeUndefined();
    expect(await startTracing({ role: 'ingress', env: {} })).toBe(NOOP_TRACER);
  });

  it('reads the defaults of the specification: http/protobuf, parentbased_always_on, 10 s, msgbridge-<role>', () => {
    expect(read({ ...ENDPOINT, OTEL_SDK_DISABLED: 'false' })).toEqual({
      url: 'http://collector:4318/v1/traces',
      protocol: 'http/protobuf',
      headers: {},
      timeoutMs: 10_000,
      serviceName: 'msgbridge-ingress',
      resourceAttributes: {},
      sampler: 'parentbased_always_on',
      ratio: 1,
    });
  });

  it('appends /v1/traces to the general endpoint only; the traces endpoint is used as it is and wins', () => {
    expect(read({ OTEL_EXPORTER_OTLP_ENDPOINT: 'https://otel.example/base/' })!.url).toBe(
      'https://otel.example/base/v1/traces',
    );
    expect(read({ ...ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://other:4318/custom' })!.url).toBe(
      'http://other:4318/custom',
    );
  });

  it('reads protocol, headers, timeout, service name, resource attributes and sampler, the signal-specific variables first', () => {
    const settings = read({
      ...ENDPOINT,
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
      OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json',
      OTEL_EXPORTER_OTLP_HEADERS: 'x-team=relay, authorization=Bearer%20abc',
      OTEL_EXPORTER_OTLP_TRACES_HEADERS: 'x-team=tracing',
      OTEL_EXPORTER_OTLP_TIMEOUT: '5000',
      OTEL_EXPORTER_OTLP_TRACES_TIMEOUT: '2500',
      OTEL_RESOURCE_ATTRIBUTES: 'deployment.environment.name=prod,service.name=from-resource',
      OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
      OTEL_TRACES_SAMPLER_ARG: '0.01',
    })!;
    expect(settings).toMatchObject({
      protocol: 'http/json',
      headers: { 'x-team': 'tracing', authorization: 'Bearer abc' },
      timeoutMs: 2500,
      serviceName: 'from-resource',
      resourceAttributes: { 'deployment.environment.name': 'prod' },
      sampler: 'parentbased_traceidratio',
      ratio: 0.01,
    });
    expect(
      read({ ...ENDPOINT, OTEL_SERVICE_NAME: 'relay', OTEL_RESOURCE_ATTRIBUTES: 'service.name=other' })!.serviceName,
    ).toBe('relay');
    // The ratio is an argument of the ratio samplers only.
    expect(read({ ...ENDPOINT, OTEL_TRACES_SAMPLER: 'always_on', OTEL_TRACES_SAMPLER_ARG: 'anything' })!.ratio).toBe(1);
    expect(read({ ...ENDPOINT, OTEL_TRACES_SAMPLER: 'TraceIdRatio', OTEL_TRACES_SAMPLER_ARG: '1e-2' })).toMatchObject({
      sampler: 'traceidratio',
      ratio: 0.01,
    });
  });

  it('refuses every bad value with a message naming the variable and what it expects', () => {
    expect(refusal({ ...ENDPOINT, OTEL_SDK_DISABLED: 'yes' })).toMatch(
      /OTEL_SDK_DISABLED="yes": expected true or false/,
    );
    expect(refusal({ ...ENDPOINT, OTEL_TRACES_EXPORTER: 'zipkin' })).toMatch(
      /OTEL_TRACES_EXPORTER="zipkin": expected otlp or none/,
    );
    expect(refusal({ OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4318' })).toMatch(
      /OTEL_EXPORTER_OTLP_ENDPOINT="collector:4318": expected an http:\/\/ or https:\/\/ URL/,
    );
    expect(refusal({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'not a url' })).toMatch(
      /OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="not a url": expected an http/,
    );
    expect(refusal({ ...ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' })).toMatch(
      /OTEL_EXPORTER_OTLP_PROTOCOL="grpc": grpc is not supported by msgbridge: use http\/protobuf \(the default\) or http\/json/,
    );
    expect(refusal({ ...ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'thrift' })).toMatch(
      /OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="thrift": expected http\/protobuf or http\/json/,
    );
    expect(refusal({ ...ENDPOINT, OTEL_EXPORTER_OTLP_TIMEOUT: '10s' })).toMatch(
      /OTEL_EXPORTER_OTLP_TIMEOUT="10s": expected milliseconds/,
    );
    expect(refusal({ ...ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_TIMEOUT: '0' })).toMatch(
      /OTEL_EXPORTER_OTLP_TRACES_TIMEOUT="0": expected milliseconds/,
    );
    expect(refusal({ ...ENDPOINT, OTEL_TRACES_SAMPLER: 'jaeger_remote' })).toMatch(
      /OTEL_TRACES_SAMPLER="jaeger_remote": expected one of always_on, always_off, traceidratio/,
    );
    expect(refusal({ ...ENDPOINT, OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '1%' })).toMatch(
      /OTEL_TRACES_SAMPLER_ARG="1%": expected the sampling ratio of traceidratio, a number from 0 to 1/,
    );
    expect(
      refusal({ ...ENDPOINT, OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '2' }),
    ).toMatch(/OTEL_TRACES_SAMPLER_ARG="2"/);
    expect(refusal({ ...ENDPOINT, OTEL_RESOURCE_ATTRIBUTES: 'team' })).toMatch(
      /OTEL_RESOURCE_ATTRIBUTES: "team" is not key=value/,
    );
  });

  it('never repeats a header value in an error: it may be a credential', () => {
    const message = refusal({ ...ENDPOINT, OTEL_EXPORTER_OTLP_HEADERS: 'x-ok=1,api-key-secret-value' });
    expect(message).toMatch(/OTEL_EXPORTER_OTLP_HEADERS: entry 2 is not key=value/);
    expect(message).not.toContain('secret-value');
    expect(refusal({ ...ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_HEADERS: 'authorization=%E0%A4%A' })).not.toContain('%E0');
  });

  it('starts an SDK tracer whose spans propagate W3C traceparents, sampled or not', async () => {
    const tracer = await startTracing({
      role: 'sender',
      env: { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9', OTEL_TRACES_SAMPLER: 'always_off' },
    });
    expect(tracer.enabled).toBe(true);
    const incoming = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
    // parentbased is not asked for: always_off leaves the span out, but it still carries the trace on, unsampled.
    const span = tracer.startSpan('x', 'consumer', { parent: incoming, links: [incoming, 'garbage', undefined] });
    expect(span.recording).toBe(false);
    expect(span.traceparent).toMatch(/^00-0af7651916cd43dd8448eb211c80319c-[0-9a-f]{16}-00$/);
    // A record's producer span under a span left out is none at all: the record carries the parent's traceparent.
    expect(startKafkaSendSpan(tracer, span, 'topic', 'key').traceparent).toBe(span.traceparent);
    const fresh = tracer.startSpan('y', 'server', {
      parent: '00-00000000000000000000000000000000-b7ad6b7169203331-01',
    });
    expect(fresh.traceparent).not.toContain('00000000000000000000000000000000');
    span.end();
    fresh.end();
    await tracer.shutdown(1000);
  });

  it('exports over OTLP/HTTP with protobuf by default, with the configured headers, at shutdown', async () => {
    const received: { path: string | undefined; type: string | undefined; team: string | undefined; bytes: number }[] =
      [];
    const server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        received.push({
          path: req.url,
          type: req.headers['content-type'],
          team: req.headers['x-team'] as string | undefined,
          bytes: Buffer.concat(chunks).length,
        });
        res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const port = (server.address() as AddressInfo).port;
      const tracer = await startTracing({
        role: 'tracker',
        env: { OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}`, OTEL_EXPORTER_OTLP_HEADERS: 'x-team=relay' },
      });
      tracer.startSpan('process t', 'consumer').end();
      await tracer.shutdown(5000);
      expect(received).toHaveLength(1);
      expect(received[0]).toMatchObject({ path: '/v1/traces', type: 'application/x-protobuf', team: 'relay' });
      expect(received[0]!.bytes).toBeGreaterThan(50);
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});
