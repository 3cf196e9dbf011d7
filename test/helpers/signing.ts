import { createHmac } from 'node:crypto';

/** Independent signature computation for tests: node:crypto directly, not the project's helper. */
export function hmacBase64(secret: string, body: string | Buffer): string {
  return createHmac('sha256', secret).update(body).digest('base64');
}
