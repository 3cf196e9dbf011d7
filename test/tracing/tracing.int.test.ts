import { randomBytes, randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/load.js';
import type { Config } from '../../src/config/schema.js';
import { startIngress, type Ingress } from '../../src/ingress/index.js';
import { ensureTopics } from '../../src/kafka/topics.js';
import { startSender, type Sender } from '../../src/sender/index.js';
import { startSimulator, type RunningSimulator } from '../../src/simulator/index.js';
import { startTracker, type Tracker } from '../../src/tracker/index.js';
import { consumeRecords, kafkaBrokers, uniqueTopic, withAdmin } from '../helpers/kafka.js';
import { signedHeaders, statusEvent } from '../ingress/fixtures.js';
import { produceRequests, testLogger, textRequest } from '../sender/harness.js';
import { latestByKey, until } from '../tracker/harness.js';

/**
 * One send as one trace (README "Tracing"), exported over OTLP/HTTP (JSON) to a real receiver on
 * loopback: a send request produced with a traceparent → the sender (its consumer span, the
 * provider call as an HTTP client span carrying the W3C header to the simulator, the result's
 * producer span, the result's traceparent) → the tracker (its state change, a child and a link of
 * the result) ← the ingress (a status webhook continuing the provider's traceparent, and one
 * without: a new trace, linked by the tracker to the send's result).
 */

const BIZ = { id: 'biz_1', apiKey: 'key-biz-1', signingSecret: 'secret-biz-1' };
const SPAN_KIND = { server: 2, client: 3, producer: 4, consumer: 5 } as const;

interface ExportedSpan {
  service: string;
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  kind: number;
  attributes: Record<string, unknown>;
  links: { traceId: string; spanId: string }[];
  status: { code?: number };
}

type AnyValue = { stringValue?: string; intValue?: number | string; boolValue?: boolean; doubleValue?: number };
const valueOf = (v: AnyValue): unknown =>
  v.stringValue ?? (v.intValue !== undefined ? Number(v.intValue) : (v.boolValue ?? v.doubleValue));
const attributesOf = (list: { key: string; value: AnyValue }[] | undefined) =>
  Object.fromEntries((list ?? []).map((a) => [a.key, valueOf(a.value)]));

/** An OTLP/HTTP receiver of JSON trace exports: every span it was sent, with its service. */
async function startOtlpReceiver(): Promise<{
  url: string;
  spans: ExportedSpan[];
  requests: number;
  close(): Promise<void>;
}> {
  const spans: ExportedSpan[] = [];
  const state = { requests: 0 };
  const server: Server = createServer((req, res) => {
    void readBody(req).then((body) => {
      state.requests++;
      if (
        req.method !== 'POST' ||
        req.url !== '/v1/traces' ||
        !String(req.headers['content-type']).startsWith('application/json')
      ) {
        res.writeHead(400).end();
        return;
      }
      const request = JSON.parse(body.toString('utf8')) as {
        resourceSpans: {
          resource: { attributes: { key: string; value: AnyValue }[] };
          scopeSpans: {
            spans: (Omit<ExportedSpan, 'service' | 'attributes' | 'links'> & {
              attributes?: { key: string; value: AnyValue }[];
              links?: { traceId: string; spanId: string }[];
            })[];
          }[];
        }[];
      };
      for (const rs of request.resourceSpans) {
        const service = String(attributesOf(rs.resource.attributes)['service.name']);
        for (const ss of rs.scopeSpans) {
          for (const s of ss.spans) {
            spans.push({
              service,
              traceId: s.traceId,
              spanId: s.spanId,
              parentSpanId: s.parentSpanId ?? '',
              name: s.name,
              kind: s.kind,
              attributes: attributesOf(s.attributes),
              links: (s.links ?? []).map((l) => ({ traceId: l.traceId, spanId: l.spanId })),
              status: s.status ?? {},
            });
          }
        }
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    spans,
    get requests() {
      return state.requests;
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

/** The simulator behind a proxy that records the traceparent of every provider call. */
async function startRecordingProxy(
  target: string,
): Promise<{ url: string; traceparents: (string | undefined)[]; close(): Promise<void> }> {
  const traceparents: (string | undefined)[] = [];
  const server = createServer((req, res) => {
    void readBody(req).then(async (body) => {
      traceparents.push(req.headers.traceparent as string | undefined);
      const headers: Record<string, string> = {};
      for (const name of ['x-api-key', 'content-type', 'accept'])
        if (typeof req.headers[name] === 'string') headers[name] = req.headers[name];
      const answer = await fetch(`${target}${req.url}`, { method: req.method, headers, body });
      res
        .writeHead(answer.status, { 'content-type': answer.headers.get('content-type') ?? 'application/json' })
        .end(Buffer.from(await answer.arrayBuffer()));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    traceparents,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

const parts = (traceparent: string) => {
  const [, traceId, spanId, flags] = traceparent.split('-');
  return { traceId: traceId!, spanId: spanId!, flags: flags! };
};

describe('tracing across the roles', () => {
  const id = randomUUID().slice(0, 8);
  const topics = {
    messages: uniqueTopic('tc-messages'),
    deliveryStatus: uniqueTopic('tc-status'),
    webhooksDlq: uniqueTopic('tc-wdlq'),
    sendRequests: uniqueTopic('tc-requests'),
    sendResults: uniqueTopic('tc-results'),
    sendRequestsDlq: uniqueTopic('tc-rdlq'),
    sendLedger: uniqueTopic('tc-ledger'),
    messageState: uniqueTopic('tc-state'),
    conversations: uniqueTopic('tc-conv'),
    requestOutcomes: uniqueTopic('tc-outcomes'),
    inboundMessages: uniqueTopic('tc-inbound'),
  };
  let receiver: Awaited<ReturnType<typeof startOtlpReceiver>>;
  let simulator: RunningSimulator;
  let proxy: Awaited<ReturnType<typeof startRecordingProxy>>;
  let config: Config;
  let ingress: Ingress | undefined;
  let sender: Sender | undefined;
  let tracker: Tracker | undefined;

  beforeAll(async () => {
    const brokers = kafkaBrokers();
    await withAdmin((admin) =>
      ensureTopics(
        admin,
        [
          topics.messages,
          topics.deliveryStatus,
          topics.webhooksDlq,
          topics.sendRequests,
          topics.sendResults,
          topics.sendRequestsDlq,
          topics.sendLedger,
        ].map((topic) => ({
          topic,
          partitions: 3,
          replicationFactor: 1,
        })),
      ),
    );
    receiver = await startOtlpReceiver();
    simulator = await startSimulator({
      host: '127.0.0.1',
      port: 0,
      businesses: [BIZ],
      logger: testLogger('simulator'),
    });
    proxy = await startRecordingProxy(simulator.url);
    config = loadConfig({
      env: {},
      overrides: {
        kafka: { brokers, topics, createTopics: true, partitions: 3, replicationFactor: 1 },
        businesses: [{ id: BIZ.id, signingSecrets: [BIZ.signingSecret], apiKey: BIZ.apiKey }],
        provider: { url: proxy.url },
        ingress: { host: '127.0.0.1', port: 0, adminHost: '127.0.0.1', adminPort: 0 },
        sender: {
          groupId: `tc-sender-${id}`,
          stateDir: join(tmpdir(), 'msgbridge-test-state', `tracing-sender-${id}`),
          adminHost: '127.0.0.1',
          adminPort: 0,
          backoffInitialMs: 20,
          backoffMaxMs: 200,
        },
        tracker: {
          groupId: `tc-tracker-${id}`,
          transactionalIdPrefix: `tc-tx-${id}`,
          host: '127.0.0.1',
          port: 0,
          sessionTimeoutMs: 6000,
          stateDir: join(tmpdir(), 'msgbridge-test-state', `tracing-${id}`),
        },
      },
    });
    const tracingEnv = { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' };
    [ingress, sender, tracker] = await Promise.all([
      startIngress({ config, brokers, logger: testLogger('ingress'), tracingEnv }),
      startSender({ config, brokers, logger: testLogger('sender'), admin: false, tracingEnv }),
      startTracker({ config, brokers, logger: testLogger('tracker'), http: false, admin: false, tracingEnv }),
    ]);
    await Promise.all([sender.ready, tracker.ready]);
  }, 90_000);

  afterAll(async () => {
    await Promise.all([ingress?.drain(), sender?.drain(), tracker?.drain()]);
    await proxy?.close();
    await simulator?.close();
    await receiver?.close();
  });

  it('one send is one connected trace: request, sender, provider call, result, statuses through the ingress, state changes', async () => {
    // The producing service's span, as `msgbridge send` writes it.
    const origin = `00-${randomBytes(16).toString('hex')}-${randomBytes(8).toString('hex')}-01`;
    const trace = parts(origin).traceId;
    await produceRequests(topics.sendRequests, [
      {
        key: '+15550002222',
        value: textRequest('tc-1', '+15550002222', 'hi', { businessId: BIZ.id }),
        headers: { traceparent: origin },
      },
    ]);

    const [result] = await consumeRecords(topics.sendResults, 1, { timeoutMs: 60_000 });
    const accepted = JSON.parse(result!.value.toString()) as { outcome: string; messageId: string };
    expect(accepted.outcome).toBe('accepted');
    const resultParent = parts(result!.headers.traceparent!);
    expect(resultParent).toMatchObject({ traceId: trace, flags: '01' });
    expect(resultParent.spanId).not.toBe(parts(origin).spanId);

    // The provider got the W3C header of the call's own span, in the request's trace.
    expect(proxy.traceparents).toHaveLength(1);
    const providerCall = parts(proxy.traceparents[0]!);
    expect(providerCall.traceId).toBe(trace);

    // The tracker has the accepted result before any status (a status first is merged later, and has no result to link
    // to yet).
    await until(
      'the accepted state',
      async () => (await latestByKey(topics.messageState, 300)).latest.get(accepted.messageId)?.requestId === 'tc-1',
    );

    // A provider that propagates the trace context of the send into its status webhook, and one that does not.
    const delivered = statusEvent(accepted.messageId, 'delivered', { timestamp: '1700000002' });
    const read = statusEvent(accepted.messageId, 'read', { timestamp: '1700000003' });
    const post = (body: string, extra: Record<string, string>) =>
      fetch(`${ingress!.address}/webhooks/${BIZ.id}/delivery_status`, {
        method: 'POST',
        body,
        headers: signedHeaders(BIZ.signingSecret, body, extra),
      });
    expect((await post(delivered, { traceparent: proxy.traceparents[0]! })).status).toBe(200);
    expect((await post(read, {})).status).toBe(200);

    const statuses = await consumeRecords(topics.deliveryStatus, 2, { timeoutMs: 30_000 });
    const deliveredRecord = statuses.find((r) => r.value.toString() === delivered)!;
    const readRecord = statuses.find((r) => r.value.toString() === read)!;
    expect(parts(deliveredRecord.headers.traceparent!).traceId).toBe(trace);
    // Without a traceparent from the provider: a new trace, whose traceparent the record carries.
    const readTrace = parts(readRecord.headers.traceparent!).traceId;
    expect(readTrace).not.toBe(trace);

    await until(
      'the read state',
      async () => (await latestByKey(topics.messageState, 300)).latest.get(accepted.messageId)?.status === 'read',
    );

    // Drains flush the spans (bounded); then every span is in the receiver.
    await Promise.all([ingress!.drain(), sender!.drain(), tracker!.drain()]);
    const spans = receiver.spans;
    const byId = new Map(spans.map((s) => [s.spanId, s]));
    const one = (predicate: (s: ExportedSpan) => boolean, what: string): ExportedSpan => {
      const found = spans.filter(predicate);
      expect(found, what).toHaveLength(1);
      return found[0]!;
    };

    // Sender: process (child of the request's span) → provider call (client) and the result's send (producer).
    const process = one(
      (s) => s.service === 'msgbridge-sender' && s.kind === SPAN_KIND.consumer,
      'the sender’s process span',
    );
    expect(process).toMatchObject({
      traceId: trace,
      parentSpanId: parts(origin).spanId,
      name: `process ${topics.sendRequests}`,
    });
    expect(process.attributes).toMatchObject({
      'messaging.system': 'kafka',
      'messaging.operation.type': 'process',
      'messaging.destination.name': topics.sendRequests,
      'messaging.consumer.group.name': `tc-sender-${id}`,
      'msgbridge.request_id': 'tc-1',
    });
    expect(process.links).toEqual([{ traceId: trace, spanId: parts(origin).spanId }]);
    const call = one((s) => s.service === 'msgbridge-sender' && s.kind === SPAN_KIND.client, 'the provider call');
    expect(call).toMatchObject({
      traceId: trace,
      parentSpanId: process.spanId,
      spanId: providerCall.spanId,
      name: 'POST',
    });
    expect(call.attributes).toMatchObject({
      'http.request.method': 'POST',
      'http.response.status_code': 200,
      'server.address': '127.0.0.1',
    });
    expect(call.attributes['url.full']).toBe(`${proxy.url}/v1/businesses/${BIZ.id}/send/messages`);
    expect(JSON.stringify(call)).not.toContain(BIZ.apiKey);
    const resultSend = one(
      (s) => s.service === 'msgbridge-sender' && s.kind === SPAN_KIND.producer,
      'the result’s producer span',
    );
    expect(resultSend).toMatchObject({
      traceId: trace,
      parentSpanId: process.spanId,
      spanId: resultParent.spanId,
      name: `send ${topics.sendResults}`,
    });
    expect(resultSend.attributes).toMatchObject({
      'messaging.system': 'kafka',
      'messaging.operation.type': 'send',
      'messaging.destination.name': topics.sendResults,
      'messaging.kafka.message.key': accepted.messageId,
    });

    // Ingress: the delivered webhook continues the provider's traceparent; its record's producer span is its child.
    const webhooks = spans.filter((s) => s.service === 'msgbridge-ingress' && s.kind === SPAN_KIND.server);
    expect(webhooks).toHaveLength(2);
    const deliveredHook = webhooks.find((s) => s.traceId === trace)!;
    expect(deliveredHook).toMatchObject({
      parentSpanId: providerCall.spanId,
      name: 'POST /webhooks/{businessId}/{topic}',
    });
    expect(deliveredHook.attributes).toMatchObject({
      'http.request.method': 'POST',
      'http.route': '/webhooks/{businessId}/{topic}',
      'http.response.status_code': 200,
    });
    const readHook = webhooks.find((s) => s.traceId === readTrace)!;
    expect(readHook.parentSpanId).toBe('');
    for (const [hook, record] of [
      [deliveredHook, deliveredRecord],
      [readHook, readRecord],
    ] as const) {
      const send = byId.get(parts(record.headers.traceparent!).spanId)!;
      expect(send).toMatchObject({
        service: 'msgbridge-ingress',
        kind: SPAN_KIND.producer,
        parentSpanId: hook.spanId,
        name: `send ${topics.deliveryStatus}`,
      });
      expect(send.attributes).toMatchObject({
        'messaging.destination.name': topics.deliveryStatus,
        'messaging.kafka.message.key': accepted.messageId,
      });
    }

    // Tracker: one span per state change, a child of the record that caused it and linked to it;
    // a status's change also links to the send's result.
    const changes = spans.filter((s) => s.service === 'msgbridge-tracker');
    expect(changes).toHaveLength(3);
    const resultLink = { traceId: trace, spanId: resultParent.spanId };
    const ofResult = changes.find((s) => s.name === `process ${topics.sendResults}`)!;
    expect(ofResult).toMatchObject({
      traceId: trace,
      parentSpanId: resultParent.spanId,
      kind: SPAN_KIND.consumer,
      links: [resultLink],
    });
    const ofDelivered = changes.find((s) => s.parentSpanId === parts(deliveredRecord.headers.traceparent!).spanId)!;
    expect(ofDelivered).toMatchObject({ traceId: trace, name: `process ${topics.deliveryStatus}` });
    expect(ofDelivered.links).toEqual([
      { traceId: trace, spanId: parts(deliveredRecord.headers.traceparent!).spanId },
      resultLink,
    ]);
    const ofRead = changes.find((s) => s.parentSpanId === parts(readRecord.headers.traceparent!).spanId)!;
    expect(ofRead.traceId).toBe(readTrace);
    expect(ofRead.links).toEqual([
      { traceId: readTrace, spanId: parts(readRecord.headers.traceparent!).spanId },
      resultLink,
    ]);
    expect(ofRead.attributes).toMatchObject({
      'msgbridge.state_topic': topics.messageState,
      'msgbridge.state_key': accepted.messageId,
      'messaging.consumer.group.name': `tc-tracker-${id}`,
    });

    // The whole send: every span of its trace is connected to the producing service's span.
    const sendTrace = spans.filter((s) => s.traceId === trace);
    for (const s of sendTrace) {
      let at: ExportedSpan | undefined = s;
      while (at && at.parentSpanId !== parts(origin).spanId) at = byId.get(at.parentSpanId);
      expect(at, `${s.service} ${s.name} reaches the request's span`).toBeDefined();
    }
    expect(new Set(sendTrace.map((s) => s.service))).toEqual(
      new Set(['msgbridge-sender', 'msgbridge-ingress', 'msgbridge-tracker']),
    );
  }, 90_000);

  it('off, the ingress passes the provider’s traceparent through unchanged and adds none', async () => {
    const off = await startIngress({ config, brokers: kafkaBrokers(), logger: testLogger('ingress'), tracingEnv: {} });
    try {
      const incoming = `00-${randomBytes(16).toString('hex')}-${randomBytes(8).toString('hex')}-01`;
      const withParent = statusEvent(`01JOFF${randomUUID().slice(0, 8)}`, 'sent');
      const without = statusEvent(`01JOFF${randomUUID().slice(0, 8)}`, 'sent');
      for (const [body, extra] of [
        [withParent, { traceparent: incoming }],
        [without, {}],
      ] as const) {
        const res = await fetch(`${off.address}/webhooks/${BIZ.id}/delivery_status`, {
          method: 'POST',
          body,
          headers: signedHeaders(BIZ.signingSecret, body, extra),
        });
        expect(res.status).toBe(200);
      }
      const records = await consumeRecords(topics.deliveryStatus, 4, { timeoutMs: 30_000 });
      expect(records.find((r) => r.value.toString() === withParent)!.headers.traceparent).toBe(incoming);
      expect(records.find((r) => r.value.toString() === without)!.headers).not.toHaveProperty('traceparent');
    } finally {
      await off.drain();
    }
  }, 60_000);
});
