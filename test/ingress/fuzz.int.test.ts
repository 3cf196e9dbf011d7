import { describe, expect, it } from 'vitest';
import { checkKafka, runFuzzCampaign } from '../../bench/fuzz-campaign.js';
import { consumeRecords, countRecords } from '../helpers/kafka.js';
import { startTestIngress } from './harness.js';

const SECRET = 'fuzz-secret';

/**
 * A bounded run of the fuzz campaign (bench/fuzz.ts runs 100,000): hostile requests of every
 * kind interleaved with signed webhooks, against a real ingress and the suite's Kafka.
 */
describe('ingress under a fuzz campaign', () => {
  it('answers every hostile request as its kind must be answered, keeps every acknowledged webhook, lets nothing forged into Kafka', async () => {
    const t = await startTestIngress({
      env: { MSGBRIDGE_BUSINESS_ID: 'biz_fuzz', MSGBRIDGE_SIGNING_SECRET: SECRET, MSGBRIDGE_LOG_LEVEL: 'error' },
      overrides: { ingress: { idleTimeoutSeconds: 10 } },
    });
    try {
      const report = await runFuzzCampaign({
        port: t.ingress.port,
        businessId: 'biz_fuzz',
        secret: SECRET,
        requests: 3000,
        legitimateEvery: 10,
        concurrency: 32,
        slowConnections: 10,
        maxBodyBytes: t.config.ingress.maxBodyBytes,
        seed: 7,
      });
      expect(report.unexpected).toEqual([]);
      // Every kind was exercised.
      for (const [kind, stats] of Object.entries(report.kinds)) expect(stats.sent, kind).toBeGreaterThan(0);
      expect(report.legitimateAnswers).toEqual({ '200': report.legitimate });
      expect((await t.admin('/healthz')).status).toBe(200);
      const topics = Object.values(t.topics);
      const total = (await Promise.all(topics.map((topic) => countRecords(topic)))).reduce((a, b) => a + b, 0);
      const values = (await consumeRecords(topics, total)).map((r) => r.value);
      expect(values).toHaveLength(total);
      const kafka = checkKafka(report, values);
      expect(kafka).toMatchObject({ missing: 0, forged: 0 });
      expect(kafka.records).toBeGreaterThanOrEqual(report.acknowledged.size);
    } finally {
      await t.stop();
    }
  }, 120_000);
});
