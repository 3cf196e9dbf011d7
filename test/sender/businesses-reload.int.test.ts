import { mkdtempSync, renameSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  BIZ,
  BIZ2,
  collect,
  fixture,
  produceRequests,
  templateRequest,
  waitUntil,
  type Collector,
  type Fixture,
} from './harness.js';
import type { Sender } from '../../src/sender/index.js';

/**
 * The sender follows the live businesses file: a business added to the file is sent for within
 * seconds, without a restart; a list with a business lacking its API key is refused and the
 * last good set stays.
 */
describe('sender with a live businesses file', () => {
  let f: Fixture;
  let sender: Sender | undefined;
  let results: Collector | undefined;
  afterAll(async () => {
    await sender?.drain();
    await results?.stop();
    await f?.close();
  });

  it('sends for a business added to the file, and keeps the last good set when a new list is invalid', async () => {
    f = await fixture({ businesses: [BIZ, BIZ2] });
    const dir = mkdtempSync(join(tmpdir(), 'msgbridge-sender-businesses-'));
    const file = join(dir, 'businesses.json');
    const write = (list: unknown) => {
      writeFileSync(`${file}.tmp`, JSON.stringify(list));
      renameSync(`${file}.tmp`, file);
    };
    write([{ id: BIZ.id, signingSecrets: [], apiKey: BIZ.apiKey }]);
    sender = await f.start({
      config: {
        ...f.config,
        businessesFile: file,
        businesses: [{ id: BIZ.id, signingSecrets: [], apiKey: BIZ.apiKey }],
      },
    });
    await sender.ready;
    results = await collect(f.topics.sendResults);
    const resultOf = (requestId: string) => results!.values().find((v) => v.requestId === requestId);
    const send = async (requestId: string, businessId: string) => {
      await produceRequests(f.topics.sendRequests, [
        { key: '+15550002222', value: templateRequest(requestId, '+15550002222', { businessId }) },
      ]);
      await waitUntil(
        () => resultOf(requestId) !== undefined,
        30_000,
        () => `the result of ${requestId}`,
      );
      return resultOf(requestId)!;
    };

    expect(await send('before-add', BIZ2.id)).toMatchObject({
      outcome: 'rejected',
      error: { code: 'RELAY_UNKNOWN_BUSINESS' },
    });
    write([
      { id: BIZ.id, signingSecrets: [], apiKey: BIZ.apiKey },
      { id: BIZ2.id, signingSecrets: [], apiKey: BIZ2.apiKey },
    ]);
    await new Promise((r) => setTimeout(r, 2500)); // a poll of the file at the latest
    expect(await send('after-add', BIZ2.id)).toMatchObject({ outcome: 'accepted', businessId: BIZ2.id });

    // Refused (biz_1 has no API key, which the sender needs): the last good set stays.
    write([{ id: BIZ.id, signingSecrets: [], apiKey: null }]);
    await new Promise((r) => setTimeout(r, 2500));
    expect(await send('after-refused', BIZ2.id)).toMatchObject({ outcome: 'accepted', businessId: BIZ2.id });
    expect(await send('biz1-still', BIZ.id)).toMatchObject({ outcome: 'accepted', businessId: BIZ.id });
    const metrics = await sender.metrics.metrics();
    expect(metrics).toMatch(/msgbridge_config_reloads_total\{result="applied"[^}]*\} 1\n/);
    expect(metrics).toMatch(/msgbridge_config_reloads_total\{result="refused"[^}]*\} 1\n/);
  }, 120_000);
});
