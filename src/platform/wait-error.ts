/**
 * A wait for an answer that ended without it (a producer waiting for its request's result):
 * `reason` says why, for programs; the message says it for people.
 */
export type WaitFailure = 'timeout' | 'refused' | 'invalid-answer' | 'aborted' | 'failed';

export class ResultWaitError extends Error {
  override readonly name = 'ResultWaitError';
  constructor(
    readonly reason: WaitFailure,
    message: string,
    options?: { status?: number; cause?: unknown },
  ) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.status = options?.status;
  }

  /** The HTTP status of a refusal, when it came from an HTTP answer. */
  readonly status: number | undefined;
}
