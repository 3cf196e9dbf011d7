import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { ChangelogRestorer } from '../../src/kafka/changelog-restore.js';
import { silentLogger } from '../../src/platform/logger.js';
import { encodeLedgerEntry, ledgerKey, type LedgerEntry } from '../../src/sender/ledger-records.js';
import { LedgerStore } from '../../src/sender/ledger-store.js';
import { RequestLedger } from '../../src/sender/request-ledger.js';
import { countRecords, createTopics, produce, testKafka, uniqueTopic } from '../helpers/kafka.js';

const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

/** The restores a ledger logs: where each read from and how many records. */
function restoresLogged() {
  const lines: { msg: string; from: number | null; records: number }[] = [];
  const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
  return { lines, logger };
}

function ledgerOn(topic: string, stateDir: string, logger = silentLogger, owner = 'host/1/abc'): RequestLedger {
  return new RequestLedger({
    changelogs: new ChangelogRestorer(testKafka('ledger-test')),
    owner,
    topic,
    partitions: 1,
    stateDir,
    groupId: 'g',
    windowMs: 3_600_000,
    maxEntries: 10_000,
    logger,
  });
}

const done = (offset: number): LedgerEntry => ({
  state: 'done',
  offset,
  at: Date.now(),
  remember: true,
  result: JSON.stringify({ requestId: `r${offset}`, outcome: 'accepted', messageId: `m${offset}` }),
});

/** A new one-partition ledger topic, a state directory, and a `write`'s publish to that topic. */
async function ledgerTopic() {
  const topic = uniqueTopic('ledger');
  await createTopics([topic]);
  const stateDir = mkdtempSync(join(tmpdir(), 'ledger-'));
  dirs.push(stateDir);
  const publish = async (record: { key: string | Buffer | null; partition?: number; value: string | Buffer }) => {
    await produce(topic, [{ key: record.key, value: record.value, partition: record.partition ?? 0 }]);
    return true;
  };
  return { topic, stateDir, publish };
}

describe('the request ledger: checkpoints', () => {
  it("moves a checkpoint only over an end a commit proved: an evicted member's store keeps what its successor wrote", async () => {
    const { topic, stateDir, publish } = await ledgerTopic();

    // Member A owns partition 0 and writes an outcome; a commit accepted after it looked at the
    // end proves the partition was its alone up to there.
    const a = ledgerOn(topic, stateDir);
    await a.assign(0);
    await a.write(0, ledgerKey('biz', 'r1'), done(1), publish);
    await a.observeEnds();
    a.confirmOwnership(performance.now());
    await a.tick();

    // A is evicted without knowing it; B, owning partition 0 now, records an outcome.
    await produce(topic, [{ key: ledgerKey('biz', 'r2'), value: encodeLedgerEntry(done(2)), partition: 0 }]);
    // A's upkeep goes on, and no commit of A is accepted any more.
    await a.tick();
    await a.tick();
    await a.close();

    // A gets partition 0 back: its restore reads from its checkpoint, which never passed B's record.
    const again = ledgerOn(topic, stateDir);
    await again.assign(0);
    expect(again.lookup(0, ledgerKey('biz', 'r1'))?.state).toBe('done');
    expect(again.lookup(0, ledgerKey('biz', 'r2'))).toMatchObject({ state: 'done', offset: 2 });
    await again.close();
  });

  it('a proven end moves the checkpoint: a restart reads nothing again', async () => {
    const { topic, stateDir, publish } = await ledgerTopic();
    await produce(topic, [{ key: ledgerKey('biz', 'r0'), value: encodeLedgerEntry(done(0)), partition: 0 }]);
    const a = ledgerOn(topic, stateDir);
    await a.assign(0);
    for (let i = 1; i <= 3; i++) await a.write(0, ledgerKey('biz', `r${i}`), done(i), publish);
    await a.observeEnds();
    a.confirmOwnership(performance.now());
    await a.tick();
    await a.close();
    // The records are in the store on disk and the checkpoint at the end: the same entries, no record read.
    const log = restoresLogged();
    const again = ledgerOn(topic, stateDir, log.logger);
    await again.assign(0);
    expect(log.lines.find((l) => l.msg.startsWith('request ledger'))).toMatchObject({ from: 4, records: 0 });
    expect([0, 1, 2, 3].map((i) => again.lookup(0, ledgerKey('biz', `r${i}`))?.state)).toEqual([
      'done',
      'done',
      'done',
      'done',
    ]);
    await again.close();
  });

  it('a partition back before its old store closed opens its directory after the close (one LMDB environment per path)', async () => {
    const { topic, stateDir, publish } = await ledgerTopic();
    const events: string[] = [];
    const realOpen = LedgerStore.open.bind(LedgerStore);
    vi.spyOn(LedgerStore, 'open').mockImplementation((dir, identity) => {
      events.push('open');
      return realOpen(dir, identity);
    });
    const realClose = LedgerStore.prototype.close;
    vi.spyOn(LedgerStore.prototype, 'close').mockImplementation(function (this: LedgerStore) {
      events.push('close');
      return realClose.call(this);
    });
    try {
      const ledger = ledgerOn(topic, stateDir);
      await ledger.assign(0);
      // A write still publishing when the partition moves away: its store stays open until it ends.
      let release!: () => void;
      const publishing = new Promise<void>((resolve) => (release = resolve));
      const writing = ledger.write(0, ledgerKey('biz', 'r1'), done(1), (record) =>
        publishing.then(() => publish(record)),
      );
      ledger.revoke(0);
      const back = ledger.assign(0);
      await new Promise((r) => setTimeout(r, 300));
      expect(events).toEqual(['open']);
      release();
      await writing;
      await back;
      // The directory opened again only once the old store had closed.
      expect(events).toEqual(['open', 'close', 'open']);
      expect(ledger.lookup(0, ledgerKey('biz', 'r1'))?.state).toBe('done');
      await ledger.close();
    } finally {
      vi.restoreAllMocks();
    }
  });
});

