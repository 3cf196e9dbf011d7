import { messageStateSchema, type MessageState } from '../contracts/message-state.js';
import { requestOutcomeSchema, type RequestOutcome } from '../contracts/request-outcome.js';
import { ResultWaitError } from '../platform/wait-error.js';
import { errorMessage } from '../platform/errors.js';

/**
 * Waiting for a request's result from a tracker's HTTP API (`GET /requests/{id}`), with the
 * runtime's own `fetch`: no Kafka client, nothing beyond the contracts. The tracker answers the
 * message once the request was accepted (then its later statuses), or the rejected or expired
 * outcome of a request that created none; 404 until the result reached it, 503 while it
 * restores or rebalances. Both are waited out; any other answer ends the wait with an error.
 */

export type RequestAnswer = { kind: 'message'; message: MessageState } | { kind: 'outcome'; outcome: RequestOutcome };

export interface WaitForRequestOptions {
  /** The tracker's base URL (`http://tracker:8082`); its query routes need a credential. */
  trackerUrl: string;
  /** A token of the tracker's (`tracker.accessTokens`), sent as `Authorization: Bearer`. */
  token?: string;
  /** Give up after this long (default 60,000 ms). */
  timeoutMs?: number;
  /** Between two questions (default 500 ms). */
  pollIntervalMs?: number;
  /**
   * Which answer ends the wait (default: the first, the request's result). E.g. wait for the
   * message's final status: `(a) => a.kind === 'outcome' || ['read', 'delivery_failed'].includes(a.message.status)`.
   */
  until?: (answer: RequestAnswer) => boolean;
  signal?: AbortSignal;
}

const MAX_TIMEOUT_MS = 24 * 3600_000;

export async function waitForRequest(requestId: string, options: WaitForRequestOptions): Promise<RequestAnswer> {
  if (typeof requestId !== 'string' || requestId.length === 0 || requestId.length > 256)
    throw new TypeError('requestId: expected a string of 1 to 256 characters');
  const base = new URL(options.trackerUrl);
  if (base.protocol !== 'http:' && base.protocol !== 'https:')
    throw new TypeError(`trackerUrl: expected an http or https URL, not ${base.protocol}`);
  const timeoutMs = boundedMs('timeoutMs', options.timeoutMs ?? 60_000, 1, MAX_TIMEOUT_MS);
  const pollMs = boundedMs('pollIntervalMs', options.pollIntervalMs ?? 500, 10, 60_000);
  const url = new URL(`${base.pathname.replace(/\/+$/, '')}/requests/${encodeURIComponent(requestId)}`, base);
  const headers: Record<string, string> = {
    accept: 'application/json',
    ...(options.token ? { authorization: `Bearer ${options.token}` } : {}),
  };
  const deadline = Date.now() + timeoutMs;
  let last = 'no answer yet';
  for (;;) {
    if (options.signal?.aborted) throw new ResultWaitError('aborted', `waiting for request ${requestId} was aborted`);
    const left = deadline - Date.now();
    if (left <= 0)
      throw new ResultWaitError('timeout', `no result for request ${requestId} within ${timeoutMs} ms (${last})`);
    const signal = options.signal
      ? AbortSignal.any([options.signal, AbortSignal.timeout(left)])
      : AbortSignal.timeout(left);
    let response: Response | undefined;
    try {
      response = await fetch(url, { headers, signal });
    } catch (err) {
      // Unreachable for now (starting, restarting): asked again until the deadline.
      last = `the tracker could not be asked: ${errorMessage(err)}`;
    }
    if (response) {
      const answer = await read(requestId, response);
      if (answer !== undefined && (options.until ?? (() => true))(answer)) return answer;
      if (answer !== undefined)
        last = `last answer: ${answer.kind === 'message' ? `message ${answer.message.messageId} ${answer.message.status}` : answer.outcome.outcome}`;
      else last = `last answer: HTTP ${response.status}`;
    }
    await sleep(Math.min(pollMs, Math.max(0, deadline - Date.now())), options.signal);
  }
}

/** The answer, or undefined for one to wait out (404, 503); throws for one that will not change. */
async function read(requestId: string, response: Response): Promise<RequestAnswer | undefined> {
  if (response.status === 404 || response.status === 503 || response.status === 502 || response.status === 504) {
    await response.body?.cancel();
    return undefined;
  }
  const text = await response.text();
  if (response.status !== 200) {
    const detail = refusalDetail(text);
    const hint =
      response.status === 401 || response.status === 403 ? " (set `token` to one of the tracker's access tokens)" : '';
    throw new ResultWaitError(
      'refused',
      `the tracker refused the question about request ${requestId}: HTTP ${response.status}${detail ? `: ${detail}` : ''}${hint}`,
      { status: response.status },
    );
  }
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new ResultWaitError('invalid-answer', `the tracker's answer about request ${requestId} is not JSON`, {
      status: 200,
    });
  }
  const isOutcome = typeof body === 'object' && body !== null && 'outcome' in body;
  const parsed = isOutcome ? requestOutcomeSchema.safeParse(body) : messageStateSchema.safeParse(body);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new ResultWaitError(
      'invalid-answer',
      `the tracker's answer about request ${requestId} is not a ${isOutcome ? 'request outcome' : 'message state'}: ${issue.path.join('.')}: ${issue.message}`,
      { status: 200 },
    );
  }
  if (isOutcome) return { kind: 'outcome', outcome: parsed.data as RequestOutcome };
  const { eventIds: _eventIds, ...message } = parsed.data as MessageState & { eventIds?: string[] };
  return { kind: 'message', message };
}

/** The message of a refusal's body (its JSON `message`, else the text), bounded. */
function refusalDetail(text: string): string | undefined {
  try {
    const body = JSON.parse(text) as { message?: unknown };
    return typeof body.message === 'string' ? body.message.slice(0, 300) : undefined;
  } catch {
    return text.length > 0 ? text.slice(0, 300) : undefined;
  }
}

function boundedMs(name: string, value: number, min: number, max: number): number {
  if (!Number.isFinite(value) || value < min || value > max)
    throw new RangeError(`${name}: expected ${min} to ${max} ms, got ${value}`);
  return value;
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}
