import { Counter, type Registry } from 'prom-client';
import type { IncomingHttpHeaders } from 'node:http';
import { watchValidatedFile, type BusinessesWatch } from '../config/businesses-file.js';
import { readTokensFile } from '../config/tokens-file.js';
import type { TrackerConfig } from '../config/schema.js';
import type { HttpAnswer } from '../runtime/http-server.js';
import type { Logger } from '../platform/logger.js';
import {
  accessConfigured,
  allows,
  authenticate,
  unauthenticatedMessage,
  type AccessRole,
  type AccessRules,
  type AccessToken,
  type Caller,
} from './access.js';

/**
 * The tracker's access control at its HTTP edge (README "Console and access"): the configured
 * tokens plus the live tokens file (an invalid change is refused once, the last good set stays),
 * the 401 and 403 answers. Logs name tokens and users, never a token or a digest.
 */
/** What `admit` decides of a request: its caller, or the 401/403 answer. */
export type AccessDecision = { ok: true; caller: Caller } | { ok: false; answer: HttpAnswer };

export class AccessGuard {
  private fileTokens: AccessToken[] = [];
  private rules: AccessRules;
  private watch: BusinessesWatch | undefined;
  private readonly onHangup = () => this.watch?.reload();
  private readonly refusals: Counter<'reason'>;

  constructor(
    private readonly config: TrackerConfig,
    private readonly logger: Logger,
    registry: Registry,
  ) {
    this.refusals = new Counter({
      name: 'msgbridge_tracker_access_refused_total',
      help: 'Queries and console requests refused: 401 (no or unknown credential) and 403 (role too low)',
      labelNames: ['reason'],
      registers: [registry],
    });
    this.rules = this.compile();
  }

  /**
   * Reads the tokens file (an invalid one stops the start: CONFIG_INVALID) and watches it; warns once when nothing can
   * ever pass.
   */
  start(pollMs?: number): void {
    const path = this.config.accessTokensFile;
    if (path !== null) {
      this.fileTokens = readTokensFile(path);
      this.rules = this.compile();
      this.watch = watchValidatedFile({
        path,
        read: readTokensFile,
        ...(pollMs !== undefined ? { pollMs } : {}),
        apply: (tokens) => {
          this.fileTokens = tokens;
          this.rules = this.compile();
        },
        onApplied: (tokens) =>
          this.logger.info(
            { file: path, tokens: tokens.map((t) => `${t.name} (${t.role})`) },
            'tracker tokens file reloaded',
          ),
        onError: (error) =>
          this.logger.error(
            { file: path, err: error.message },
            'tracker tokens file refused: the last good set of tokens stays in force',
          ),
      });
      process.on('SIGHUP', this.onHangup);
    }
    if (!accessConfigured(this.rules)) {
      this.logger.warn(
        {},
        'no credential is configured: every query and the console answer 401. Add { "name", "role": "read" | "operator", "sha256": "<sha256sum of the token>" } to tracker.accessTokens or to a JSON file named by MSGBRIDGE_TRACKER_TOKENS_FILE (src/tracker/README.md, "Console and access")',
      );
    }
  }

  stop(): void {
    process.off('SIGHUP', this.onHangup);
    this.watch?.stop();
  }

  /** The tokens file read again now (SIGHUP, tests). */
  reload(): void {
    this.watch?.reload();
  }

  /** Whether phone numbers are masked for this caller. */
  masks(caller: Caller): boolean {
    return this.config.maskRecipients && caller.role === 'read';
  }

  /** The headers that carry this caller's credential, passed along when a query is forwarded to another member. */
  credentialHeaders(headers: IncomingHttpHeaders): Record<string, string> {
    const out: Record<string, string> = {};
    if (typeof headers.authorization === 'string') out.authorization = headers.authorization;
    const user = this.rules.trustedUserHeader;
    if (user !== undefined && typeof headers[user] === 'string') out[user] = headers[user];
    return out;
  }

  admit(headers: IncomingHttpHeaders, needed: AccessRole, what: string): AccessDecision {
    const result = authenticate(headers, this.rules);
    if (!result.ok) {
      this.refusals.inc({ reason: result.reason });
      return {
        ok: false,
        answer: {
          status: 401,
          headers: {
            'www-authenticate': `Bearer realm="msgbridge tracker"${result.reason === 'unknown' ? ', error="invalid_token"' : ''}`,
            'cache-control': 'no-store',
          },
          body: { error: 'UNAUTHENTICATED', message: unauthenticatedMessage(result.reason) },
        },
      };
    }
    if (!allows(result.caller.role, needed)) {
      this.refusals.inc({ reason: 'role' });
      this.logger.warn(
        { caller: result.caller.name, callerRole: result.caller.role, action: what },
        'tracker access refused: the operator role is needed',
      );
      return {
        ok: false,
        answer: {
          status: 403,
          headers: { 'cache-control': 'no-store' },
          body: {
            error: 'FORBIDDEN',
            message: `${what} needs the operator role; ${result.caller.name} has the ${result.caller.role} role`,
          },
        },
      };
    }
    return { ok: true, caller: result.caller };
  }

  private compile(): AccessRules {
    const configured: AccessToken[] = this.config.accessTokens.map((t) => ({
      name: t.name,
      role: t.role,
      sha256: t.sha256,
    }));
    // A name in both keeps the file's entry (the file is what an operator rotates).
    const tokens = [...configured.filter((t) => !this.fileTokens.some((f) => f.name === t.name)), ...this.fileTokens];
    return {
      tokens,
      trustedUserHeader: this.config.trustedUserHeader ?? undefined,
      trustedOperators: this.config.trustedUserOperators,
    };
  }
}
