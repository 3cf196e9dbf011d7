import { createHash, timingSafeEqual } from 'node:crypto';

/**
 * Who may ask the tracker what (README "Console and access"): a bearer token
 * matched against the configured SHA-256 digests, or the user a trusted SSO proxy names in a
 * header; two roles, `read` and `operator`. Pure: the HTTP edge (access-guard.ts) applies it.
 */

export type AccessRole = 'read' | 'operator';

export interface AccessToken {
  name: string;
  role: AccessRole;
  /** Lower-case hex SHA-256 of the token. */
  sha256: string;
}

/** The caller of one request, as logs and the console name it. */
export interface Caller {
  name: string;
  role: AccessRole;
  via: 'token' | 'proxy';
}

export interface AccessRules {
  tokens: readonly AccessToken[];
  /** Lower-case header name set by a trusted SSO proxy; undefined = off. */
  trustedUserHeader?: string | undefined;
  /** Users of the trusted header with the operator role. */
  trustedOperators?: readonly string[];
}

export type Authentication =
  { ok: true; caller: Caller } | { ok: false; reason: 'none_configured' | 'missing' | 'malformed' | 'unknown' };

const BEARER = /^Bearer[ \t]+([\x21-\x7e]{1,4096})[ \t]*$/i;

export function sha256Hex(token: string): string {
  return createHash('sha256').update(token, 'utf8').digest('hex');
}

/** The token of an `Authorization: Bearer <token>` header; undefined when absent, null when malformed. */
export function bearerToken(header: string | string[] | undefined): string | undefined | null {
  if (header === undefined) return undefined;
  if (Array.isArray(header)) return null;
  const m = BEARER.exec(header);
  return m ? m[1]! : null;
}

/**
 * The entry whose digest equals the token's. Every entry is compared, with timingSafeEqual on
 * equal-length digests: the time does not depend on which entry matched or how much of a
 * digest agreed (the token itself never meets a comparison).
 */
export function matchToken(token: string, tokens: readonly AccessToken[]): AccessToken | undefined {
  const presented = createHash('sha256').update(token, 'utf8').digest();
  let found: AccessToken | undefined;
  for (const entry of tokens) {
    const expected = Buffer.from(entry.sha256, 'hex');
    if (expected.length === presented.length && timingSafeEqual(expected, presented) && found === undefined)
      found = entry;
  }
  return found;
}

/**
 * Whether any credential can ever succeed (none: every query answers 401, and the tracker says how to configure one).
 */
export function accessConfigured(rules: AccessRules): boolean {
  return rules.tokens.length > 0 || rules.trustedUserHeader !== undefined;
}

/**
 * The caller of a request. A bearer token wins over the proxy header (a script behind the
 * proxy keeps its own identity); a header value is taken as the user only when the proxy is
 * configured as trusted.
 */
export function authenticate(
  headers: Record<string, string | string[] | undefined>,
  rules: AccessRules,
): Authentication {
  const token = bearerToken(headers.authorization);
  if (token === null) return { ok: false, reason: 'malformed' };
  if (token !== undefined) {
    const entry = matchToken(token, rules.tokens);
    return entry
      ? { ok: true, caller: { name: entry.name, role: entry.role, via: 'token' } }
      : { ok: false, reason: 'unknown' };
  }
  if (rules.trustedUserHeader !== undefined) {
    const user = headers[rules.trustedUserHeader];
    if (typeof user === 'string' && user.trim() !== '' && user.length <= 256) {
      const name = user.trim();
      return {
        ok: true,
        caller: { name, role: rules.trustedOperators?.includes(name) ? 'operator' : 'read', via: 'proxy' },
      };
    }
  }
  return { ok: false, reason: accessConfigured(rules) ? 'missing' : 'none_configured' };
}

/** Whether a caller of `role` may do what needs `needed`. */
export function allows(role: AccessRole, needed: AccessRole): boolean {
  return needed === 'read' || role === 'operator';
}

