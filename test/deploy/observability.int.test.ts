import { spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { loadConfig } from '../../src/config/load.js';
import { startIngress, type Ingress } from '../../src/ingress/index.js';
import { startSender, type Sender } from '../../src/sender/index.js';
import { startSimulator, type RunningSimulator } from '../../src/simulator/index.js';
import { startTracker, type Tracker } from '../../src/tracker/index.js';
import { createTopics, kafkaBrokers, produce } from '../helpers/kafka.js';
import { inboundEvent, messageId, signedHeaders, statusEvent } from '../ingress/fixtures.js';
import { produceRequests, templateRequest, testLogger, textRequest } from '../sender/harness.js';

/**
 * deploy/observability: the alert rules pass promtool (syntax and unit tests on synthetic
 * series), every dashboard query is PromQL, every runbook link lands on a README section, and
 * every metric the dashboard and the rules name is exported by a real ingress, sender or tracker
 * that handled a little traffic (checked against their /metrics).
 */
const root = join(import.meta.dirname, '..', '..');
const dir = join(root, 'deploy', 'observability');

interface Rule {
  alert?: string;
  record?: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}
const rules = (
  parse(readFileSync(join(dir, 'alerts.yml'), 'utf8')) as { groups: { name: string; rules: Rule[] }[] }
).groups.flatMap((g) => g.rules);

interface Panel {
  type: string;
  title: string;
  targets?: { expr: string; datasource?: { uid?: string } }[];
  datasource?: { uid?: string };
}
interface Dashboard {
  schemaVersion: number;
  panels: Panel[];
  templating: { list: { name: string; type: string; query: unknown; definition?: string }[] };
}
const dashboard = JSON.parse(readFileSync(join(dir, 'grafana-dashboard.json'), 'utf8')) as Dashboard;
const dashboardQueries = dashboard.panels.flatMap((p) =>
  (p.targets ?? []).map((t) => ({ panel: p.title, expr: t.expr })),
);
const variableQueries = dashboard.templating.list
  .filter((v) => v.type === 'query')
  .map((v) => ({ panel: `variable ${v.name}`, expr: v.definition ?? String(v.query) }));
const alertQueries = rules.map((r) => ({ panel: `alert ${r.alert}`, expr: r.expr }));
const allQueries = [...dashboardQueries, ...variableQueries, ...alertQueries];

/** Grafana's variables replaced by values Prometheus accepts. */
const asPromQL = (expr: string) =>
  expr
    .replaceAll('$__rate_interval', '5m')
    .replaceAll('$__range', '6h')
    .replaceAll('$__interval', '1m')
    .replaceAll('$namespace', '.*');

function promtool(args: string[], cwd = dir): { status: number | null; output: string } {
  const run = spawnSync('promtool', args, { cwd, encoding: 'utf8', timeout: 30_000 });
  if ((run.error as NodeJS.ErrnoException | undefined)?.code === 'ENOENT') {
    throw new Error(
      "promtool not found on PATH: install Debian's prometheus package (apt-get install -y prometheus), as npm test's prerequisite step does",
    );
  }
  if (run.error) throw run.error;
  return { status: run.status, output: `${run.stdout}${run.stderr}` };
}

describe('observability: alert rules and dashboard', () => {
  it('the alert rules pass `promtool check rules` and their unit tests (alerts.test.yml)', () => {
    const check = promtool(['check', 'rules', 'alerts.yml']);
    expect(check.status, check.output).toBe(0);
    expect(check.output).toMatch(new RegExp(`SUCCESS: ${rules.length} rules found`));
    const unit = promtool(['test', 'rules', 'alerts.test.yml']);
    expect(unit.status, unit.output).toBe(0);
    // The unit tests fire at least the Kafka-unreachable and circuit-open alerts.
    const tests = readFileSync(join(dir, 'alerts.test.yml'), 'utf8');
    for (const alert of ['MsgbridgeKafkaUnreachable', 'MsgbridgeSenderCircuitOpen'])
      expect(tests).toMatch(new RegExp(`alertname: ${alert}\\n\\s+exp_alerts:\\n\\s+- exp_labels`));
  });

  it('every rule has a severity, a summary and a runbook_url that names a section of the README', () => {
    const readme = readFileSync(join(dir, 'README.md'), 'utf8');
    // GitHub's anchors: lower case, punctuation dropped, spaces to dashes.
    const anchors = new Set(
      [...readme.matchAll(/^#+\s+(.+)$/gm)].map((m) =>
        m[1]!
          .trim()
          .toLowerCase()
          .replace(/[^\w\- ]/g, '')
          .replace(/ /g, '-'),
      ),
    );
    expect(rules.length).toBeGreaterThanOrEqual(10);
    for (const rule of rules) {
      expect(rule.alert, JSON.stringify(rule)).toMatch(/^Msgbridge[A-Za-z0-9]+$/);
      expect(['critical', 'warning', 'info'], `${rule.alert} severity`).toContain(rule.labels?.severity);
      expect(rule.annotations?.summary, `${rule.alert} summary`).toBeTruthy();
      const url = rule.annotations?.runbook_url ?? '';
      expect(url, `${rule.alert} runbook_url`).toMatch(/^deploy\/observability\/README\.md#[a-z0-9-]+$/);
      expect(anchors, `${url}: no such section in deploy/observability/README.md`).toContain(url.split('#')[1]);
    }
  });

  it('the dashboard: schema 39, one Prometheus datasource variable, and every query is PromQL that promtool parses', () => {
    expect(dashboard.schemaVersion).toBe(39);
    expect(dashboard.templating.list.find((v) => v.name === 'datasource')).toMatchObject({
      type: 'datasource',
      query: 'prometheus',
    });
    for (const panel of dashboard.panels.filter((p) => p.type !== 'row')) {
      expect(panel.datasource?.uid, panel.title).toBe('${datasource}');
      expect(panel.targets?.length, panel.title).toBeGreaterThan(0);
      for (const t of panel.targets ?? []) expect(t.datasource?.uid, panel.title).toBe('${datasource}');
    }
    // promtool has no PromQL checker of its own: each query becomes a recording rule.
    const scratch = mkdtempSync(join(tmpdir(), 'msgbridge-dashboard-'));
    try {
      const exprs = [
        ...dashboardQueries,
        ...variableQueries.map((v) => ({ ...v, expr: v.expr.replace(/^label_values\((.+), \w+\)$/, '$1') })),
      ];
      const file = {
        groups: [
          {
            name: 'dashboard',
            rules: exprs.map((q, i) => ({ record: `dashboard:query_${i}`, expr: asPromQL(q.expr) })),
          },
        ],
      };
      writeFileSync(join(scratch, 'dashboard.yml'), JSON.stringify(file));
      const check = promtool(['check', 'rules', 'dashboard.yml'], scratch);
      expect(check.status, check.output).toBe(0);
    } finally {
      rmSync(scratch, { recursive: true, force: true });
    }
  });

  describe('against a real ingress, sender and tracker', () => {
    const running: { ingress?: Ingress; sender?: Sender; tracker?: Tracker; simulator?: RunningSimulator } = {};
    afterAll(async () => {
      await Promise.all(
        [running.ingress?.drain(), running.sender?.drain(), running.tracker?.drain()].map((p) =>
          p?.catch(() => undefined),
        ),
      );
      await running.simulator?.close();
    });

    it(
      'exports every metric that a dashboard query or an alert expression names, with the labels they use',
      { timeout: 90_000 },
      async () => {
        const id = randomUUID().slice(0, 8);
        const topics = {
          messages: `obs-messages-${id}`,
          deliveryStatus: `obs-status-${id}`,
          webhooksDlq: `obs-wdlq-${id}`,
          sendRequests: `obs-send-requests-${id}`,
          sendResults: `obs-send-results-${id}`,
          sendRequestsDlq: `obs-send-dlq-${id}`,
          sendLedger: `obs-send-ledger-${id}`,
          messageState: `obs-state-${id}`,
          conversations: `obs-conversations-${id}`,
          requestOutcomes: `obs-outcomes-${id}`,
          inboundMessages: `obs-inbound-${id}`,
        };
        const business = { id: 'biz_1', apiKey: 'key-biz-1', signingSecret: 'whsec-observability-0123456789' };
        const brokers = kafkaBrokers();
        await createTopics(
          [
            topics.messages,
            topics.deliveryStatus,
            topics.webhooksDlq,
            topics.sendRequests,
            topics.sendResults,
            topics.sendRequestsDlq,
            topics.sendLedger,
          ],
          1,
        );
        const simulator = (running.simulator = await startSimulator({
          host: '127.0.0.1',
          port: 0,
          businesses: [business],
          lifecycle: { sentDelayMs: 10, deliveredDelayMs: 10, readDelayMs: 10 },
          logger: testLogger('simulator'),
        }));
        const config = loadConfig({
          env: {},
          overrides: {
            kafka: { brokers, topics, createTopics: true, partitions: 1, replicationFactor: 1 },
            businesses: [{ id: business.id, signingSecrets: [business.signingSecret], apiKey: business.apiKey }],
            provider: { url: simulator.url },
            ingress: { host: '127.0.0.1', port: 0, adminHost: '127.0.0.1', adminPort: 0 },
            sender: {
              groupId: `obs-sender-${id}`,
              stateDir: mkdtempSync(join(tmpdir(), 'msgbridge-obs-sender-')),
              adminHost: '127.0.0.1',
              adminPort: 0,
              backoffInitialMs: 20,
              backoffMaxMs: 200,
              circuitFailureThreshold: 2,
              circuitProbeMaxMs: 200,
            },
            // The smallest cache, so that a hundred-odd statuses evict some.
            tracker: {
              groupId: `obs-tracker-${id}`,
              transactionalIdPrefix: `obs-tx-${id}`,
              host: '127.0.0.1',
              port: 0,
              adminHost: '127.0.0.1',
              adminPort: 0,
              sessionTimeoutMs: 6000,
              maxCachedMessages: 100,
            },
            log: { level: 'info' },
          },
        });

        // Each role once, at the same time.
        const [ingress, sender, tracker] = await Promise.all([
          startIngress({ config, brokers, logger: testLogger('ingress') }).then((r) => (running.ingress = r)),
          startSender({ config, brokers, logger: testLogger('sender'), admin: { host: '127.0.0.1', port: 0 } }).then(
            (r) => (running.sender = r),
          ),
          startTracker({ config, brokers, logger: testLogger('tracker') }).then((r) => (running.tracker = r)),
        ]);
        await Promise.all([sender.ready, tracker.ready]);
        const endpoints = {
          ingress: `${ingress.adminAddress}/metrics`,
          sender: `${sender.adminAddress}/metrics`,
          tracker: `${tracker.adminAddress}/metrics`,
        };

        // The provider's status webhooks for what the sender sends come back through the ingress.
        for (const topic of ['delivery_status', 'messages'] as const)
          simulator.registerWebhook(business.id, topic, `${ingress.address}/webhooks/${business.id}/${topic}`);

        // Sender: the provider fails until the circuit opens (retries, 5xx, circuit changes), then
        // answers: accepted. A template it refuses (rejected, 4xx) and an unreadable request (dlq).
        simulator.setFaults({ send5xxRate: 1 });
        await produceRequests(topics.sendRequests, [
          {
            key: '+15550002222',
            value: textRequest('obs-text-1', '+15550002222', 'hello', { businessId: business.id }),
          },
          {
            key: '+15550003333',
            value: templateRequest('obs-tpl-1', '+15550003333', {
              businessId: business.id,
              templateName: 'no_such_template',
            }),
          },
          { key: 'garbage', value: '{"requestId": ' },
        ]);
        await until(
          async () => /msgbridge_sender_circuit_changes_total\{[^}]*state="open"/.test(await sender.metrics.metrics()),
          20_000,
          'the circuit of biz_1 to open',
        );
        simulator.resetFaults();

        // Ingress: a signed inbound message (published), a signed body that is not JSON
        // (dead-lettered), a bad signature (forbidden).
        const post = async (path: string, body: string, headers: Record<string, string>) =>
          (await fetch(`${ingress.address}${path}`, { method: 'POST', body, headers })).status;
        const inbound = inboundEvent('+15550009999', 'hi there');
        expect(
          await post(`/webhooks/${business.id}/messages`, inbound, signedHeaders(business.signingSecret, inbound)),
        ).toBe(200);
        expect(
          await post(
            `/webhooks/${business.id}/delivery_status`,
            'not json',
            signedHeaders(business.signingSecret, 'not json'),
          ),
        ).toBe(200);
        expect(await post(`/webhooks/${business.id}/messages`, inbound, signedHeaders('not-the-secret', inbound))).toBe(
          403,
        );

        await until(
          async () => /msgbridge_sender_requests_total\{outcome="accepted"/.test(await sender.metrics.metrics()),
          20_000,
          'the text request to be accepted once the provider answers',
        );

        // Tracker: more statuses than its cache holds (evictions) and a record it cannot apply (skipped).
        await produce(topics.deliveryStatus, [
          ...Array.from({ length: 120 }, () => {
            const message = messageId();
            return { key: message, value: statusEvent(message, 'delivered'), headers: { 'business-id': business.id } };
          }),
          { key: 'garbage', value: 'not an event', headers: { 'business-id': business.id } },
        ]);

        // Scrape until every named metric has samples (a labelled counter has none before its first increment).
        const referenced = new Map<string, string[]>();
        for (const q of allQueries)
          for (const [name] of q.expr.matchAll(/msgbridge_[a-z0-9_]+/g))
            referenced.set(name, [...(referenced.get(name) ?? []), q.panel]);
        let scrapes: Scrape[] = [];
        const missingSamples = () => [...referenced.keys()].filter((name) => !scrapes.some((s) => s.samples.has(name)));
        await until(
          async () => {
            scrapes = await Promise.all(
              Object.entries(endpoints).map(async ([role, url]) =>
                parseExposition(role, await (await fetch(url)).text()),
              ),
            );
            return missingSamples().length === 0;
          },
          30_000,
          'samples of every referenced metric',
        ).catch(() => undefined);

        // 1. Every name is exported (a histogram's _bucket/_sum/_count by its base name).
        const unknown: string[] = [];
        for (const [name, where] of referenced) {
          const base = /_(bucket|sum|count)$/.test(name) ? name.replace(/_(bucket|sum|count)$/, '') : undefined;
          const exported = scrapes.some(
            (s) =>
              s.types.has(name) ||
              (base !== undefined &&
                ['histogram', 'summary'].includes(s.types.get(base) ?? '') &&
                (name.endsWith('_bucket') ? s.types.get(base) === 'histogram' : true)),
          );
          if (!exported) unknown.push(`${name} (in ${[...new Set(where)].join('; ')})`);
        }
        expect(unknown, `names no process exports:\n${unknown.join('\n')}`).toEqual([]);
        expect(referenced.size).toBeGreaterThan(40);

        // 2. ...with series, after the traffic above.
        expect(missingSamples(), 'referenced metrics without a single series after the traffic').toEqual([]);

        // 3. Label names in selectors and in by (...) clauses exist on the series. `namespace`,
        //    `instance`, `job` and `pod` are added by Prometheus, not by the processes.
        const scrapeLabels = new Set(['namespace', 'instance', 'job', 'pod']);
        const badLabels: string[] = [];
        const labelsOf = (name: string) => new Set(scrapes.flatMap((s) => [...(s.samples.get(name) ?? [])]));
        for (const q of allQueries) {
          for (const [, name, matchers] of q.expr.matchAll(/(msgbridge_[a-z0-9_]+)\{([^}]*)\}/g)) {
            for (const [, label] of matchers!.matchAll(/([a-zA-Z_]+)\s*(?:=~|!~|!=|=)\s*"/g)) {
              if (!scrapeLabels.has(label!) && !labelsOf(name!).has(label!))
                badLabels.push(`${q.panel}: ${name} has no label ${label}`);
            }
          }
          const names = [...q.expr.matchAll(/msgbridge_[a-z0-9_]+/g)].map((m) => m[0]);
          for (const [, list] of q.expr.matchAll(/\b(?:by|without)\s*\(([^)]*)\)/g)) {
            for (const label of list!
              .split(',')
              .map((l) => l.trim())
              .filter(Boolean)) {
              if (!scrapeLabels.has(label) && !names.some((n) => labelsOf(n).has(label)))
                badLabels.push(`${q.panel}: none of ${names.join(', ')} has a label ${label}`);
            }
          }
        }
        expect(badLabels, badLabels.join('\n')).toEqual([]);

        // 4. Healthy processes do not trip the connectivity alerts.
        const value = (role: string, series: string) => scrapes.find((s) => s.role === role)?.values.get(series);
        expect(value('ingress', 'msgbridge_ingress_kafka_connected{role="ingress"}')).toBe(1);
        expect(value('ingress', 'msgbridge_ingress_ready{role="ingress"}')).toBe(1);
        expect(value('sender', 'msgbridge_sender_results_publishable{role="sender"}')).toBe(1);
        expect(value('sender', 'msgbridge_sender_circuit_open{business="biz_1",role="sender"}')).toBe(0);
        expect(value('tracker', 'msgbridge_tracker_tasks{role="tracker"}')).toBeGreaterThan(0);
      },
    );
  });
});

interface Scrape {
  role: string;
  /** # TYPE lines: name → counter, gauge, histogram... */
  types: Map<string, string>;
  /** Sample names → the label names seen on them. */
  samples: Map<string, Set<string>>;
  /** `name{labels}` exactly as exposed → value. */
  values: Map<string, number>;
}

function parseExposition(role: string, text: string): Scrape {
  const scrape: Scrape = { role, types: new Map(), samples: new Map(), values: new Map() };
  for (const line of text.split('\n')) {
    const type = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (type) scrape.types.set(type[1]!, type[2]!);
    const sample = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)/.exec(line);
    if (!sample) continue;
    const labels = scrape.samples.get(sample[1]!) ?? new Set<string>();
    for (const [, label] of (sample[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="/g)) labels.add(label!);
    scrape.samples.set(sample[1]!, labels);
    scrape.values.set(`${sample[1]}${sample[2] ?? ''}`, Number(sample[3]));
  }
  return scrape;
}

async function until(condition: () => Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}
