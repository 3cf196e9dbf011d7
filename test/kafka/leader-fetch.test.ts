import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import { committedRecords, type FetchedRecord } from '../../src/kafka/leader-fetch.js';

const require = createRequire(import.meta.url);
/** kafkajs's batch of a fetched partition, as every kafkajs consumer builds it (its filter replaced: kafkajs-abort-fix.ts). */
const KafkajsBatch = require('kafkajs/src/consumer/batch.js') as new (
  topic: string,
  fetchedOffset: string,
  partition: object,
) => { messages: FetchedRecord[] };

/** A record as kafkajs decodes it: `producer` null for a record outside any transaction. */
function record(offset: number, producer: string | null, value: string): FetchedRecord {
  return {
    offset: String(offset),
    key: Buffer.from(value),
    value: Buffer.from(value),
    timestamp: '0',
    attributes: 0,
    headers: {},
    isControlRecord: false,
    batchContext: {
      firstOffset: String(offset),
      lastOffsetDelta: 0,
      producerId: producer ?? '-1',
      inTransaction: producer !== null,
    },
  } as FetchedRecord;
}

/** A transaction marker of `producer`: a control record whose key is version 0, then 0 (abort) or 1 (commit). */
function marker(offset: number, producer: string, type: 'abort' | 'commit'): FetchedRecord {
  const key = Buffer.alloc(4);
  key.writeInt16BE(type === 'abort' ? 0 : 1, 2);
  return {
    ...record(offset, producer, ''),
    key,
    isControlRecord: true,
    batchContext: { firstOffset: String(offset), lastOffsetDelta: 0, producerId: producer, inTransaction: true },
  } as FetchedRecord;
}

const values = (records: { value: Buffer | null }[]) => records.map((r) => r.value!.toString());

describe('the committed records of a fetch (read_committed, as the Java consumer filters them)', () => {
  // Two producers' transactions interleave: A's from offset 10, B's from 11, both aborted, B's first.
  const log = [
    record(9, null, 'plain-9'),
    record(10, 'A', 'a-10'),
    record(11, 'B', 'b-11'),
    record(12, 'A', 'a-12'),
    record(13, 'B', 'b-13'),
    marker(14, 'B', 'abort'),
    marker(15, 'A', 'abort'),
    record(16, 'B', 'b-16'),
    marker(17, 'B', 'commit'),
    record(18, null, 'plain-18'),
  ];
  // As the broker lists them: in the order they were aborted (B's marker came first).
  const aborted = [
    { producerId: 'B', firstOffset: '11' },
    { producerId: 'A', firstOffset: '10' },
  ];

  it('drops every record of interleaved aborted transactions and the markers, keeps the committed ones', () => {
    expect(values(committedRecords(log, aborted, 9))).toEqual(['plain-9', 'b-16', 'plain-18']);
  });

  it('read from inside the aborted transactions: the same, without the records below the fetch offset', () => {
    expect(values(committedRecords(log.slice(3), aborted, 12))).toEqual(['b-16', 'plain-18']);
  });

  it("kafkajs's consumers filter the same way: its batch module gets the fixed filter", () => {
    // kafkajs 2.2.4's own filter kept a-10 here (it takes the list as sorted by first offset).
    const batch = new KafkajsBatch('t', '9', {
      partition: 0,
      highWatermark: '19',
      abortedTransactions: aborted,
      messages: log,
    });
    expect(values(batch.messages)).toEqual(['plain-9', 'b-16', 'plain-18']);
  });

  it('a marker-only or empty fetch yields nothing', () => {
    expect(committedRecords([marker(5, 'A', 'commit')], [], 5)).toEqual([]);
    expect(committedRecords([], aborted, 0)).toEqual([]);
  });
});