/** What a 401 says: how to get in, never which part of a credential was wrong. */
export function unauthenticatedMessage(reason: Exclude<Authentication, { ok: true }>['reason']): string {
  switch (reason) {
    case 'none_configured':
      return 'no credential is configured on this tracker: add a token to tracker.accessTokens or to the file named by MSGBRIDGE_TRACKER_TOKENS_FILE (see the tracker README, "Console and access")';
    case 'malformed':
      return 'the Authorization header must be "Bearer <token>"';
    case 'missing':
      return 'this needs a credential: send "Authorization: Bearer <token>" (ask your msgbridge operator for a token)';
    case 'unknown':
      return 'the token is not one this tracker knows (revoked, or mistyped): ask your msgbridge operator for a token';
  }
}

// ---- masking (tracker.maskRecipients, for the read role) ----

/** `+15550002222` → `+1555•••2222`: the country code and area stay readable, the rest but the last 4 digits hidden. */
export function maskPhone(phone: string): string {
  // Already masked (an answer forwarded from another member is masked there): unchanged.
  if (phone.includes('•')) return phone;
  const m = /^(\+?)(\d+)$/.exec(phone.trim());
  if (!m) return phone.length > 4 ? `•••${phone.slice(-4)}` : '•••';
  const digits = m[2]!;
  if (digits.length <= 4) return `${m[1]}•••`;
  if (digits.length < 9) return `${m[1]}•••${digits.slice(-4)}`;
  return `${m[1]}${digits.slice(0, 4)}•••${digits.slice(-4)}`;
}

/** Fields that hold a phone number wherever they appear (states, windows, webhook bodies). */
const PHONE_KEYS = new Set(['recipient', 'customer', 'from', 'to', 'wa_id', 'phone', 'phoneNumber', 'msisdn']);
/** Objects naming a party (a webhook's `sender` and `recipient`): their `id` is a phone number. */
const PARTY_KEYS = new Set(['sender', 'recipient']);
/** A phone number inside free text: `+` and 5-20 digits (the contracts' format), not part of a longer token. */
const PHONE_IN_TEXT = /(?<![\w+])\+\d{5,20}(?!\d)/g;

export function maskText(text: string): string {
  return text.replace(PHONE_IN_TEXT, (n) => maskPhone(n));
}

/**
 * A template parameter's value that is a phone number by itself (9-20 digits, so that a date's 8
 * are not; optional `+`, spaces, dashes, dots, brackets): masked whole, `+` or not. A request's content (README
 * "Console and access") is otherwise shown, with `+digits` in its text masked like any text.
 */
const PHONE_LIKE_VALUE = /^\+?[\d\s().-]{9,30}$/;
const isPhoneLike = (value: string) =>
  PHONE_LIKE_VALUE.test(value.trim()) && /^\d{9,20}$/.test(value.replace(/\D/g, ''));

function maskParameters(list: unknown[]): unknown[] {
  return list.map((item) => {
    const masked = maskJson(item);
    if (masked === null || typeof masked !== 'object' || Array.isArray(masked)) return masked;
    const value = (item as Record<string, unknown>).value;
    return typeof value === 'string' && isPhoneLike(value)
      ? { ...masked, value: maskPhone(value.replace(/[^\d+]/g, '')) }
      : masked;
  });
}

/**
 * A copy of a JSON value with every phone number masked: known fields whole, others where `+digits` appears in text.
 */
export function maskJson(value: unknown, key?: string): unknown {
  if (typeof value === 'string') return key !== undefined && PHONE_KEYS.has(key) ? maskPhone(value) : maskText(value);
  if (Array.isArray(value)) return key === 'parameters' ? maskParameters(value) : value.map((v) => maskJson(v));
  if (value !== null && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) {
      if (PARTY_KEYS.has(k) && v !== null && typeof v === 'object' && !Array.isArray(v)) {
        const party = maskJson(v) as Record<string, unknown>;
        const id = (v as Record<string, unknown>).id;
        if (typeof id === 'string') party.id = maskPhone(id);
        out[k] = party;
      } else {
        out[k] = maskJson(v, k);
      }
    }
    return out;
  }
  return value;
}
