/**
 * Which fetched records belong to aborted transactions, as the Java consumer decides it
 * (read_committed): the broker lists the aborted transactions a fetch overlaps, each with its
 * producer and first offset, in the order they were aborted. Sorted by first offset, each one
 * starts skipping its producer's transactional records at that offset, every transaction begun
 * by a record's offset taken into account, until that producer's abort marker.
 * src/kafka/README.md, "Reading changelogs".
 */

/** A record as kafkajs decodes it, with the record batch it came in (absent in a pre-0.11 message set). */
export interface TransactionalRecord {
  offset: string;
  key: Buffer | null;
  isControlRecord?: boolean;
  batchContext?: { producerId: string; inTransaction: boolean };
}

/** A transaction the broker says was aborted, among those the fetched records may belong to. */
export interface AbortedTransaction {
  producerId: string;
  firstOffset: string;
}

/** `records` without those of aborted transactions; markers and other control records are kept. */
export function withoutAbortedRecords<R extends TransactionalRecord>(
  records: R[],
  abortedTransactions: AbortedTransaction[] | undefined,
): R[] {
  if (!abortedTransactions || abortedTransactions.length === 0) return records;
  const aborted = abortedTransactions
    .map((t) => ({ producerId: t.producerId, firstOffset: Number(t.firstOffset) }))
    .sort((a, b) => a.firstOffset - b.firstOffset);
  let nextAborted = 0;
  const abortedProducers = new Set<string>();
  return records.filter((record) => {
    const batch = record.batchContext;
    if (!batch?.inTransaction) return true;
    const offset = Number(record.offset);
    while (nextAborted < aborted.length && aborted[nextAborted]!.firstOffset <= offset)
      abortedProducers.add(aborted[nextAborted++]!.producerId);
    if (record.isControlRecord) {
      if (isAbortMarker(record)) abortedProducers.delete(batch.producerId);
      return true;
    }
    return !abortedProducers.has(batch.producerId);
  });
}

/** A control record's key: a version (int16), then its type (int16): 0 an abort, 1 a commit. */
function isAbortMarker(record: TransactionalRecord): boolean {
  const key = record.key;
  return key !== null && key.length >= 4 && key.readInt16BE(2) === 0;
}