describe('the request ledger: records in batches', () => {
  const calling = (offset: number, at: number): LedgerEntry => ({ state: 'calling', offset, at, owner: 'host/1/abc' });

  it('the calling and done records of one turn go out as one record; a next owner and a waiting member read one for each request', async () => {
    const { topic, stateDir, publish } = await ledgerTopic();
    const a = ledgerOn(topic, stateDir);
    await a.assign(0);
    const at = Date.now();
    const keys = Array.from({ length: 5 }, (_, i) => ledgerKey('biz', `c${i}`));
    const published: unknown[] = [];
    const written = await Promise.all(
      keys.map((key, i) =>
        a.write(0, key, calling(i, at), (record) => {
          published.push(record.key);
          return publish(record);
        }),
      ),
    );
    expect(written).toEqual(keys.map(() => true));
    expect(published).toHaveLength(1);
    expect(await countRecords(topic)).toBe(1);
    expect(keys.map((key) => a.lookup(0, key)?.state)).toEqual(keys.map(() => 'calling'));
    // Two outcomes known in the same turn: one more record.
    expect(await Promise.all([0, 1].map((i) => a.write(0, keys[i]!, done(i), publish)))).toEqual([true, true]);
    expect(await countRecords(topic)).toBe(2);

    // A new member, with a directory of its own, restores a calling record for each request still open.
    const otherDir = mkdtempSync(join(tmpdir(), 'ledger-'));
    dirs.push(otherDir);
    const b = ledgerOn(topic, otherDir);
    await b.assign(0);
    expect([0, 1].map((i) => b.lookup(0, keys[i]!))).toEqual(
      [0, 1].map((i) => ({ ...done(i), at: expect.any(Number) })),
    );
    expect(keys.slice(2).map((key) => b.lookup(0, key))).toEqual([2, 3, 4].map((i) => calling(i, at)));

    // A call announced after B's restore reaches B when it waits for that request.
    const late = ledgerKey('biz', 'late');
    expect(b.lookup(0, late)).toBeUndefined();
    await a.write(0, late, calling(9, at), publish);
    expect(await b.refresh(0, late)).toEqual(calling(9, at));
    await a.close();
    await b.close();
  });

  it("a batch goes out with the next writer's publish when the first writer stopped", async () => {
    const { topic, stateDir, publish } = await ledgerTopic();
    const a = ledgerOn(topic, stateDir);
    await a.assign(0);
    const at = Date.now();
    const stopped = vi.fn(async () => false);
    const written = await Promise.all([
      a.write(0, ledgerKey('biz', 's1'), calling(1, at), stopped),
      a.write(0, ledgerKey('biz', 's2'), calling(2, at), publish),
    ]);
    expect(written).toEqual([true, true]);
    expect(stopped).toHaveBeenCalledTimes(1);
    expect(await countRecords(topic)).toBe(1);
    expect(a.lookup(0, ledgerKey('biz', 's1'))).toEqual(calling(1, at));
    // Nobody left to publish it: no writer is told it was written, and nothing is kept.
    expect(await a.write(0, ledgerKey('biz', 's3'), calling(3, at), stopped)).toBe(false);
    expect(a.lookup(0, ledgerKey('biz', 's3'))).toBeUndefined();
    await a.close();
  });
});

