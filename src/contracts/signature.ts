import { createHmac, timingSafeEqual } from 'node:crypto';

/** HMAC-SHA256 over the exact bytes, standard Base64 with padding: the provider's signature. */
export function signBody(secret: string, body: Uint8Array | string): string {
  return createHmac('sha256', secret).update(body).digest('base64');
}

const BASE64_SHA256 = /^[A-Za-z0-9+/]{43}=$/;

/**
 * True when `signature` is the signature of `body` under any of `secrets` (several during a
 * rotation). Runs before any parsing. Every secret is tried, and the comparison is constant
 * time over the 32 digest bytes, so timing tells nothing about which bytes or secret matched.
 */
export function verifySignature(secrets: readonly string[], body: Uint8Array, signature: string | undefined): boolean {
  if (signature === undefined || !BASE64_SHA256.test(signature)) return false;
  const provided = Buffer.from(signature, 'base64');
  let ok = false;
  for (const secret of secrets) {
    const expected = createHmac('sha256', secret).update(body).digest();
    ok = timingSafeEqual(expected, provided) || ok;
  }
  return ok;
}
