import { MsgbridgeError } from '../platform/errors.js';

/** Times on the wire: the provider's epoch seconds, and ISO times in canonical UTC form. */

/** 9999-12-31T23:59:59Z: later times have no four-digit-year ISO form and would not parse back. */
export const MAX_EPOCH_MS = 253_402_300_799_000;
const ISO_SHAPE = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/;

/** The provider's `timestamp` (decimal seconds since the epoch) as an ISO time. */
export function isoFromEpochSeconds(value: string, field = 'timestamp'): string {
  const seconds = /^\d{1,12}$/.test(value) ? Number(value) : NaN;
  const ms = seconds * 1000;
  if (!Number.isFinite(ms) || ms > MAX_EPOCH_MS) {
    throw invalid(
      `${field} must be decimal seconds since the Unix epoch, before year 10000 (got ${JSON.stringify(value)})`,
      field,
      value,
    );
  }
  return new Date(ms).toISOString();
}

/** An ISO time with a zone, in canonical UTC form (`toISOString`); throws when unparseable. */
export function canonicalIso(value: string, field: string): string {
  const ms = ISO_SHAPE.test(value) ? Date.parse(value) : NaN;
  if (!Number.isFinite(ms) || ms < 0 || ms > MAX_EPOCH_MS) {
    throw invalid(
      `${field} must be an ISO 8601 time with a zone, such as 2026-11-23T10:00:00Z (got ${JSON.stringify(value)})`,
      field,
      value,
    );
  }
  return new Date(ms).toISOString();
}

function invalid(message: string, field: string, value: unknown): MsgbridgeError {
  return new MsgbridgeError('INVALID_ARGUMENT', message, { details: { field, value } });
}