describe('the request ledger: a late release', () => {
  it("a release written after the next owner's outcome does not hide it, in the member that wrote it or in a new one", async () => {
    const { topic, stateDir, publish } = await ledgerTopic();
    const otherDir = mkdtempSync(join(tmpdir(), 'ledger-'));
    const newDir = mkdtempSync(join(tmpdir(), 'ledger-'));
    dirs.push(otherDir, newDir);
    // A, evicted without knowing it, still works on the request when B, its partition's next owner, sends it.
    const a = ledgerOn(topic, stateDir, silentLogger, 'member-a');
    const b = ledgerOn(topic, otherDir, silentLogger, 'member-b');
    await a.assign(0);
    await b.assign(0);
    const key = ledgerKey('biz', 'late');
    const at = Date.now();
    await a.write(0, key, { state: 'calling', offset: 7, at, owner: 'member-a' }, publish);
    await b.write(0, key, done(7), publish);
    // A learns it lost the partition and releases the request: after B's outcome, in the log.
    const release: LedgerEntry = {
      state: 'released',
      offset: 7,
      at: at + 1,
      owner: 'member-a',
      attempts: 1,
      maybeSent: true,
      firstAttemptAt: at,
    };
    expect(await a.write(0, key, release, publish)).toBe(true);
    expect(a.lookup(0, key)).toEqual(release);
    expect(await countRecords(topic)).toBe(3);

    // A gets the partition back: what it kept in memory gives way to the log, where B's outcome stands.
    await a.assign(0);
    expect(a.lookup(0, key)).toEqual({ ...done(7), at: expect.any(Number) });
    const c = ledgerOn(topic, newDir, silentLogger, 'member-c');
    await c.assign(0);
    expect(c.lookup(0, key)).toEqual({ ...done(7), at: expect.any(Number) });
    // A member waiting for the next owner's outcome reads it, not the late release after it.
    const waited = ledgerKey('biz', 'waited');
    await b.write(0, waited, { state: 'calling', offset: 9, at: Date.now(), owner: 'member-b' }, publish);
    expect((await c.refresh(0, waited))?.state).toBe('calling');
    await b.write(0, waited, done(9), publish);
    await a.write(0, waited, { ...release, offset: 9 }, publish);
    expect(await c.refresh(0, waited)).toEqual({ ...done(9), at: expect.any(Number) });
    // A release of the process's own call still replaces it.
    const own = ledgerKey('biz', 'own');
    await c.write(0, own, { state: 'calling', offset: 8, at, owner: 'member-c' }, publish);
    await c.write(0, own, { ...release, offset: 8, owner: 'member-c' }, publish);
    expect(c.lookup(0, own)?.state).toBe('released');
    await Promise.all([a.close(), b.close(), c.close()]);
  });
});
