import { createHash } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { open as lmdbOpen } from 'lmdb';
import { afterEach, describe, expect, it } from 'vitest';
import {
  batchKey,
  decodeBatch,
  decodeLedgerEntry,
  encodeBatch,
  encodeLedgerEntry,
  isBatchable,
  isReleased,
  releaseReplaces,
  splitBatch,
  type BatchedRecord,
  ledgerDecision,
  ledgerEntryTime,
  ledgerKey,
  type LedgerEntry,
} from '../../src/sender/ledger-records.js';
import { KeyPlaces } from '../../src/sender/key-places.js';
import { LedgerStore, ledgerStoreDir } from '../../src/sender/ledger-store.js';
import { ledgerEntriesOnDisk } from '../helpers/ledger-disk.js';

const identity = { clusterId: 'c1', topic: 'send-ledger', partition: 3, partitions: 12 };
const done = (
  offset: number,
  at: number,
  remember = true,
  result = `{"requestId":"r${offset}","outcome":"accepted"}`,
): LedgerEntry & { state: 'done' } => ({ state: 'done', offset, at, remember, result });
const bytes = (e: LedgerEntry) => Buffer.from(encodeLedgerEntry(e));

describe('ledger records', () => {
  it('round-trip every state; anything else is not trusted', () => {
    const entries: LedgerEntry[] = [
      { state: 'calling', offset: 1, at: 10, owner: 'host/1/abc' },
      done(2, 20),
      { state: 'released', offset: 3, at: 30, attempts: 2, maybeSent: true, firstAttemptAt: 25 },
      { state: 'released', offset: 4, at: 40, attempts: 0, maybeSent: false, firstAttemptAt: null },
    ];
    for (const e of entries) expect(decodeLedgerEntry(encodeLedgerEntry(e))).toEqual(e);
    for (const bad of [
      '',
      'null',
      '{}',
      '{"v":2,"state":"done","offset":1,"at":1,"remember":true,"result":"x"}',
      '{"v":1,"state":"done","offset":-1,"at":1,"remember":true,"result":"x"}',
      '{"v":1,"state":"calling","offset":1,"at":1}',
      '{"v":1,"state":"gone","offset":1,"at":1}',
    ])
      for (const value of [bad, Buffer.from(bad)])
        expect([decodeLedgerEntry(value), ledgerEntryTime(value)]).toEqual([undefined, undefined]);
    expect(decodeLedgerEntry(null)).toBeUndefined();
    // The time, from text and from bytes (a restore), of what is written and of what is only understood.
    const spaced = '{"v":1, "state":"done","offset":2,"at":77,"remember":true,"result":{}}';
    for (const [value, at] of [...entries.map((e) => [encodeLedgerEntry(e), e.at] as const), [spaced, 77] as const]) {
      expect(ledgerEntryTime(value)).toBe(at);
      expect(ledgerEntryTime(Buffer.from(value))).toBe(at);
    }
    // A prefix that looks right on a value that is not whole is not trusted.
    const cut = encodeLedgerEntry(done(5, 12_345)).slice(0, -2);
    expect([ledgerEntryTime(cut), ledgerEntryTime(Buffer.from(cut))]).toEqual([undefined, undefined]);
  });

  it('a batch round-trips to its records, in order, each as it would be alone; a bad batch is not trusted', () => {
    const records: BatchedRecord[] = [
      { key: ledgerKey('biz', 'r1'), entry: { state: 'calling', offset: 4, at: 50, owner: 'host/1/abc' } },
      // Quotes, backslashes and escaped newlines in a key and a result survive as they were.
      { key: ledgerKey('b"z\n', 'r\\2'), entry: done(9, 51, true, '{"x":"a\\"b\\n"}') },
      { key: ledgerKey('biz', 'r3'), entry: done(10, 52, false) },
    ];
    const text = encodeBatch('host/1/abc', records);
    expect(text.split('\n')[0]).toBe('{"v":1,"state":"batch","at":52,"owner":"host/1/abc","records":3}');
    expect(decodeBatch(text)).toEqual(records);
    expect(decodeBatch(Buffer.from(text))).toEqual(records);
    expect(splitBatch(Buffer.from(text))!.at).toBe(52);
    expect(splitBatch(Buffer.from(text))!.records.map((r) => r.value.toString())).toEqual(
      records.map((r) => encodeLedgerEntry(r.entry)),
    );
    expect(decodeBatch(encodeBatch('o', []))).toEqual([]);
    // Not a request's record: no entry of its own, whatever its key.
    expect([decodeLedgerEntry(text), ledgerEntryTime(text)]).toEqual([undefined, undefined]);
    expect(JSON.parse(batchKey('host/1/abc', 7))).toHaveLength(3);
    // A record a line cannot hold goes alone (JSON.stringify never writes one).
    expect(records.map(isBatchable)).toEqual([true, true, true]);
    expect(isBatchable({ key: ledgerKey('biz', 'r4'), entry: done(11, 1, true, '{\n}') })).toBe(false);
    // A record this release does not understand is undefined, as it would be alone.
    const unknown = '{"v":1,"state":"batch","at":1,"owner":"o","records":1}\n["biz","r"]\n{"v":9}\n';
    expect(decodeBatch(unknown)).toEqual([{ key: '["biz","r"]', entry: undefined }]);
    const head = '{"v":1,"state":"batch","at":1,"owner":"o","records":1}\n';
    const calling = '{"v":1,"state":"calling","offset":1,"at":1,"owner":"o"}';
    expect(decodeBatch(`${head}["biz","r"]\n${calling}\n`)).toHaveLength(1);
    for (const bad of [
      null,
      `${head}["biz","r"]\n${calling}`,
      `${head}["biz","r"]\n${calling}\n["biz","s"]\n${calling}\n`,
      `${head}"biz"\n${calling}\n`,
      `${head}["biz","r"]\n"x"\n`,
      `${head}["biz","r"]\n`,
      head,
      '{"v":1,"state":"batch","at":1,"owner":"o","records":-1}\n',
      '{"v":1,"state":"batch","at":-1,"owner":"o","records":0}\n',
      '{"v":1,"state":"batch","at":1,"records":0}\n',
      '{"v":2,"state":"batch","at":1,"owner":"o","records":0}\n',
      '{"v":1,"state":"batch","at":1,"owner":"o","records":0}',
      // Read from the bytes, refused as JSON.parse refuses them: a leading zero, a raw control character.
      '{"v":1,"state":"batch","at":01,"owner":"o","records":0}\n',
      '{"v":1,"state":"batch","at":1,"owner":"o","records":00}\n',
      '{"v":1,"state":"batch","at":1,"owner":"o\t","records":0}\n',
      '{"v":1,"state":"batch","at":1,"owner":"o","records":0,"x":1\n',
      encodeLedgerEntry(done(1, 1)),
    ])
      expect(decodeBatch(bad)).toBeUndefined();
    // An owner with escapes, and a header of another field order, are read as JSON.
    const escaped = encodeBatch('o"\\', records.slice(0, 1));
    expect(escaped.split('\n')[0]).toBe('{"v":1,"state":"batch","at":50,"owner":"o\\"\\\\","records":1}');
    expect(splitBatch(Buffer.from(escaped))!.at).toBe(50);
    const reordered = `{"v":1,"state":"batch","owner":"o","records":1,"at":7}\n["biz","r"]\n${calling}\n`;
    expect(splitBatch(Buffer.from(reordered))!.at).toBe(7);
    expect(splitBatch(Buffer.from(`{"v":1,"state":"batch","at":0,"owner":"","records":0}\n`))).toEqual({
      at: 0,
      records: [],
    });
  });

  it('a release replaces only what it may: not an outcome that still answers its request, nor another process call', () => {
    const release = (offset: number, owner?: string): LedgerEntry & { state: 'released' } => ({
      state: 'released',
      offset,
      at: 9,
      ...(owner === undefined ? {} : { owner }),
      attempts: 1,
      maybeSent: true,
      firstAttemptAt: 1,
    });
    const calling = (owner: string): LedgerEntry => ({ state: 'calling', offset: 5, at: 1, owner });
    expect(releaseReplaces(undefined, release(5, 'a'))).toBe(true);
    // A process releases only after its own calling record: over another's release, it is late.
    expect(releaseReplaces(release(5, 'b'), release(5, 'a'))).toBe(false);
    expect(releaseReplaces(release(5, 'a'), release(5, 'a'))).toBe(true);
    expect(releaseReplaces(release(5), release(5, 'a'))).toBe(true);
    expect(releaseReplaces(calling('a'), release(5, 'a'))).toBe(true);
    expect(releaseReplaces(calling('b'), release(5, 'a'))).toBe(false);
    // A release from before releases named their writer.
    expect(releaseReplaces(calling('b'), release(5))).toBe(true);
    expect(releaseReplaces(done(5, 1), release(5, 'a'))).toBe(false);
    expect(releaseReplaces(done(5, 1), release(6, 'a'))).toBe(false);
    expect(releaseReplaces(done(5, 1, false), release(5, 'a'))).toBe(false);
    expect(releaseReplaces(done(5, 1, false), release(6, 'a'))).toBe(true);
    expect(decodeLedgerEntry(encodeLedgerEntry(release(5, 'a')))).toEqual(release(5, 'a'));
    expect([isReleased(bytes(release(5, 'a'))), isReleased(bytes(release(5))), isReleased(bytes(done(5, 1)))]).toEqual([
      true,
      true,
      false,
    ]);
    expect(
      decodeLedgerEntry(
        '{"v":1,"state":"released","offset":1,"at":1,"owner":3,"attempts":1,"maybeSent":true,"firstAttemptAt":null}',
      ),
    ).toBeUndefined();
  });

  it('keys a request by business and id without ambiguity', () => {
    expect(ledgerKey('a', 'b/c')).not.toBe(ledgerKey('a/b', 'c'));
    expect(JSON.parse(ledgerKey('biz', 'r"1'))).toEqual(['biz', 'r"1']);
  });

  it('decides: repeat what is done (for good, or the same record), carry what was released, wait for a live calling, take a stale one as maybe sent', () => {
    expect(ledgerDecision(undefined, 5, 0, 1000)).toEqual({ action: 'send' });
    expect(ledgerDecision(done(5, 0), 9, 0, 1000)).toEqual({
      action: 'repeat',
      result: '{"requestId":"r5","outcome":"accepted"}',
    });
    expect(ledgerDecision(done(5, 0, false), 5, 0, 1000)).toEqual({
      action: 'repeat',
      result: '{"requestId":"r5","outcome":"accepted"}',
    });
    expect(ledgerDecision(done(5, 0, false), 9, 0, 1000)).toEqual({ action: 'send' });
    const released: LedgerEntry = {
      state: 'released',
      offset: 5,
      at: 0,
      attempts: 2,
      maybeSent: true,
      firstAttemptAt: 1,
    };
    expect(ledgerDecision(released, 5, 0, 1000)).toEqual({
      action: 'send',
      carried: { attempts: 2, maybeSent: true, firstAttemptAt: 1 },
    });
    expect(ledgerDecision(released, 6, 0, 1000)).toEqual({ action: 'send' });
    const calling: LedgerEntry = { state: 'calling', offset: 5, at: 100, owner: 'x' };
    expect(ledgerDecision(calling, 5, 600, 1000)).toEqual({ action: 'wait', until: 1100 });
    expect(ledgerDecision(calling, 5, 1100, 1000)).toEqual({
      action: 'send',
      carried: { attempts: 1, maybeSent: true, firstAttemptAt: 100 },
    });
  });
});

