/** Marks a query one member forwarded to another (never forwarded again). */
export const FORWARDED_HEADER = 'x-msgbridge-forwarded';

export interface ForwardAnswer {
  status: number;
  body: unknown;
}

/**
 * A GET to another member, marked as forwarded (it answers from its own tasks, never forwards
 * again), with the caller's credential headers: the other member checks them itself.
 */
export async function forwardQuery(
  baseUrl: string,
  pathAndQuery: string,
  timeoutMs: number,
  credentials: Record<string, string> = {},
): Promise<ForwardAnswer> {
  const response = await fetch(new URL(pathAndQuery, baseUrl), {
    headers: { ...credentials, [FORWARDED_HEADER]: '1', accept: 'application/json' },
    signal: AbortSignal.timeout(timeoutMs),
  });
  const text = await response.text();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = { error: 'UNAVAILABLE', message: `member ${baseUrl} answered ${response.status} without JSON` };
  }
  return { status: response.status, body };
}
