/**
 * `Retry-After` (RFC 9110 §10.2.3) in milliseconds from `nowMs`, for every HTTP client of the
 * project (the sender reading the provider, the simulator reading the ingress). Undefined when
 * absent or unreadable; never negative.
 *
 * - delay-seconds: digits, also read with a fraction ("1.5" = 1500 ms), which some servers send;
 * - HTTP-date in any of the three forms a recipient must accept: IMF-fixdate, RFC 850 and
 *   asctime (which carries no zone and is UTC).
 *
 * Anything else ("-1", "soon", "5 ms") is unreadable. Date.parse alone would not do: it reads
 * "1.5" or "-1" as dates in 2001, which would turn into "retry at once".
 */
export function parseRetryAfter(value: string | readonly string[] | undefined, nowMs: number): number | undefined {
  const text = (typeof value === 'string' ? value : value?.[0])?.trim();
  if (text === undefined || text === '') return undefined;
  if (/^\d+(\.\d+)?$/.test(text)) return Math.round(Number(text) * 1000);
  const date =
    IMF_FIXDATE.test(text) || RFC850_DATE.test(text)
      ? Date.parse(text)
      : ASCTIME_DATE.test(text)
        ? Date.parse(`${text} GMT`)
        : Number.NaN;
  return Number.isNaN(date) ? undefined : Math.max(0, date - nowMs);
}

const DAY = '(Mon|Tue|Wed|Thu|Fri|Sat|Sun)';
const MONTH = '(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)';
const TIME = '\\d{2}:\\d{2}:\\d{2}';
/** Sun, 06 Nov 1994 08:49:37 GMT */
const IMF_FIXDATE = new RegExp(`^${DAY}, \\d{2} ${MONTH} \\d{4} ${TIME} GMT$`);
/** Sunday, 06-Nov-94 08:49:37 GMT */
const RFC850_DATE = new RegExp(
  `^(Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday), \\d{2}-${MONTH}-\\d{2} ${TIME} GMT$`,
);
/** Sun Nov  6 08:49:37 1994 */
const ASCTIME_DATE = new RegExp(`^${DAY} ${MONTH} [ \\d]\\d ${TIME} \\d{4}$`);
