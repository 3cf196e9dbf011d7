import pino, { type Logger } from 'pino';

export type { Logger };

/**
 * Structured JSON logs. Redaction is a second line of defence: code never logs secrets or
 * full signatures in the first place.
 */
export function createLogger(
  options: { level?: string; name?: string; destination?: NodeJS.WritableStream } = {},
): Logger {
  return pino(
    {
      level: options.level ?? 'info',
      base: { service: 'msgbridge', ...(options.name ? { role: options.name } : {}) },
      redact: {
        paths: [
          'apiKey',
          '*.apiKey',
          'signingSecrets',
          '*.signingSecrets',
          'password',
          '*.password',
          'headers["x-api-key"]',
          'headers["x-service-hmac-sha256"]',
          'signature',
        ],
        censor: '[redacted]',
      },
      timestamp: pino.stdTimeFunctions.isoTime,
    },
    options.destination ?? pino.destination({ dest: 2, sync: false }),
  );
}

/**
 * Loggers for several roles in one process (`msgbridge dev`): one pino instance each on a shared
 * destination, so every line has one `role` key (a child logger would add a second).
 */
export function roleLoggers<R extends string>(
  roles: readonly R[],
  options: { level?: string; destination?: NodeJS.WritableStream } = {},
): Record<R, Logger> {
  const destination =
    options.destination ?? (pino.destination({ dest: 2, sync: false }) as unknown as NodeJS.WritableStream);
  return Object.fromEntries(
    roles.map((role) => [role, createLogger({ ...options, name: role, destination })]),
  ) as Record<R, Logger>;
}

/** First characters of a signature, enough to correlate in logs without revealing it. */
export function signaturePrefix(signature: string | undefined): string | undefined {
  return signature === undefined ? undefined : `${signature.slice(0, 6)}…`;
}

export const silentLogger: Logger = pino({ level: 'silent' });
