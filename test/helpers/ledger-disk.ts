import { join } from 'node:path';
import { open } from 'lmdb';

/** One entry of a ledger store as its file holds it, decoded here and not by the store's code. */
export interface LedgerEntryOnDisk {
  /** The key: the minute (4 bytes, big-endian), then the entry's number in it (4 bytes). */
  minute: number;
  number: number;
  /** The value: the request key, a line end, then the record's bytes. */
  key: string;
  record: Buffer;
}

/** The entries of the ledger store in `dir`, in key order, read with a read-only handle of their own. */
export async function ledgerEntriesOnDisk(dir: string): Promise<LedgerEntryOnDisk[]> {
  const env = open({ path: join(dir, 'store.mdb'), maxDbs: 16, compression: false, readOnly: true });
  try {
    const db = env.openDB<Buffer, Buffer>({ name: 'entries', encoding: 'binary', keyEncoding: 'binary' });
    return [...db.getRange({})].map(({ key: raw, value }) => {
      const key = Buffer.from(raw.buffer, raw.byteOffset, raw.length);
      if (key.length !== 8) throw new Error(`an entry key of ${key.length} bytes, not 8`);
      const lineEnd = value.indexOf(0x0a);
      if (lineEnd < 0) throw new Error('an entry value without a line end after its key');
      return {
        minute: key.readUInt32BE(0),
        number: key.readUInt32BE(4),
        key: value.toString('utf8', 0, lineEnd),
        record: value.subarray(lineEnd + 1),
      };
    });
  } finally {
    await env.close();
  }
}
