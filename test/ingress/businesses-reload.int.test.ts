import { mkdirSync, mkdtempSync, renameSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { messageId, signedHeaders, statusEvent } from './fixtures.js';
import { startTestIngress, type TestIngress } from './harness.js';

/**
 * Secret rotation without a restart, the way Kubernetes updates a mounted Secret: the file is a
 * symlink through `..data`, which is swapped atomically to a new directory. A webhook signed
 * with a newly added secret is accepted within seconds, a steady stream signed with the old one
 * never fails during the swaps, an invalid file keeps the last good set (one error line, a
 * metric), and SIGHUP reloads at once.
 */
describe('live businesses file', () => {
  const dir = mkdtempSync(join(tmpdir(), 'msgbridge-businesses-'));
  const file = join(dir, 'businesses.json');
  let generation = 0;
  /** Writes a new version as the kubelet does: a new directory, then ..data swapped to it in one rename. */
  const publish = (content: string) => {
    const version = join(dir, `..v${++generation}`);
    mkdirSync(version);
    writeFileSync(join(version, 'businesses.json'), content);
    symlinkSync(`..v${generation}`, join(dir, '..data_tmp'));
    renameSync(join(dir, '..data_tmp'), join(dir, '..data'));
  };
  const businesses = (list: { id: string; secrets: string[] }[]) =>
    JSON.stringify(list.map((b) => ({ id: b.id, signingSecrets: b.secrets, apiKey: null })));
  let t: TestIngress;
  const post = async (business: string, secret: string) => {
    const body = statusEvent(messageId());
    return (await t.post(`/webhooks/${business}/delivery_status`, body, signedHeaders(secret, body))).status;
  };
  const until = async (what: string, check: () => Promise<boolean>, timeoutMs = 10_000) => {
    const deadline = Date.now() + timeoutMs;
    while (!(await check())) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  };

  beforeAll(async () => {
    publish(businesses([{ id: 'biz_1', secrets: ['old-secret'] }]));
    symlinkSync('..data/businesses.json', file);
    t = await startTestIngress({ env: { MSGBRIDGE_BUSINESSES_FILE: file } });
  });
  afterAll(async () => {
    await t?.stop();
  });

  it('accepts a newly added secret and a new business within seconds, with no failure of the old secret during the swaps', async () => {
    expect(await post('biz_1', 'old-secret')).toBe(200);
    expect(await post('biz_1', 'new-secret')).toBe(403);
    expect(await post('biz_2', 'biz2-secret')).toBe(403); // an unknown business answers as a bad signature

    // A steady stream signed with the old secret across every swap.
    const steady: number[] = [];
    let running = true;
    const stream = (async () => {
      while (running) steady.push(await post('biz_1', 'old-secret'));
    })();

    publish(
      businesses([
        { id: 'biz_1', secrets: ['new-secret', 'old-secret'] },
        { id: 'biz_2', secrets: ['biz2-secret'] },
      ]),
    );
    const swappedAt = Date.now();
    await until('the new secret to be accepted', async () => (await post('biz_1', 'new-secret')) === 200);
    const tookMs = Date.now() - swappedAt;
    expect(await post('biz_2', 'biz2-secret')).toBe(200);
    await new Promise((r) => setTimeout(r, 1500));
    running = false;
    await stream;

    // The provider switched; the old secret is removed.
    publish(
      businesses([
        { id: 'biz_1', secrets: ['new-secret'] },
        { id: 'biz_2', secrets: ['biz2-secret'] },
      ]),
    );
    await until('the old secret to be refused', async () => (await post('biz_1', 'old-secret')) === 403);
    expect(await post('biz_1', 'new-secret')).toBe(200);
    console.log(
      `[businesses] new secret accepted ${tookMs} ms after the swap; ${steady.length} old-secret webhooks around the swap, answers ${[...new Set(steady)].join(',')}`,
    );
    expect(steady.length).toBeGreaterThan(0);
    expect(steady.every((s) => s === 200)).toBe(true);
    expect(t.logs.filter((l) => l.includes('"businesses reloaded"')).length).toBeGreaterThanOrEqual(2);
    expect(t.logs.join('\n')).not.toMatch(/new-secret|biz2-secret/);
  }, 60_000);

  it('keeps the last good set when the file is invalid, says so once, and SIGHUP reloads at once', async () => {
    const metric = async () =>
      Number(
        /msgbridge_config_reloads_total\{result="refused"[^}]*\} (\d+)/.exec((await t.admin('/metrics')).body)?.[1],
      );
    const refusedBefore = await metric();
    publish('[{"id": "biz_1", "signingSecrets": "not-a-list"}]');
    await until('the refusal to be counted', async () => (await metric()) === refusedBefore + 1);
    await new Promise((r) => setTimeout(r, 2500)); // a poll later: not reported again
    expect(await metric()).toBe(refusedBefore + 1);
    const errors = t.logs.filter((l) => l.includes('businesses file refused'));
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatch(/businesses\.0\.signingSecrets/);
    expect(await post('biz_1', 'new-secret')).toBe(200); // the last good set

    // A valid file again, applied by SIGHUP without waiting for the poll.
    const version = join(dir, `..v${++generation}`);
    mkdirSync(version);
    writeFileSync(join(version, 'businesses.json'), businesses([{ id: 'biz_1', secrets: ['third-secret'] }]));
    symlinkSync(`..v${generation}`, join(dir, '..data_tmp'));
    renameSync(join(dir, '..data_tmp'), join(dir, '..data'));
    process.emit('SIGHUP');
    expect(await post('biz_1', 'third-secret')).toBe(200);
  }, 30_000);
});
