/**
 * One error type with stable codes. Adapters map codes to HTTP statuses or exit codes
 * in one place each; messages are for humans, codes are for programs and tests.
 */
export type ErrorCode =
  | 'CONFIG_INVALID'
  | 'CONFIG_FILE_UNREADABLE'
  | 'JAVA_MISSING'
  | 'MAVEN_MISSING'
  | 'KAFKA_JARS_UNAVAILABLE'
  | 'LOCAL_BROKER_FAILED'
  | 'LOCAL_BROKER_BUSY'
  | 'KAFKA_UNAVAILABLE'
  | 'KAFKA_CONNECT_FAILED'
  | 'UWS_NATIVE_MISSING'
  | 'SIMULATOR_UNAVAILABLE'
  | 'PUBLISH_TIMEOUT'
  | 'QUEUE_FULL'
  | 'SHUTTING_DOWN'
  | 'INVALID_ARGUMENT'
  | 'PROVIDER_UNAVAILABLE'
  | 'SIGNATURE_INVALID'
  | 'BODY_TOO_LARGE'
  | 'BAD_FRAMING'
  | 'UNSUPPORTED_ENCODING'
  | 'NOT_FOUND'
  | 'METHOD_NOT_ALLOWED'
  | 'UNAUTHENTICATED'
  | 'FORBIDDEN';

export class MsgbridgeError extends Error {
  readonly code: ErrorCode;
  readonly details: Record<string, unknown> | undefined;

  constructor(code: ErrorCode, message: string, options?: { cause?: unknown; details?: Record<string, unknown> }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'MsgbridgeError';
    this.code = code;
    this.details = options?.details;
  }
}

export function isMsgbridgeError(err: unknown, code?: ErrorCode): err is MsgbridgeError {
  return err instanceof MsgbridgeError && (code === undefined || err.code === code);
}

/**
 * The message of whatever was thrown: an Error's (or an error-like object's) message, else the
 * value as text. For log fields and answers, in place of `(err as Error).message`, which is
 * undefined for a thrown string and throws for a thrown null.
 */
export function errorMessage(error: unknown): string {
  if (error instanceof Error) return error.message;
  if (typeof error === 'object' && error !== null && typeof (error as { message?: unknown }).message === 'string')
    return (error as { message: string }).message;
  return String(error);
}
