// The golden records of release 0.1.0, written by that release's own code: the same inputs as
// scripts/contract-fixtures.ts (less what 0.1.0 could not write) given to the record builders
// of commit 7e45fa5, the last commit before `maybeSent` (test/fixtures/contracts/README.md).
// Run once; released records are never regenerated:
//   git archive 7e45fa5 | tar -x -C /tmp/msgbridge-0.1.0 && ln -s "$PWD/node_modules" /tmp/msgbridge-0.1.0/
//   npx tsx scripts/contract-fixtures-0.1.0.ts /tmp/msgbridge-0.1.0
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import {
  FIXTURES_DIR,
  GOLDEN_BUSINESS,
  GOLDEN_SIGNING_SECRET,
  INVALID_REQUEST_INPUTS,
  RECEIVED_AT,
  REQUEST_INPUTS,
  WEBHOOK_INPUTS,
  inVersion,
  renderGoldenFile,
  type ContractTopic,
  type GoldenRecord,
} from './contract-fixtures.js';

const VERSION = '0.1.0';
/** The topics 0.1.0 had: the tracker (message-state, conversations) came later. */
const TOPICS: ContractTopic[] = [
  'messages',
  'delivery_status',
  'webhooks-dlq',
  'send-requests',
  'send-results',
  'send-requests-dlq',
];

type Headers = Record<string, string | Buffer>;
type Record_ = { key: string | Buffer | null; value: Buffer | string; headers: Headers };
/* eslint-disable @typescript-eslint/no-explicit-any -- the modules of another tree, loaded at run time */
type Module = Record<string, any>;

async function main(tree: string): Promise<void> {
  const load = (path: string): Promise<Module> => import(pathToFileURL(join(tree, path)).href) as Promise<Module>;
  const ingress = await load('src/ingress/handle-webhook.ts');
  const signature = await load('src/ingress/verify-signature.ts');
  const requests = await load('src/sender/requests.ts');
  const golden = (note: string, r: Record_): GoldenRecord => {
    const headers: Record<string, string> = {};
    for (const [name, value] of Object.entries(r.headers)) headers[name] = value.toString();
    return { note, key: r.key === null ? null : r.key.toString(), headers, value: r.value.toString() };
  };
  const out: Record<string, GoldenRecord[]> = Object.fromEntries(TOPICS.map((t) => [t, []]));

  const handler = ingress.createWebhookHandler({
    businesses: new Map([[GOLDEN_BUSINESS, [GOLDEN_SIGNING_SECRET]]]),
    topics: { messages: 'messages', deliveryStatus: 'delivery_status', webhooksDlq: 'webhooks-dlq' },
    maxBodyBytes: 1024 * 1024,
  });
  WEBHOOK_INPUTS.forEach((input, i) => {
    if (!inVersion(input.since, VERSION)) return;
    const body = Buffer.from(input.body);
    const decision = handler.handle({
      businessId: GOLDEN_BUSINESS,
      pathTopic: input.pathTopic,
      body,
      signature: signature.signBody(GOLDEN_SIGNING_SECRET, body),
      contentType: 'text/plain; charset=utf-8',
      traceparent: input.traceparent,
      receivedAt: RECEIVED_AT + i,
    });
    if (decision.kind !== 'publish') throw new Error(`${input.note}: refused (${decision.reason})`);
    out[decision.record.topic]!.push(golden(input.note, decision.record));
  });

  const businesses = new Map([[GOLDEN_BUSINESS, 'golden-api-key']]);
  const incoming = (key: string | null, value: string, headers: Record<string, string>, offset: number) => ({
    topic: 'send-requests',
    partition: 0,
    offset: String(offset),
    key: key === null ? null : Buffer.from(key),
    value: Buffer.from(value),
    headers,
  });
  REQUEST_INPUTS.forEach((input, i) => {
    if (!inVersion(input.since, VERSION)) return;
    const value = JSON.stringify(input.value);
    out['send-requests']!.push(golden(input.note, { key: input.key, value, headers: input.headers }));
    const receivedAt = RECEIVED_AT + 100 * i;
    const job = requests.prepareJob(
      incoming(input.key, value, input.headers, i),
      businesses,
      receivedAt,
      RECEIVED_AT - 1000,
    );
    if (job.kind !== 'send') throw new Error(`${input.note}: dead-lettered (${job.reason})`);
    const at = new Date(receivedAt + 250);
    const o = input.outcome;
    let result;
    if (o.kind === 'accepted') result = requests.acceptedResult(job, o.messageId, o.attempts, at);
    else if (o.kind === 'rejected')
      result = requests.rejectedResult(job, requests.failureOf(o.attempt, o.retriable), o.attempts, at);
    else throw new Error(`${input.note}: 0.1.0 has no ${o.kind} outcome`);
    const { key, value: bytes } = requests.resultRecord(result);
    out['send-results']!.push(
      golden(`${o.kind}: ${input.note}`, {
        key,
        value: bytes,
        headers: requests.resultHeaders({ value: bytes, businessId: job.businessId }, job.headers, receivedAt),
      }),
    );
  });
  INVALID_REQUEST_INPUTS.forEach((input, i) => {
    if (!inVersion(input.since, VERSION)) return;
    const offset = REQUEST_INPUTS.length + i;
    const job = requests.prepareJob(
      incoming(input.key, input.value, input.headers, offset),
      businesses,
      RECEIVED_AT + 100 * offset,
      RECEIVED_AT - 1000,
    );
    if (job.kind !== 'dlq') throw new Error(`${input.note}: accepted`);
    // 0.1.0 wrote no result for a dead-lettered request.
    out['send-requests-dlq']!.push(golden(input.note, job.record));
  });

  mkdirSync(join(FIXTURES_DIR, VERSION), { recursive: true });
  for (const topic of TOPICS) {
    const path = join(FIXTURES_DIR, VERSION, `${topic}.json`);
    writeFileSync(path, renderGoldenFile({ topic, version: VERSION, records: out[topic]! }));
    console.log(`wrote ${path} (${out[topic]!.length} records)`);
  }
}

const tree = process.argv[2];
if (!tree) {
  console.error('usage: tsx scripts/contract-fixtures-0.1.0.ts <a checkout of commit 7e45fa5, with node_modules>');
  process.exitCode = 2;
} else await main(tree);
