import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { mkdtempSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/load.js';
import { createKafkajsClient } from '../../src/kafka/client.js';
import { startLocalBroker, type LocalBroker } from '../../src/local-kafka/local-broker.js';
import { startIngress } from '../../src/ingress/index.js';
import { startSender } from '../../src/sender/index.js';
import { startTracker } from '../../src/tracker/index.js';
import { startSimulator } from '../../src/simulator/index.js';
import { isMsgbridgeError } from '../../src/platform/errors.js';
import { runCli } from '../helpers/cli.js';
import { signedHeaders, statusEvent, messageId } from '../ingress/fixtures.js';

const SECRET = 'secure-signing-secret';

/** A role's configuration from environment variables alone, as a container gets it. */
function envConfig(env: Record<string, string>) {
  const id = randomUUID().slice(0, 8);
  return loadConfig({
    env: {
      MSGBRIDGE_BUSINESS_ID: 'biz_1',
      MSGBRIDGE_SIGNING_SECRET: SECRET,
      MSGBRIDGE__kafka__topics__messages: `sec-messages-${id}`,
      MSGBRIDGE__kafka__topics__deliveryStatus: `sec-status-${id}`,
      MSGBRIDGE__kafka__topics__webhooksDlq: `sec-dlq-${id}`,
      MSGBRIDGE__kafka__partitions: '1',
      MSGBRIDGE__kafka__replicationFactor: '1',
      MSGBRIDGE__kafka__connectionTimeoutMs: '2000',
      MSGBRIDGE__kafka__requestTimeoutMs: '5000',
      MSGBRIDGE__ingress__host: '127.0.0.1',
      MSGBRIDGE__ingress__port: '0',
      MSGBRIDGE_INGRESS_ADMIN_PORT: '0',
      ...env,
    },
  });
}

/** Posts one signed status event and reads it back from the secured broker. */
async function roundTrip(env: Record<string, string>): Promise<void> {
  const config = envConfig(env);
  const ingress = await startIngress({ config });
  try {
    const body = statusEvent(messageId());
    const res = await fetch(`${ingress.address}/webhooks/biz_1/delivery_status`, {
      method: 'POST',
      body,
      headers: signedHeaders(SECRET, body),
    });
    expect(res.status).toBe(200);
    const consumer = createKafkajsClient(config.kafka, { clientId: 'secure-test-reader' }).consumer({
      groupId: `secure-${randomUUID()}`,
      maxWaitTimeInMs: 100,
    });
    await consumer.connect();
    const values: string[] = [];
    await consumer.subscribe({ topics: [config.kafka.topics.deliveryStatus], fromBeginning: true });
    await consumer.run({ eachMessage: async ({ message }) => void values.push(message.value!.toString()) });
    const deadline = Date.now() + 20_000;
    while (values.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    await consumer.disconnect();
    expect(values).toEqual([body]);
  } finally {
    await ingress.drain();
  }
}

async function startFailure(env: Record<string, string>): Promise<string> {
  const error = await startIngress({ config: envConfig(env) }).then(
    async (ingress) => {
      await ingress.drain();
      return undefined;
    },
    (err: unknown) => err,
  );
  expect(isMsgbridgeError(error, 'KAFKA_CONNECT_FAILED'), String(error)).toBe(true);
  return (error as Error).message;
}

/**
 * The relay against secured brokers started by this file from the cached jars, with a
 * throw-away CA: SASL_SSL with SCRAM-SHA-512, and mutual TLS. Everything is configured by
 * environment variables alone (KAFKA_SSL_CA_FILE, KAFKA_SSL_CERT_FILE, KAFKA_SSL_KEY_FILE,
 * KAFKA_SASL_*), with both Kafka clients, and each way of getting it wrong fails with one line.
 */
describe('secured Kafka from environment variables alone', () => {
  let scram: LocalBroker;
  let mtls: LocalBroker;

  beforeAll(async () => {
    [scram, mtls] = await Promise.all([
      startLocalBroker({ heapMb: 320, partitions: 1, secure: 'scram' }),
      startLocalBroker({ heapMb: 320, partitions: 1, secure: 'mtls' }),
    ]);
  }, 180_000);
  afterAll(async () => {
    await Promise.all([scram?.stop(), mtls?.stop()]);
  });

  it.each(['platformatic', 'kafkajs'] as const)(
    'SASL_SSL (SCRAM-SHA-512, private CA): the ingress with %s publishes and the event reads back',
    async (client) => {
      await roundTrip({ ...scram.client!.env, MSGBRIDGE__kafka__client: client });
    },
  );

  it.each(['platformatic', 'kafkajs'] as const)(
    'mutual TLS: the ingress with %s publishes and the event reads back',
    async (client) => {
      await roundTrip({ ...mtls.client!.env, MSGBRIDGE__kafka__client: client });
    },
  );

  it.each(['scram', 'mtls'] as const)(
    'the sender over %s: a request in, the created id out',
    async (mode) => {
      const broker = mode === 'scram' ? scram : mtls;
      const simulator = await startSimulator({
        host: '127.0.0.1',
        port: 0,
        businesses: [{ id: 'biz_1', apiKey: 'key-1', signingSecret: SECRET }],
      });
      const id = randomUUID().slice(0, 8);
      const config = envConfig({
        ...broker.client!.env,
        MSGBRIDGE_API_KEY: 'key-1',
        MSGBRIDGE_PROVIDER_URL: simulator.url,
        MSGBRIDGE__kafka__topics__sendRequests: `sec-req-${id}`,
        MSGBRIDGE__kafka__topics__sendResults: `sec-res-${id}`,
        MSGBRIDGE__kafka__topics__sendRequestsDlq: `sec-rdlq-${id}`,
        MSGBRIDGE__kafka__topics__sendLedger: `sec-ledger-${id}`,
        MSGBRIDGE_SENDER_STATE_DIR: mkdtempSync(join(tmpdir(), 'msgbridge-sec-sender-')),
        MSGBRIDGE__sender__groupId: `sec-sender-${id}`,
      });
      const sender = await startSender({ config, admin: false });
      try {
        await sender.ready;
        const kafka = createKafkajsClient(config.kafka, { clientId: 'secure-test' });
        const producer = kafka.producer();
        await producer.connect();
        await producer.send({
          topic: config.kafka.topics.sendRequests,
          messages: [
            {
              key: '+15550002222',
              value: JSON.stringify({
                requestId: `sec-${id}`,
                type: 'template',
                number: '+15550002222',
                templateName: 'order_update',
                parameters: [{ name: 'order', value: '1' }],
              }),
            },
          ],
        });
        await producer.disconnect();
        const consumer = kafka.consumer({ groupId: `secure-${randomUUID()}`, maxWaitTimeInMs: 100 });
        const results: Record<string, unknown>[] = [];
        await consumer.connect();
        await consumer.subscribe({ topics: [config.kafka.topics.sendResults], fromBeginning: true });
        await consumer.run({
          eachMessage: async ({ message }) =>
            void results.push(JSON.parse(message.value!.toString()) as Record<string, unknown>),
        });
        const deadline = Date.now() + 30_000;
        while (results.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
        await consumer.disconnect();
        expect(results).toEqual([
          expect.objectContaining({
            requestId: `sec-${id}`,
            outcome: 'accepted',
            messageId: simulator.sends()[0]!.messageId,
          }),
        ]);
      } finally {
        await sender.drain();
        await simulator.close();
      }
    },
    90_000,
  );

  it.each(['scram', 'mtls'] as const)(
    'the tracker over %s: transactions commit, the state reads back with read_committed',
    async (mode) => {
      const broker = mode === 'scram' ? scram : mtls;
      const id = randomUUID().slice(0, 8);
      const config = envConfig({
        ...broker.client!.env,
        MSGBRIDGE__kafka__topics__sendResults: `sec-tres-${id}`,
        MSGBRIDGE__kafka__topics__deliveryStatus: `sec-tstatus-${id}`,
        MSGBRIDGE__kafka__topics__messages: `sec-tmessages-${id}`,
        MSGBRIDGE__kafka__topics__messageState: `sec-tstate-${id}`,
        MSGBRIDGE__kafka__topics__conversations: `sec-tconv-${id}`,
        MSGBRIDGE__kafka__topics__requestOutcomes: `sec-toutcomes-${id}`,
        MSGBRIDGE__kafka__topics__inboundMessages: `sec-tinbound-${id}`,
        MSGBRIDGE__tracker__groupId: `sec-tracker-${id}`,
        MSGBRIDGE__tracker__transactionalIdPrefix: `sec-tracker-${id}`,
      });
      const tracker = await startTracker({ config, http: false, admin: false });
      try {
        await tracker.ready;
        const kafka = createKafkajsClient(config.kafka, { clientId: 'secure-test' });
        const producer = kafka.producer();
        await producer.connect();
        const message = `01JSEC${id.toUpperCase()}`;
        await producer.send({
          topic: config.kafka.topics.sendResults,
          messages: [
            {
              key: message,
              value: JSON.stringify({
                requestId: `sec-${id}`,
                businessId: 'biz_1',
                outcome: 'accepted',
                messageId: message,
                type: 'text',
                recipient: '+15550002222',
                attempts: 1,
                acceptedAt: '2023-11-14T22:13:00.000Z',
                maybeSent: false,
              }),
              headers: { 'business-id': 'biz_1' },
            },
          ],
        });
        await producer.disconnect();
        const consumer = kafka.consumer({
          groupId: `secure-${randomUUID()}`,
          maxWaitTimeInMs: 100,
          readUncommitted: false,
        });
        const states: Record<string, unknown>[] = [];
        await consumer.connect();
        await consumer.subscribe({ topics: [config.kafka.topics.messageState], fromBeginning: true });
        await consumer.run({
          eachMessage: async ({ message: m }) =>
            void states.push(JSON.parse(m.value!.toString()) as Record<string, unknown>),
        });
        const deadline = Date.now() + 30_000;
        while (states.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
        await consumer.disconnect();
        expect(states).toEqual([
          expect.objectContaining({ messageId: message, requestId: `sec-${id}`, status: 'accepted' }),
        ]);
      } finally {
        await tracker.drain();
      }
    },
    90_000,
  );

  it('a wrong password, an untrusted CA and a missing client certificate each fail at start with one line naming the cause', async () => {
    const wrongPassword = await startFailure({ ...scram.client!.env, KAFKA_SASL_PASSWORD: 'not-the-password' });
    expect(wrongPassword).toMatch(/authentication failed/);
    expect(wrongPassword).not.toContain('not-the-password');

    const { KAFKA_SSL_CA_FILE: _ca, ...noCa } = scram.client!.env;
    expect(await startFailure(noCa)).toMatch(/TLS certificate is not trusted: set KAFKA_SSL_CA_FILE/);

    const { KAFKA_SSL_CERT_FILE: _cert, KAFKA_SSL_KEY_FILE: _key, ...noClientCert } = mtls.client!.env;
    expect(await startFailure(noClientCert)).toMatch(/client certificate/);
  }, 120_000);

  it('msgbridge ingress with a wrong password: exit 2, one line, no stack trace, no secret', async () => {
    const env = {
      ...scram.client!.env,
      KAFKA_SASL_PASSWORD: 'wrong-secret-value',
      MSGBRIDGE_BUSINESS_ID: 'biz_1',
      MSGBRIDGE_SIGNING_SECRET: SECRET,
      MSGBRIDGE_INGRESS_PORT: '0',
      MSGBRIDGE_INGRESS_ADMIN_PORT: '0',
      MSGBRIDGE__kafka__connectionTimeoutMs: '2000',
      MSGBRIDGE__kafka__partitions: '1',
      MSGBRIDGE__kafka__replicationFactor: '1',
    };
    const result = await runCli(['ingress'], env, 90_000);
    expect(result.code).toBe(2);
    const lines = result.stderr.split('\n').filter((l) => l.startsWith('msgbridge:'));
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^msgbridge: cannot use Kafka at 127\.0\.0\.1:\d+: authentication failed/);
    expect(result.stderr).not.toMatch(/\n\s+at /);
    expect(`${result.stdout}${result.stderr}`).not.toContain('wrong-secret-value');
  }, 120_000);

  it('refuses KAFKA_SSL=false together with a CA file, and a certificate without its key', () => {
    expect(() => envConfig({ KAFKA_SSL: 'false', KAFKA_SSL_CA_FILE: '/tmp/ca.pem' })).toThrow(
      /KAFKA_SSL=false contradicts KAFKA_SSL_CA_FILE/,
    );
    expect(() => envConfig({ KAFKA_SSL_CERT_FILE: '/tmp/c.pem' })).toThrow(
      /kafka\.ssl\.keyFile: a client certificate needs its key/,
    );
  });
});