describe('ledger store (LMDB)', () => {
  const dirs: string[] = [];
  const open = (dir?: string) => {
    const d = dir ?? ledgerStoreDir(mkdtempSync(join(tmpdir(), 'ledger-')), 'msgbridge-sender', 3);
    dirs.push(d);
    return LedgerStore.open(d, identity);
  };
  afterEach(() => {
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });

  it('keeps what it records, readable at once and after a reopen; a changelog chunk replaces and deletes in order', async () => {
    const store = open();
    store.record('k1', done(1, 1000));
    expect(store.get('k1')).toEqual(done(1, 1000));
    await store.flush();
    expect(store.get('k1')).toEqual(done(1, 1000));
    store.applyChangelog(
      [
        { key: 'k2', value: bytes(done(2, 1000)) },
        { key: 'k2', value: bytes(done(3, 1001)) },
        { key: 'k1', value: null },
        { key: 'k3', value: Buffer.from('not a ledger record') },
        // Only the last record of a key in a chunk counts, whichever of the two is valid.
        { key: 'k4', value: bytes(done(5, 1000)) },
        { key: 'k4', value: Buffer.from('{"v":1,"state":"calling","offset":6,"at":1}') },
        { key: 'k5', value: Buffer.from('{}') },
        { key: 'k5', value: bytes(done(7, 1002)) },
      ],
      4,
      0,
    );
    await store.written();
    expect(store.get('k1')).toBeUndefined();
    expect(store.get('k2')).toEqual(done(3, 1001));
    expect(store.get('k3')).toBeUndefined();
    expect(store.get('k4')).toBeUndefined();
    expect(store.get('k5')).toEqual(done(7, 1002));
    expect(store.checkpoint()).toEqual({ ledger: 4 });
    await store.close();
    const again = open(store.dir);
    expect(again.get('k2')).toEqual(done(3, 1001));
    expect(again.checkpoint()).toEqual({ ledger: 4 });
    await again.advanceTo(10);
    expect(again.checkpoint()).toEqual({ ledger: 10 });
    await again.advanceTo(7);
    expect(again.checkpoint()).toEqual({ ledger: 10 });
    await again.close();
  });

  it('a batch in a chunk is the calling and done records it carries, in its place', async () => {
    const store = open();
    const k = (id: string) => ledgerKey('biz', id);
    // A business named "batch" shares the batches' key prefix: its records are still its own.
    const lookalike = ledgerKey('batch', 'x');
    const calling = (offset: number) => ({ state: 'calling' as const, offset, at: 1000, owner: 'host/1/abc' });
    store.applyChangelog(
      [
        { key: k('r1'), value: bytes(done(1, 900)) },
        { key: k('r4'), value: bytes(calling(4)) },
        {
          key: batchKey('host/1/abc', 1),
          value: Buffer.from(
            encodeBatch('host/1/abc', [
              { key: k('r1'), entry: calling(11) },
              { key: k('r2'), entry: calling(12) },
              { key: k('r3'), entry: calling(13) },
              { key: k('r4'), entry: done(4, 1000) },
            ]),
          ),
        },
        { key: k('r2'), value: bytes(done(12, 1001)) },
        // A batch whose header has no line end: skipped whole.
        { key: batchKey('host/1/abc', 2), value: Buffer.from('{"v":1,"state":"batch","at":1}') },
        { key: lookalike, value: bytes(done(14, 1002)) },
      ],
      5,
      0,
    );
    await store.written();
    expect(store.get(k('r1'))).toEqual(calling(11));
    expect(store.get(k('r2'))).toEqual(done(12, 1001));
    expect(store.get(k('r3'))).toEqual(calling(13));
    expect(store.get(k('r4'))).toEqual(done(4, 1000));
    expect(store.get(lookalike)).toEqual(done(14, 1002));
    // The batches themselves are not entries.
    expect(store.get(batchKey('host/1/abc', 1))).toBeUndefined();
    expect(store.stats().entries).toBe(5);
    await store.close();
  });

  it('a late release gives way to the outcome before it, in one chunk, across chunks not yet written, and when kept', async () => {
    const store = open();
    const k = (id: string) => ledgerKey('biz', id);
    const late = (offset: number): LedgerEntry => ({
      state: 'released',
      offset,
      at: 2000,
      owner: 'gone',
      attempts: 1,
      maybeSent: true,
      firstAttemptAt: 1000,
    });
    store.applyChangelog(
      [
        { key: k('r1'), value: bytes(done(1, 1500)) },
        { key: k('r1'), value: bytes(late(1)) },
        { key: k('r2'), value: bytes(done(2, 1500)) },
      ],
      3,
      0,
    );
    // The next chunk at once: the first one's writes may not be readable from disk yet.
    store.applyChangelog(
      [
        { key: k('r2'), value: bytes(late(2)) },
        { key: k('r3'), value: bytes(late(3)) },
      ],
      5,
      0,
    );
    await store.written();
    expect([store.get(k('r1')), store.get(k('r2')), store.get(k('r3'))]).toEqual([
      done(1, 1500),
      done(2, 1500),
      late(3),
    ]);
    store.record(k('r1'), late(1));
    expect(store.get(k('r1'))).toEqual(done(1, 1500));
    await store.close();
  });

  it('a value not understood, kept from a batch, reads as nothing and goes when its minute expires', async () => {
    const store = open();
    const k = ledgerKey('biz', 'future');
    const batch = '{"v":1,"state":"batch","at":1000,"owner":"o","records":1}\n' + `${k}\n{"v":9,"state":"new"}\n`;
    store.applyChangelog([{ key: batchKey('o', 1), value: Buffer.from(batch) }], 1, 0);
    await store.written();
    expect([store.get(k), store.stats().entries]).toEqual([undefined, 1]);
    expect(store.expire(2 * 60_000, 10, 100)).toBe(1);
    expect(store.stats().entries).toBe(0);
    await store.close();
  });

  it('forgetting what was kept waits for an advance that writes the open calls it kept', async () => {
    const store = open();
    const k = ledgerKey('biz', 'open');
    const call: LedgerEntry = { state: 'calling', offset: 3, at: 1000, owner: 'host/1/abc' };
    // Kept once the advance has begun (its first flush wrote nothing): only the advance writes it.
    const advancing = store.advanceTo(10);
    store.record(k, call);
    await store.forgetKept();
    await advancing;
    expect(store.checkpoint()).toEqual({ ledger: 10 });
    // On disk, with the checkpoint past it: a restore from there does not read it again.
    expect(store.get(k)).toEqual(call);
    await store.close();
  });

  it('records kept in memory reach the disk together (a flush, a checkpoint, a close), open calls included', async () => {
    const store = open();
    store.record('open', { state: 'calling', offset: 1, at: 10, owner: 'me' });
    store.record('closed', { state: 'calling', offset: 2, at: 10, owner: 'me' });
    store.record('closed', done(2, 11));
    await store.advanceTo(5);
    store.record('later', done(3, 12));
    await store.close();
    const again = open(store.dir);
    expect(again.get('open')).toEqual({ state: 'calling', offset: 1, at: 10, owner: 'me' });
    expect(again.get('closed')).toEqual(done(2, 11));
    expect(again.get('later')).toEqual(done(3, 12));
    expect(again.checkpoint()).toEqual({ ledger: 5 });
    await again.close();
  });

  it('drops what is past the window, then the oldest beyond the bound, a minute at a time; a restore skips expired records', async () => {
    const M = 60_000;
    const store = open();
    store.applyChangelog(
      Array.from({ length: 10 }, (_, i) => ({ key: `k${i}`, value: bytes(done(i, i * M + 5)) })),
      10,
      2 * M,
    );
    await store.written();
    expect(store.stats().entries).toBe(8);
    expect(store.expire(4 * M, 100, 1000)).toBe(2);
    expect(store.get('k3')).toBeUndefined();
    expect(store.get('k4')).toBeDefined();
    expect(store.expire(0, 3, 1000)).toBe(3);
    expect(['k4', 'k5', 'k6', 'k7', 'k8', 'k9'].filter((k) => store.get(k) !== undefined)).toEqual(['k7', 'k8', 'k9']);
    // A key written again leaves with its newest time only.
    store.record('k7', done(11, 50 * M));
    await store.flush();
    expect(store.expire(20 * M, 100, 1000)).toBe(2);
    expect(store.get('k7')).toEqual(done(11, 50 * M));
    // A minute's records leave together, once the whole minute is past.
    store.record('a', done(12, 60 * M + 1));
    store.record('b', done(13, 60 * M + 59_000));
    await store.flush();
    expect(store.expire(60 * M + 30_000, 100, 1000)).toBe(1);
    expect([store.get('k7'), store.get('a')]).toEqual([undefined, done(12, 60 * M + 1)]);
    expect(store.expire(61 * M, 100, 1000)).toBe(2);
    expect(store.stats().entries).toBe(0);
    await store.close();
  });

  it('keys entries by minute: a request that moves to a later minute is one entry, found after a reopen from the base, its journal, or the keys', async () => {
    const M = 60_000;
    const store = open();
    const calling = (offset: number, at: number): LedgerEntry => ({
      state: 'calling',
      offset,
      at,
      owner: 'host/1/abc',
    });
    // Across chunks not yet written, then by the member's own flush: each move leaves one entry.
    store.applyChangelog([{ key: 'a', value: bytes(calling(1, 5 * M)) }], 1, 0);
    store.applyChangelog([{ key: 'a', value: bytes(done(1, 7 * M)) }], 2, 0);
    store.record('b', calling(2, 8 * M));
    await store.flush();
    store.record('b', done(2, 9 * M + 1));
    store.record('c', done(3, 3 * M));
    await store.flush();
    await store.written();
    expect([store.get('a'), store.get('b'), store.get('c'), store.stats().entries]).toEqual([
      done(1, 7 * M),
      done(2, 9 * M + 1),
      done(3, 3 * M),
      3,
    ]);
    // Time order on disk: the oldest minute first, whatever the keys.
    await store.close();
    expect((await ledgerEntriesOnDisk(store.dir)).map((e) => `${e.minute}:${e.key}`)).toEqual(['3:c', '7:a', '9:b']);
    // A close saves the index beside the store as a base, with lmdb's last transaction: the next open takes it as it is.
    const base = join(store.dir, 'places.index');
    const journal = join(store.dir, 'places.journal');
    const again = open(store.dir);
    expect(again.index.from).toBe('base');
    expect([again.get('a'), again.get('b'), again.get('c')]).toEqual([
      done(1, 7 * M),
      done(2, 9 * M + 1),
      done(3, 3 * M),
    ]);
    const firstBase = readFileSync(base);
    // Writes after it are in its journal: as after a kill -9, the base and the journal are taken.
    again.applyChangelog(
      [
        { key: 'a', value: null },
        { key: 'd', value: bytes(done(4, 10 * M)) },
      ],
      3,
      0,
    );
    await again.written();
    const firstJournal = readFileSync(journal);
    await again.close();
    const expected = [undefined, done(2, 9 * M + 1), done(3, 3 * M), done(4, 10 * M)];
    const reopen = async (from: string) => {
      const reopened = open(store.dir);
      expect(reopened.index.from).toBe(from);
      expect([reopened.get('a'), reopened.get('b'), reopened.get('c'), reopened.get('d')]).toEqual(expected);
      await reopened.close();
    };
    writeFileSync(base, firstBase);
    writeFileSync(journal, firstJournal);
    await reopen('journal');
    // A journal shorter than its mark says (a power loss cut it), a journal of another base, none;
    // a torn base, another file, none: each is refused and the index is read from the keys.
    const cases: [string, Buffer | undefined, string, Buffer | undefined][] = [
      [base, firstBase, journal, firstJournal.subarray(0, firstJournal.length - 12)],
      [
        base,
        firstBase,
        journal,
        Buffer.concat([firstJournal.subarray(0, 8), Buffer.alloc(8, 7), firstJournal.subarray(16)]),
      ],
      [base, firstBase, journal, undefined],
      // Its last record zeros, as a power loss can leave a file's tail: the journal ends before them.
      [base, firstBase, journal, Buffer.concat([firstJournal.subarray(0, firstJournal.length - 12), Buffer.alloc(12)])],
      [base, firstBase.subarray(0, firstBase.length - 8), journal, firstJournal],
      [base, Buffer.from('not an index'), journal, firstJournal],
      [base, undefined, journal, firstJournal],
    ];
    for (const [basePath, baseBytes, journalPath, journalBytes] of cases) {
      for (const [path, content] of [
        [basePath, baseBytes],
        [journalPath, journalBytes],
      ] as const) {
        if (content) writeFileSync(path, content);
        else rmSync(path, { force: true });
      }
      await reopen('keys');
    }
    // After each open that read the keys, a base of its own was written: the next open takes it.
    await reopen('base');
  });

  it('a long journal is folded into a new base at a checkpoint; slots brought back by a journal go once their minutes are past', async () => {
    const M = 60_000;
    const dir = ledgerStoreDir(mkdtempSync(join(tmpdir(), 'ledger-')), 'msgbridge-sender', 3);
    dirs.push(dir);
    const base = join(dir, 'places.index');
    const journal = join(dir, 'places.journal');
    const store = LedgerStore.open(dir, identity, { journalSlack: 10 });
    // Requests one a minute from minute 100: each adds a slot, to the index and to the journal.
    const chunk = (from: number, to: number, minute = 100) =>
      Array.from({ length: to - from }, (_, i) => ({
        key: `k${from + i}`,
        value: bytes(done(from + i, (minute + from + i) * M)),
      }));
    store.applyChangelog(chunk(0, 80), 1, 0);
    await store.advanceTo(2);
    // 80 slots journaled, within 12 bytes × (80 slots + a slack of 10).
    expect(readFileSync(journal).length).toBe(16 + 80 * 12);
    // Twenty move to a later minute: 100 slots journaled for 80 kept, folded at the next checkpoint.
    store.applyChangelog(chunk(20, 40, 200), 3, 0);
    await store.written();
    expect(readFileSync(journal).length).toBe(16 + 100 * 12);
    await store.advanceTo(4);
    expect(readFileSync(journal).length).toBe(16);
    // The minutes 100…104 deleted (their slots go), one request added, as before a kill -9.
    store.applyChangelog(
      [...[0, 1, 2, 3, 4].map((n) => ({ key: `k${n}`, value: null })), { key: 'k80', value: bytes(done(80, 180 * M)) }],
      5,
      0,
    );
    await store.written();
    const left = { base: readFileSync(base), journal: readFileSync(journal) };
    expect(store.stats()).toMatchObject({ entries: 76, indexSlots: 76 });
    await store.close();
    writeFileSync(base, left.base);
    writeFileSync(journal, left.journal);
    const again = LedgerStore.open(dir, identity, { journalSlack: 10 });
    expect(again.index.from).toBe('journal');
    // The base's slots for the deleted requests are back: the index holds more than the disk, and still answers right.
    expect(again.stats()).toMatchObject({ entries: 76, indexSlots: 81 });
    expect([again.get('k0'), again.get('k5'), again.get('k80')]).toEqual([
      undefined,
      done(5, 105 * M),
      done(80, 180 * M),
    ]);
    // Nothing expires, but the oldest minute kept is 105: the slots before it go.
    expect(again.expire(0, 1000, 1000)).toBe(0);
    expect(again.stats()).toMatchObject({ entries: 76, indexSlots: 76 });
    expect([again.get('k0'), again.get('k5'), again.get('k80')]).toEqual([
      undefined,
      done(5, 105 * M),
      done(80, 180 * M),
    ]);
    await again.close();
  });

  it('a time in the first minute of 1970 or past the last minute a key can name is kept under the first or the last minute', async () => {
    const store = open();
    const far = Number.MAX_SAFE_INTEGER - 1;
    store.applyChangelog(
      [
        { key: 'early', value: bytes(done(1, 5)) },
        { key: 'late', value: bytes(done(2, far)) },
      ],
      2,
      0,
    );
    await store.written();
    await store.close();
    expect((await ledgerEntriesOnDisk(store.dir)).map((e) => [e.minute, e.number, e.key])).toEqual([
      [0, 0, 'early'],
      [4294967295, 0, 'late'],
    ]);
    rmSync(join(store.dir, 'places.index'));
    // Rebuilt from the keys: both found; the window takes the early one, the bound the late one.
    const again = open(store.dir);
    expect([again.get('early'), again.get('late')]).toEqual([done(1, 5), done(2, far)]);
    expect(again.expire(Date.now(), 10, 100)).toBe(1);
    expect(again.expire(0, 0, 100)).toBe(1);
    expect(again.stats().entries).toBe(0);
    await again.close();
  });

  it('a changelog key with a raw line end is kept under its digest: its entry is found and no other is read for it', async () => {
    const M = 60_000;
    const store = open();
    // Not a key this release writes (they are JSON, a line end escaped), but a changelog can hold one.
    const lined = 'biz\nreq';
    store.applyChangelog(
      [
        { key: lined, value: bytes(done(1, 2 * M)) },
        { key: 'biz', value: bytes(done(2, 2 * M)) },
      ],
      1,
      0,
    );
    await store.written();
    expect([store.get(lined), store.get('biz'), store.get('req')]).toEqual([done(1, 2 * M), done(2, 2 * M), undefined]);
    await store.close();
    const onDisk = await ledgerEntriesOnDisk(store.dir);
    expect(onDisk.map((e) => e.key).sort()).toEqual([
      `#sha256:${createHash('sha256').update(lined).digest('hex')}`,
      'biz',
    ]);
    rmSync(join(store.dir, 'places.index'));
    const again = open(store.dir);
    expect([again.index.from, again.get(lined), again.get('biz')]).toEqual(['keys', done(1, 2 * M), done(2, 2 * M)]);
    await again.close();
  });

  it("after a reopen, a minute's next place comes after the last on disk, its first place included", async () => {
    const M = 60_000;
    for (const minute of [0, 29_500_000]) {
      const store = open();
      // The minute's only entry is at its first place (number 0).
      store.record('a', done(1, minute * M + 10));
      await store.flush();
      await store.close();
      // A new process: the minute's count is read from the disk, and a new request takes the next place.
      const again = open(store.dir);
      again.record('b', done(2, minute * M + 20));
      await again.flush();
      again.applyChangelog([{ key: 'c', value: bytes(done(3, minute * M + 30)) }], 1, 0);
      await again.written();
      expect([again.get('a'), again.get('b'), again.get('c')]).toEqual([
        done(1, minute * M + 10),
        done(2, minute * M + 20),
        done(3, minute * M + 30),
      ]);
      await again.close();
      expect((await ledgerEntriesOnDisk(store.dir)).map((e) => [e.minute, e.number, e.key])).toEqual([
        [minute, 0, 'a'],
        [minute, 1, 'b'],
        [minute, 2, 'c'],
      ]);
    }
  });

  it('a key with a lone surrogate is kept under its digest, and found after its flush', async () => {
    const store = open();
    // Not a key this release writes (JSON escapes a lone surrogate), but a changelog can hold one.
    const lone = 'biz\ud800req';
    store.record(lone, done(1, 60_000));
    await store.flush();
    store.applyChangelog([{ key: `${lone}2`, value: bytes(done(2, 60_000)) }], 1, 0);
    await store.written();
    await store.forgetKept();
    expect([store.get(lone), store.get(`${lone}2`)]).toEqual([done(1, 60_000), done(2, 60_000)]);
    await store.close();
  });

  it('keys of 64 characters and more, and keys too long for LMDB, go through writes, expiry and a reopen from the keys', async () => {
    const M = 60_000;
    const store = open();
    // A 14-character business and a UUID: an entry key of 77 characters.
    const long = ledgerKey('acme-retail-eu', '0b6c2f61-4a5e-4d1b-9a7e-3f0f7c9e2a11');
    // A request id of control characters, each escaped to 6 bytes: 2,000 bytes and more.
    const tooLong = ledgerKey('biz', '\u0001'.repeat(128) + 'x'.repeat(1300));
    expect(Buffer.byteLength(tooLong)).toBeGreaterThan(2000);
    store.applyChangelog([{ key: long, value: bytes(done(1, 2 * M)) }], 1, 0);
    store.record(tooLong, done(2, 3 * M));
    await store.flush();
    await store.written();
    expect([store.get(long), store.get(tooLong)]).toEqual([done(1, 2 * M), done(2, 3 * M)]);
    await store.close();
    rmSync(join(store.dir, 'places.index'));
    const again = open(store.dir);
    expect([again.get(long), again.get(tooLong)]).toEqual([done(1, 2 * M), done(2, 3 * M)]);
    again.applyChangelog([{ key: tooLong, value: bytes(done(3, 4 * M)) }], 2, 0);
    await again.written();
    expect(again.get(tooLong)).toEqual(done(3, 4 * M));
    expect(again.expire(3 * M, 100, 100)).toBe(1);
    expect([again.get(long), again.get(tooLong), again.stats().entries]).toEqual([undefined, done(3, 4 * M), 1]);
    await again.close();
  });

  it('writes not yet landed count in the order they were issued: a flush, then restore chunks, then forgetting', async () => {
    const M = 60_000;
    const store = open();
    const calling: LedgerEntry = { state: 'calling', offset: 1, at: 5 * M + 1, owner: 'o' };
    const outcome = done(2, 6 * M + 1);
    // A flush on its way, then two chunks of the same key: the later chunk stands.
    store.record('k', outcome);
    const flushing = store.flush();
    store.applyChangelog([{ key: 'k', value: bytes(calling) }], 2, 0);
    store.applyChangelog([{ key: 'k', value: bytes(outcome) }], 3, 0);
    await flushing;
    await store.written();
    await store.forgetKept();
    expect([store.get('k'), store.stats().entries]).toEqual([outcome, 1]);
    // A flush moving a key to a later minute, not awaited: forgetting waits for it.
    store.record('j', { state: 'calling', offset: 4, at: 5 * M, owner: 'o' });
    await store.flush();
    store.record('j', done(4, 7 * M));
    void store.flush();
    await store.forgetKept();
    expect(store.get('j')).toEqual(done(4, 7 * M));
    await store.close();
    const again = open(store.dir);
    expect([again.get('k'), again.get('j'), again.stats().entries]).toEqual([outcome, done(4, 7 * M), 2]);
    await again.close();
  });

  it("a flush issued before a restore chunk lands before it: the chunk's value stands, under its minute only", async () => {
    const M = 60_000;
    const store = open();
    // The member's own record of k at minute 8, its flush not awaited; then a chunk that the
    // changelog orders after it puts k at minute 6.
    store.record('k', done(1, 8 * M));
    const flushing = store.flush();
    store.applyChangelog(
      [
        { key: 'k', value: bytes(done(2, 6 * M)) },
        ...Array.from({ length: 50 }, (_, i) => ({ key: `o${i}`, value: bytes(done(10 + i, 6 * M)) })),
      ],
      2,
      0,
    );
    await flushing;
    await store.written();
    const onDisk = await ledgerEntriesOnDisk(store.dir);
    expect(onDisk.filter((e) => e.key === 'k').map((e) => e.minute)).toEqual([6]);
    expect(store.get('k')).toEqual(done(2, 6 * M));
    expect(store.stats()).toMatchObject({ entries: 51, indexSlots: 51 });
    await store.close();
  });

  it('a close while an advance runs writes the last base once, and leaves no journal open', async () => {
    const M = 60_000;
    const openFiles = (dir: string) =>
      readdirSync('/proc/self/fd').filter((fd) => {
        try {
          return readlinkSync(`/proc/self/fd/${fd}`).startsWith(dir);
        } catch {
          return false;
        }
      }).length;
    for (let round = 0; round < 20; round++) {
      const store = open();
      store.applyChangelog(
        Array.from({ length: 20 }, (_, i) => ({ key: `k${i}`, value: bytes(done(i, 5 * M)) })),
        1,
        0,
      );
      await store.written();
      store.record('x', done(99, 6 * M));
      const advancing = store.advanceTo(10).catch(() => undefined);
      // The close starts at a different point of the advance each round.
      for (let i = 0; i < round; i++) await Promise.resolve();
      await store.close();
      await advancing;
      await new Promise((resolve) => setTimeout(resolve, 5));
      expect(openFiles(store.dir)).toBe(0);
      const again = open(store.dir);
      expect([again.index.from, again.get('k3'), again.get('x')]).toEqual(['base', done(3, 5 * M), done(99, 6 * M)]);
      await again.close();
    }
  });

  it('two keys with the same fingerprint each find their own entry, through moves, removals, expiry and a reopen', async () => {
    const M = 60_000;
    // The first pair of keys whose 32-bit fingerprints meet (birthday bound: about 77,000 keys).
    const seen = new Map<number, string>();
    let pair: [string, string] | undefined;
    for (let i = 0; !pair; i++) {
      const key = ledgerKey('biz', `r${i}`);
      const print = KeyPlaces.fingerprint(key);
      const other = seen.get(print);
      if (other) pair = [other, key];
      else seen.set(print, key);
    }
    const [x, y] = pair;
    expect(KeyPlaces.fingerprint(x)).toBe(KeyPlaces.fingerprint(y));
    const store = open();
    store.applyChangelog(
      [
        { key: x, value: bytes(done(1, 2 * M)) },
        { key: y, value: bytes(done(2, 2 * M + 5)) },
      ],
      2,
      0,
    );
    await store.written();
    expect([store.get(x), store.get(y)]).toEqual([done(1, 2 * M), done(2, 2 * M + 5)]);
    // y moves to a later minute; x stays; then x goes (a tombstone), y stays.
    store.record(y, done(3, 4 * M));
    await store.flush();
    expect([store.get(x), store.get(y), store.stats().entries]).toEqual([done(1, 2 * M), done(3, 4 * M), 2]);
    store.applyChangelog([{ key: x, value: null }], 3, 0);
    await store.written();
    expect([store.get(x), store.get(y), store.stats().entries]).toEqual([undefined, done(3, 4 * M), 1]);
    // Both in one minute again, then that minute expires: both go, nothing is left under the fingerprint.
    store.applyChangelog([{ key: x, value: bytes(done(4, 4 * M + 1)) }], 4, 0);
    await store.written();
    await store.close();
    const again = open(store.dir);
    expect([again.get(x), again.get(y)]).toEqual([done(4, 4 * M + 1), done(3, 4 * M)]);
    expect(again.expire(5 * M, 100, 100)).toBe(2);
    expect([again.get(x), again.get(y), again.stats().entries]).toEqual([undefined, undefined, 0]);
    again.record(x, done(5, 6 * M));
    expect(again.get(y)).toBeUndefined();
    await again.close();
  });

  it('a directory written with the earlier time index, or keyed by minute then request, is wiped and restored again', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ledger-store-'));
    dirs.push(dir);
    const env = lmdbOpen({ path: join(dir, 'store.mdb'), maxDbs: 16, compression: false });
    await env.openDB<string, string>({ name: 'entries', encoding: 'string' }).put('k', encodeLedgerEntry(done(1, 1)));
    await env.openDB<unknown, string>({ name: 'meta', encoding: 'msgpack' }).put('identity', identity);
    await env.close();
    const store = LedgerStore.open(dir, identity);
    expect(store.get('k')).toBeUndefined();
    await store.close();
    // Layouts 3 and 4 (keyed by minute then request; 3 without the journal): their entries are not taken either.
    for (const layout of [3, 4]) {
      const older = lmdbOpen({ path: join(dir, 'store.mdb'), maxDbs: 16, compression: false });
      await older
        .openDB<Buffer, string>({ name: 'entries', encoding: 'binary' })
        .put('0000000000:j', bytes(done(2, 2)));
      await older
        .openDB<unknown, string>({ name: 'meta', encoding: 'msgpack' })
        .put('identity', { ...identity, layout });
      await older.close();
      const again = LedgerStore.open(dir, identity);
      expect([again.get('j'), again.stats().entries]).toEqual([undefined, 0]);
      await again.close();
    }
  });

  it('a directory of another identity is wiped, and a rebuild starts empty', async () => {
    const store = open();
    store.applyChangelog([{ key: 'k', value: bytes(done(1, 1)) }], 2, 0);
    await store.written();
    await store.close();
    const other = LedgerStore.open(store.dir, { ...identity, clusterId: 'c2' });
    expect(other.get('k')).toBeUndefined();
    expect(other.checkpoint()).toBeUndefined();
    other.applyChangelog([{ key: 'k', value: bytes(done(1, 1)) }], 2, 0);
    await other.written();
    const rebuilt = LedgerStore.rebuild(other);
    expect(rebuilt.get('k')).toBeUndefined();
    await rebuilt.close();
  });
});
