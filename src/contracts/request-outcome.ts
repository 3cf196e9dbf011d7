import { z } from 'zod';
import { requestContentSchema, sendFailureSchema, type RequestContent, type SendFailure } from './send.js';

/**
 * The value on `request-outcomes` (compacted, key = request id): the last rejected or expired
 * result of a request, kept by the tracker so that a request that never became a message can be
 * found by its id (`GET /requests/{id}`, the console). The rules that produce it live in the
 * tracker (request-outcome-rules.ts); an accepted request is a message (`message-state`).
 */
export interface RequestOutcome {
  requestId: string;
  /** Null when the result named none (a dead letter whose business could not be read). */
  businessId: string | null;
  outcome: 'rejected' | 'expired';
  type: 'text' | 'template' | null;
  recipient: string | null;
  attempts: number;
  maybeSent: boolean;
  /** The rejection's error (`error.code`, `cntTraceId`...); null for an expired request. */
  error: SendFailure | null;
  /** When an expired request stopped being worth sending, and what set that time; null when rejected. */
  expiresAt: string | null;
  expiredBy: 'expiresAt' | 'ttlMs' | 'maxRequestAgeMs' | null;
  /**
   * When it was rejected or expired (the result's `rejectedAt` / `expiredAt`; the record's time when a result of 0.1.0
   * has none).
   */
  at: string;
  /** The request's content as the result carried it; absent: not recorded. */
  content?: RequestContent;
  /** When the tracker wrote this value. */
  updatedAt: string;
}

const isoTime = z.iso.datetime({ offset: true });

/** Parses a `request-outcomes` value back (restore, queries). */
export const requestOutcomeSchema = z.object({
  requestId: z.string().min(1),
  businessId: z.string().min(1).nullable(),
  outcome: z.enum(['rejected', 'expired']),
  type: z.enum(['text', 'template']).nullable(),
  recipient: z.string().nullable(),
  attempts: z.number().int().min(0),
  maybeSent: z.boolean(),
  error: sendFailureSchema.nullable(),
  expiresAt: isoTime.nullable(),
  expiredBy: z.enum(['expiresAt', 'ttlMs', 'maxRequestAgeMs']).nullable(),
  at: isoTime,
  content: requestContentSchema.optional(),
  updatedAt: isoTime,
});

const _sameShape: (v: z.infer<typeof requestOutcomeSchema>) => RequestOutcome = (v) => v;
void _sameShape;
