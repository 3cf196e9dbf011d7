import type { ErrorCode } from '../platform/errors.js';

/**
 * The one place where error codes become HTTP answers of the ingress. Every 503 carries
 * Retry-After: the provider retries, and nothing the ingress refused was acknowledged.
 */
export const INGRESS_STATUS: Partial<Record<ErrorCode, number>> = {
  BAD_FRAMING: 400,
  SIGNATURE_INVALID: 403,
  NOT_FOUND: 404,
  METHOD_NOT_ALLOWED: 405,
  BODY_TOO_LARGE: 413,
  UNSUPPORTED_ENCODING: 415,
  QUEUE_FULL: 503,
  PUBLISH_TIMEOUT: 503,
  KAFKA_UNAVAILABLE: 503,
  SHUTTING_DOWN: 503,
};

export function httpStatusOf(code: ErrorCode): number {
  return INGRESS_STATUS[code] ?? 500;
}

/** Status lines as uWebSockets.js wants them ("200 OK"), computed once. */
export const STATUS_LINE: Record<number, string> = {
  200: '200 OK',
  400: '400 Bad Request',
  403: '403 Forbidden',
  404: '404 Not Found',
  405: '405 Method Not Allowed',
  413: '413 Content Too Large',
  415: '415 Unsupported Media Type',
  500: '500 Internal Server Error',
  503: '503 Service Unavailable',
};

export function statusLine(status: number): string {
  return STATUS_LINE[status] ?? `${status} Status`;
}
