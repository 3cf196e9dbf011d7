// The msgbridge support console (src/tracker/README.md, "Console and access"): one ES module,
// no framework, no build step. Every view is an address (/console/?q=…, ?message=…, ?dlq=…),
// loaded whole; data comes from the tracker's own queries with the token kept in sessionStorage
// (a `#token=` fragment is moved there and cleared, so it never reaches a server log).

const TOKEN_KEY = 'msgbridge.trackerToken';
const STEPS = [
  ['acceptedAt', 'accepted', 'the provider accepted the send'],
  ['sentAt', 'sent', 'the provider sent it to WhatsApp'],
  ['deliveredAt', 'delivered', "it reached the customer's phone"],
  ['readAt', 'read', 'the customer opened it'],
  ['failedAt', 'delivery_failed', 'the provider reports it failed'],
];
const PAGE = 25;
/** What `accepted` means for an SMS (README "Conversations"): the last state it will have, not a stuck one. */
const SMS_MEANING =
  'Handed to the SMS network. The provider sends no delivery receipts for SMS, so accepted is the last state this message will have: it is not stuck, and nothing more will come.';

const main = document.getElementById('main');
const live = document.getElementById('live');
const params = new URLSearchParams(location.search);
let me;

// ---- small helpers ----

/** An element: h('p', { class: 'x' }, 'text', child). Text is always text (never HTML). */
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs ?? {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat(Infinity))
    if (c !== undefined && c !== null && c !== false) el.append(c instanceof Node ? c : String(c));
  return el;
}

/** Replaces an element's children, leaving out the absent ones. */
const fill = (el, ...children) =>
  el.replaceChildren(...children.flat(Infinity).filter((c) => c !== undefined && c !== null && c !== false));
const link = (href, text, attrs = {}) => h('a', { href, ...attrs }, text);
const consoleUrl = (query) =>
  `/console/?${new URLSearchParams(Object.entries(query).filter(([, v]) => v !== undefined && v !== null && v !== '')).toString()}`;

function say(text) {
  live.textContent = '';
  setTimeout(() => (live.textContent = text), 50);
}

/** Replaces the main content, gives the page a title, and moves focus there (screen readers hear the new view). */
function show(title, ...content) {
  document.title = `${title} · msgbridge console`;
  fill(main, h('h1', { id: 'view-title' }, title), content);
  main.focus({ preventScroll: true });
  say(title);
}

/** A time in the viewer's zone, with UTC on hover (and for screen readers in the datetime attribute). */
function time(iso) {
  if (!iso) return h('span', { class: 'muted' }, '—');
  const d = new Date(iso);
  return h(
    'time',
    { datetime: iso, title: `${d.toISOString().replace('T', ' ').replace('.000Z', 'Z')} UTC` },
    d.toLocaleString(undefined, { dateStyle: 'medium', timeStyle: 'medium' }),
  );
}

function duration(ms) {
  if (!Number.isFinite(ms)) return '';
  const sign = ms < 0 ? '−' : '+';
  let s = Math.abs(ms) / 1000;
  if (s < 1) return `${sign}${Math.round(Math.abs(ms))} ms`;
  if (s < 60) return `${sign}${s.toFixed(s < 10 ? 1 : 0)} s`;
  const parts = [];
  for (const [unit, size] of [
    ['d', 86400],
    ['h', 3600],
    ['min', 60],
    ['s', 1],
  ]) {
    const n = Math.floor(s / size);
    if (n > 0 && parts.length < 2) parts.push(`${n} ${unit}`);
    s -= n * size;
  }
  return `${sign}${parts.join(' ')}`;
}

/** A table of rows under column headings; the caption, when given, is for screen readers. */
const dataTable = (caption, headings, rows) =>
  h(
    'table',
    {},
    caption ? h('caption', { class: 'visually-hidden' }, caption) : null,
    h(
      'thead',
      {},
      h(
        'tr',
        {},
        headings.map((c) => h('th', { scope: 'col' }, c)),
      ),
    ),
    h('tbody', {}, rows),
  );

/** A business id as a link to its messages ('—' when there is none). */
const businessLink = (id) => (id ? link(consoleUrl({ business: id }), id) : '—');

const statusBadge = (status) =>
  h('span', { class: `badge status-${status}` }, status === 'delivery_failed' ? 'failed' : status);

/** Whether a message went out as an SMS (its send result said so; absent: not recorded, WhatsApp's statuses apply). */
const isSms = (state) => state.send?.channel === 'sms';

/** A message's status, and for an SMS what it means (accepted is where an SMS ends). */
const statusCell = (state) => [
  statusBadge(state.status),
  isSms(state)
    ? [
        ' ',
        h(
          'span',
          { class: 'badge channel-sms', title: SMS_MEANING },
          state.status === 'accepted' ? 'SMS · final' : 'SMS',
        ),
      ]
    : null,
];

function copyButton(text, label) {
  return h(
    'button',
    {
      type: 'button',
      class: 'small',
      'aria-label': label,
      onclick: async (e) => {
        try {
          await navigator.clipboard.writeText(text);
          e.target.textContent = 'Copied';
          say('Copied');
        } catch {
          e.target.textContent = 'Select and copy';
        }
      },
    },
    'Copy',
  );
}

// ---- the credential ----

function takeTokenFromFragment() {
  const m = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (!m) return;
  sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
  history.replaceState(null, '', location.pathname + location.search);
}

const token = () => sessionStorage.getItem(TOKEN_KEY);

class ApiError extends Error {
  constructor(status, body) {
    super(body?.message ?? `the tracker answered ${status}`);
    this.status = status;
    this.body = body;
  }
}

/** A tracker query with the credential: the JSON body, or an ApiError (401, 403, 404, 503…). */
async function api(path, options = {}) {
  const headers = { accept: 'application/json' };
  if (token()) headers.authorization = `Bearer ${token()}`;
  if (options.body !== undefined) headers['content-type'] = 'application/json';
  let res;
  try {
    res = await fetch(path, {
      method: options.method ?? 'GET',
      headers,
      body: options.body === undefined ? undefined : JSON.stringify(options.body),
      cache: 'no-store',
    });
  } catch {
    throw new ApiError(0, {
      error: 'NETWORK',
      message: 'the tracker cannot be reached (is it running? is the network up?)',
    });
  }
  const body = await res.json().catch(() => undefined);
  if (!res.ok) throw new ApiError(res.status, body);
  return body;
}

function signIn(reason) {
  document.getElementById('who').hidden = true;
  const input = h('input', {
    id: 'token',
    type: 'password',
    autocomplete: 'off',
    spellcheck: 'false',
    required: true,
    'aria-describedby': 'token-help',
  });
  const form = h(
    'form',
    {
      class: 'card signin',
      onsubmit: (e) => {
        e.preventDefault();
        sessionStorage.setItem(TOKEN_KEY, input.value.trim());
        location.reload();
      },
    },
    h('label', { for: 'token' }, 'Access token'),
    input,
    h(
      'p',
      { id: 'token-help', class: 'muted' },
      'Ask your msgbridge operator for a token of the read role (support) or the operator role (redrives). ',
      'With msgbridge dev, open the console link it prints. The token stays in this browser tab only.',
    ),
    h('button', { type: 'submit' }, 'Sign in'),
  );
  show('Sign in', h('p', { class: 'notice warn' }, reason), form);
  input.focus();
}

/** Says what went wrong and what to do; 401 asks for a token. */
function failure(error, what) {
  if (error.status === 401) return signIn(`${error.message}.`);
  const advice = {
    403: 'Your token does not allow this: ask for a token of the operator role.',
    404: 'Nothing is known under this name.',
    400: 'Check what you typed.',
    503: 'The tracker is busy starting, restoring or rebalancing: try again in a few seconds.',
    0: 'Check that the tracker is running, then try again.',
  }[error.status];
  show(
    what,
    h('p', { class: 'notice error', role: 'alert' }, error.message),
    advice ? h('p', {}, advice) : null,
    error.status === 503 || error.status === 0 || !error.status
      ? h('button', { type: 'button', onclick: () => location.reload() }, 'Try again')
      : null,
  );
}

// ---- search ----

const looksLikePhone = (q) => /^\+?[\d\s().-]{5,30}$/.test(q) && (q.match(/\d/g) ?? []).length >= 5;
const phoneOf = (q) => q.replace(/[^\d+]/g, '');

/** A page of messages (GET /messages with `query`), older than the `before` cursor when given. */
const messagesPage = (query, before) =>
  api(`/messages?${new URLSearchParams({ ...query, limit: String(PAGE), ...(before ? { before } : {}) })}`);

async function search(q, business, before) {
  // A number with or without its leading + is one customer: the tracker finds either form.
  if (looksLikePhone(q)) return conversation({ customer: phoneOf(q) }, { q, business }, before);
  for (const kind of ['messages', 'requests']) {
    try {
      const state = await api(`/${kind}/${encodeURIComponent(q)}`);
      // A request that created no message answers its rejected or expired outcome.
      if (kind === 'requests' && state.outcome) return renderOutcome(state);
      return renderMessage(state, kind === 'requests' ? `found by request id ${q}` : undefined);
    } catch (error) {
      if (error.status !== 404) throw error;
    }
  }
  show(
    'Nothing found',
    h('p', {}, 'No message id, request id or phone number matches ', h('strong', {}, q), '.'),
    h(
      'ul',
      {},
      h(
        'li',
        {},
        'A phone number is found with or without its leading + (+15550002222 and 15550002222 are one customer).',
      ),
      h('li', {}, 'A request id is the requestId the producing system put in its send request.'),
      h(
        'li',
        {},
        'The tracker keeps messages and rejected or expired requests updated in the last tracker.stateRetentionMs (30 days by default); a request still being sent is not known yet.',
      ),
    ),
  );
}

async function businessMessages(business, before) {
  const page = await messagesPage({ business }, before);
  return renderList(`Messages of business ${business}`, page, { business }, 'business');
}

async function recipientOf(id, business, before) {
  return conversation({ recipientOf: id }, { recipientOf: id, business }, before);
}

// ---- a customer: the conversation ----

/**
 * A customer's conversation (GET /thread): what they wrote and what was sent to them with its state, newest first,
 * paged.
 */
async function conversation(query, address, before) {
  const page = await api(
    `/thread?${new URLSearchParams({ ...query, limit: String(PAGE), ...(before ? { before } : {}) })}`,
  );
  return renderThread(page, address);
}

/** What the customer wrote: the text, a button reply and its payload, what came besides. */
function inboundContent(m) {
  return [
    m.button ? [h('span', { class: 'badge button-reply' }, 'Button reply'), ' '] : null,
    m.text !== null
      ? h('span', { class: 'message-text' }, m.text)
      : h('span', { class: 'muted' }, m.attachments.length ? '' : '(no text)'),
    m.attachments.length ? h('span', { class: 'muted' }, ` (${m.attachments.join(', ')})`) : null,
    m.button?.payload ? h('span', { class: 'muted payload' }, ' payload ', h('code', {}, m.button.payload)) : null,
  ];
}

/** What was sent: the text, or the template's name; "not recorded" for a message sent before the content was kept. */
function outboundContent(state) {
  const content = state.send?.content;
  const text = content?.text ?? (content?.templateName ? `Template ${content.templateName}` : undefined);
  return [
    text !== undefined
      ? h('span', { class: 'message-text' }, text)
      : h('span', { class: 'muted' }, state.requestId ? '(content not recorded)' : '(not sent by msgbridge)'),
    h('br', {}),
    link(consoleUrl({ message: state.messageId }), state.messageId, { class: 'id small-id' }),
  ];
}

function renderThread(page, address) {
  const business = address.business;
  const customer = page.customer ?? 'this customer';
  const title = `Conversation with ${customer}`;
  const businessOf = (item) => (item.direction === 'inbound' ? item.inbound.businessId : item.message.businessId);
  const items = business ? page.items.filter((item) => businessOf(item) === business) : page.items;
  const rows = items.map((item) =>
    item.direction === 'inbound'
      ? h(
          'tr',
          { class: 'inbound' },
          h('td', {}, time(item.at)),
          h('td', {}, inboundContent(item.inbound)),
          h(
            'td',
            {},
            h('strong', {}, 'Customer'),
            item.inbound.name ? ` ${item.inbound.name}` : null,
            h('br', {}),
            h('span', { class: 'muted id' }, item.inbound.from),
          ),
          h('td', {}, h('span', { class: 'muted' }, 'received')),
        )
      : h(
          'tr',
          { class: 'outbound' },
          h('td', {}, time(item.at)),
          h('td', {}, outboundContent(item.message)),
          h('td', {}, h('strong', {}, 'Sent'), h('br', {}), businessLink(item.message.businessId)),
          h('td', {}, statusCell(item.message)),
        ),
  );
  const note = business
    ? h(
        'p',
        { class: 'muted' },
        `${items.length} of the ${page.items.length} entries of this page are of business ${business}.`,
      )
    : null;
  const older = page.next
    ? h('p', {}, link(consoleUrl({ ...address, before: page.next }), 'Older →', { class: 'button' }))
    : null;
  const newest = params.get('before')
    ? h('p', {}, link(consoleUrl({ ...address, before: undefined }), '← Newest'))
    : null;
  const requests = requestsBlock(page.requests ?? [], business);
  const explain = h(
    'p',
    { class: 'muted' },
    'What the customer wrote and what was sent to them, newest first. A message opens with its timeline; the customer is one customer with or without the + of their number.',
  );
  if (rows.length === 0) {
    return show(
      title,
      note,
      h(
        'p',
        { class: 'notice' },
        page.items.length > 0
          ? 'None on this page: look at older entries.'
          : 'Nothing from or to this number is known to the tracker.',
      ),
      older,
      newest,
      requests,
    );
  }
  show(
    title,
    explain,
    note,
    h('div', { class: 'scroll' }, dataTable(`${title}, newest first`, ['When', 'Message', 'From', 'Status'], rows)),
    older,
    newest,
    requests,
  );
}

function renderList(title, page, query, kind) {
  // A customer's list narrowed to one business (the business's own list needs no narrowing).
  const business = kind === 'recipient' ? query.business : undefined;
  const rows = business ? page.messages.filter((m) => m.businessId === business) : page.messages;
  const table = dataTable(
    `${title}, newest first`,
    ['Last update', 'Status', 'Message', 'Request', 'Business', 'Type'],
    rows.map((m) =>
      h(
        'tr',
        {},
        h('td', {}, time(m.updatedAt)),
        h('td', {}, statusCell(m)),
        h('td', { class: 'id' }, link(consoleUrl({ message: m.messageId }), m.messageId)),
        h(
          'td',
          { class: 'id' },
          m.requestId
            ? link(consoleUrl({ q: m.requestId }), m.requestId)
            : h('span', { class: 'muted' }, 'not sent by msgbridge'),
        ),
        h('td', {}, businessLink(m.businessId)),
        h('td', {}, m.type ?? '—'),
      ),
    ),
  );
  const note = business
    ? h(
        'p',
        { class: 'muted' },
        `${rows.length} of the ${page.messages.length} messages of this page are of business ${business}.`,
      )
    : null;
  const requests = kind === 'recipient' ? requestsBlock(page.requests ?? [], business) : null;
  const older = page.next
    ? h('p', {}, link(consoleUrl({ ...query, before: page.next }), 'Older messages →', { class: 'button' }))
    : null;
  const newest = params.get('before')
    ? h('p', {}, link(consoleUrl({ ...query, before: undefined }), '← Newest'))
    : null;
  if (rows.length === 0) {
    return show(
      title,
      note,
      h(
        'p',
        { class: 'notice' },
        page.messages.length > 0
          ? 'None on this page: look at older messages.'
          : kind === 'business'
            ? 'No message of this business is known to the tracker (it keeps messages updated in the last tracker.stateRetentionMs). Check the business id: it is the one of the send requests.'
            : 'No message to this number is known to the tracker.',
      ),
      older,
      newest,
      requests,
    );
  }
  show(title, note, h('div', { class: 'scroll' }, table), older, newest, requests);
}

/** A customer's requests that never became a message (rejected or expired), on the first page of their messages. */
function requestsBlock(requests, business) {
  const rows = business ? requests.filter((r) => r.businessId === business) : requests;
  if (rows.length === 0) return null;
  const reason = (r) =>
    r.outcome === 'rejected' ? (r.error?.code ?? 'rejected') : `past ${r.expiredBy ?? 'its expiry'}`;
  return h(
    'section',
    { 'aria-labelledby': 'requests-title', class: 'requests' },
    h('h2', { id: 'requests-title' }, 'Requests that did not become a message'),
    h(
      'p',
      { class: 'muted' },
      'Rejected or expired before the provider created a message, newest first. Open one for its error and content.',
    ),
    h(
      'div',
      { class: 'scroll' },
      dataTable(
        'Rejected or expired requests to this customer, newest first',
        ['When', 'Outcome', 'Request', 'Business', 'Why'],
        rows.map((r) =>
          h(
            'tr',
            {},
            h('td', {}, time(r.at)),
            h('td', {}, h('span', { class: `badge outcome-${r.outcome}` }, r.outcome)),
            h('td', { class: 'id' }, link(consoleUrl({ q: r.requestId }), r.requestId)),
            h('td', {}, businessLink(r.businessId)),
            h('td', { class: 'id' }, reason(r)),
          ),
        ),
      ),
    ),
  );
}

// ---- a message ----

async function message(id, foundBy) {
  const state = await api(`/messages/${encodeURIComponent(id)}`);
  return renderMessage(state, foundBy);
}

/**
 * The steps in the order they happened. The provider's statuses carry whole seconds and the
 * accepted time milliseconds, so times are compared by the second, and a tie keeps the
 * lifecycle's order (a "sent" in the same second as "accepted" comes after it).
 */
function timeline(state) {
  const meaningOf = (status, meaning) =>
    status === 'accepted' && isSms(state)
      ? 'the provider handed it to the SMS network (SMS has no delivery receipts: nothing more will come)'
      : meaning;
  const steps = STEPS.map(([field, status, meaning], rank) => ({
    field,
    status,
    meaning: meaningOf(status, meaning),
    rank,
    at: state[field],
    ms: Date.parse(state[field]),
  })).filter((s) => s.at);
  steps.sort((a, b) => Math.floor(a.ms / 1000) - Math.floor(b.ms / 1000) || a.rank - b.rank);
  const failedMs = state.failedAt ? Date.parse(state.failedAt) : undefined;
  let previous;
  const items = steps.map((step) => {
    const late =
      failedMs !== undefined && (step.status === 'delivered' || step.status === 'read') && step.ms > failedMs;
    const delta = previous ? step.ms - previous.ms : undefined;
    const item = h(
      'li',
      { class: `step status-${step.status}${late ? ' late' : ''}` },
      h('span', { class: 'step-name' }, step.status === 'delivery_failed' ? 'failed' : step.status),
      ' ',
      time(step.at),
      delta !== undefined
        ? h(
            'span',
            {
              class: 'delta',
              title: `time since ${previous.status === 'delivery_failed' ? 'failed' : previous.status}`,
            },
            ` ${Math.abs(delta) < 1000 ? '<1 s' : duration(delta)}`,
          )
        : null,
      h('span', { class: 'meaning' }, step.meaning),
      late
        ? h(
            'span',
            { class: 'late-note' },
            'Late event: reported after the failure. Recorded, not applied: the message stays failed.',
          )
        : null,
    );
    previous = step;
    return item;
  });
  return h('ol', { class: 'timeline', 'aria-label': 'Status timeline, oldest first' }, items);
}

/**
 * An error object: the provider's (with its trace id), or msgbridge's own (`RELAY_*` codes: refused without a call, or
 * a dead letter).
 */
function errorBlock(error) {
  if (!error) return null;
  const own = typeof error.code === 'string' && error.code.startsWith('RELAY_');
  const rows = [
    ['Code', error.code],
    ['HTTP status', error.httpStatus],
    ['Type', error.type],
    ['Message', error.message],
    ['For the user', [error.userTitle, error.userMessage].filter(Boolean).join(': ')],
    ['Details', error.details && Object.keys(error.details).length > 0 ? JSON.stringify(error.details) : undefined],
  ].filter(([, v]) => v !== undefined && v !== null && v !== '');
  return h(
    'section',
    { class: 'card error-card', 'aria-labelledby': 'error-title' },
    h('h2', { id: 'error-title' }, own ? 'Why msgbridge did not send it' : 'Error from the provider'),
    h(
      'dl',
      {},
      rows.map(([k, v]) => [h('dt', {}, k), h('dd', {}, String(v))]),
    ),
    error.cntTraceId
      ? h(
          'p',
          { class: 'trace' },
          'Quote this trace id to the provider: ',
          h('code', { id: 'trace-id' }, error.cntTraceId),
          ' ',
          copyButton(error.cntTraceId, 'Copy the trace id'),
        )
      : h(
          'p',
          { class: 'muted' },
          own ? 'msgbridge decided this itself: there is no provider trace id.' : 'The provider gave no trace id.',
        ),
  );
}

async function windowBlock(state) {
  const section = h(
    'section',
    { class: 'card', 'aria-labelledby': 'window-title' },
    h('h2', { id: 'window-title' }, 'Conversation window'),
  );
  if (isSms(state)) {
    section.append(
      h(
        'p',
        {},
        "An SMS has no 24-hour window: that rule is WhatsApp's. A text by SMS can be sent whenever the customer last wrote.",
      ),
    );
    return section;
  }
  try {
    const w = await api(`/messages/${encodeURIComponent(state.messageId)}/conversation`);
    const open = Date.parse(w.windowOpenUntil) > Date.now();
    section.append(
      h(
        'p',
        {},
        open
          ? h('span', { class: 'badge status-read' }, 'open')
          : h('span', { class: 'badge status-neutral' }, 'closed'),
        ' ',
        open ? 'Free-form text can be sent until ' : 'Closed since ',
        time(w.windowOpenUntil),
        '.',
      ),
      h(
        'p',
        { class: 'muted' },
        'The customer last wrote ',
        time(w.lastInboundAt),
        '. Outside the window only templates can be sent.',
      ),
    );
  } catch (error) {
    if (error.status === 404)
      section.append(
        h(
          'p',
          {},
          h('span', { class: 'badge status-neutral' }, 'closed'),
          ' No message from this customer is known: only templates can be sent.',
        ),
      );
    else section.append(h('p', { class: 'notice error' }, `The window could not be read: ${error.message}`));
  }
  return section;
}

/** How the relay sent it: attempts, and whether an earlier attempt may have created another message. */
function sendText(send) {
  const attempts = `${send.attempts} attempt${send.attempts === 1 ? '' : 's'}`;
  return send.maybeSent
    ? `${attempts}; an earlier attempt got no answer and may have created another message (maybeSent): the customer may have received it twice`
    : attempts;
}

/** A template's name and parameters as a list. */
function templateRows(name, parameters) {
  return [
    h('dt', {}, 'Template'),
    h('dd', { class: 'id' }, name),
    h('dt', {}, 'Parameters'),
    h(
      'dd',
      {},
      parameters.length === 0
        ? h('span', { class: 'muted' }, 'none')
        : h(
            'ul',
            { class: 'parameters' },
            parameters.map((p) =>
              h(
                'li',
                {},
                h('span', { class: 'param-name' }, p.name),
                ': ',
                h('span', { class: 'param-value' }, p.value),
              ),
            ),
          ),
    ),
  ];
}

/**
 * What the request asked to send, as the send result recorded it (bounded by the sender: a cut
 * text ends with "…"); absent when a release before 0.2.0 sent it or the request could not be read.
 */
function requestBlock(content, requestedType) {
  const section = h(
    'section',
    { class: 'card', 'aria-labelledby': 'request-title' },
    h('h2', { id: 'request-title' }, 'Request'),
  );
  if (!content) {
    section.append(
      h(
        'p',
        { class: 'muted', id: 'request-content' },
        "The request's content was not recorded: it was sent by a release before 0.2.0, or it could not be read.",
      ),
    );
    return section;
  }
  const rows = [h('dt', {}, 'Type'), h('dd', {}, requestedType ?? (content.text !== undefined ? 'text' : 'template'))];
  if (content.text !== undefined) {
    const blank =
      content.text.trim() === ''
        ? h(
            'span',
            { class: 'muted' },
            ` (${content.text.length} blank character${content.text.length === 1 ? '' : 's'}, nothing else)`,
          )
        : null;
    rows.push(h('dt', {}, 'Text'), h('dd', {}, h('p', { class: 'request-text' }, content.text), blank));
  }
  if (content.templateName !== undefined) rows.push(...templateRows(content.templateName, content.parameters ?? []));
  if (content.fallbackTemplate)
    rows.push(
      h('dt', {}, 'Fallback'),
      h('dd', {}, 'if the conversation window is closed, this template instead:'),
      ...templateRows(content.fallbackTemplate.templateName, content.fallbackTemplate.parameters ?? []),
    );
  // append() would write null as text: only what is there.
  const truncated = content.truncated
    ? h(
        'p',
        { class: 'muted' },
        'Cut to the limits a send result keeps (text 1,000 characters, 20 parameters of 256): the producing system has the whole request.',
      )
    : undefined;
  section.append(...[h('dl', { class: 'summary', id: 'request-content' }, rows), truncated].filter(Boolean));
  return section;
}

async function renderMessage(state, foundBy) {
  const summary = h(
    'dl',
    { class: 'summary' },
    h('dt', {}, 'Status'),
    h('dd', {}, statusCell(state)),
    h('dt', {}, 'Business'),
    h('dd', {}, businessLink(state.businessId)),
    h('dt', {}, 'Recipient'),
    h(
      'dd',
      {},
      state.recipient ?? '—',
      state.recipient
        ? [' · ', link(consoleUrl({ recipientOf: state.messageId }), "this customer's conversation")]
        : null,
    ),
    state.send?.channel
      ? [
          h('dt', {}, 'Channel'),
          h(
            'dd',
            { class: 'channel' },
            state.send.channel === 'sms' ? 'SMS' : state.send.channel === 'whatsapp' ? 'WhatsApp' : state.send.channel,
          ),
        ]
      : null,
    h('dt', {}, 'Type'),
    h(
      'dd',
      {},
      state.type ?? '—',
      state.send && state.type && state.send.requestedType !== state.type
        ? ` (requested as ${state.send.requestedType}: sent as its fallback template, the conversation window was closed)`
        : null,
    ),
    state.send ? h('dt', {}, 'Sent') : null,
    state.send ? h('dd', { class: 'send-summary' }, sendText(state.send)) : null,
    h('dt', {}, 'Request id'),
    h(
      'dd',
      { class: 'id' },
      state.requestId
        ? link(consoleUrl({ q: state.requestId }), state.requestId)
        : 'none: not sent through msgbridge (or its send result was not seen)',
    ),
    h('dt', {}, 'Message id'),
    h('dd', { class: 'id' }, state.messageId, ' ', copyButton(state.messageId, 'Copy the message id')),
    h('dt', {}, 'Events'),
    h('dd', {}, String(state.events), ' applied · last update ', time(state.updatedAt)),
  );
  const win = await windowBlock(state);
  show(
    `Message ${state.status === 'delivery_failed' ? 'failed' : state.status}`,
    foundBy ? h('p', { class: 'muted' }, foundBy) : null,
    h(
      'section',
      { class: 'card', 'aria-labelledby': 'summary-title' },
      h('h2', { id: 'summary-title', class: 'visually-hidden' }, 'Summary'),
      summary,
    ),
    isSms(state) && state.status === 'accepted' ? h('p', { class: 'notice sms-meaning' }, SMS_MEANING) : null,
    errorBlock(state.error),
    h(
      'section',
      { class: 'card', 'aria-labelledby': 'timeline-title' },
      h('h2', { id: 'timeline-title' }, 'Timeline'),
      timeline(state),
    ),
    state.send ? requestBlock(state.send.content, state.send.requestedType) : null,
    win,
    h(
      'p',
      { class: 'muted' },
      'Not shown: events the tracker refused (a duplicate, a lower status with nothing new): they change nothing and are only counted.',
    ),
  );
}

// ---- a request that created no message ----

/** A rejected or expired request (GET /requests/{id} answers its outcome when it has no message). */
function renderOutcome(o) {
  const rejected = o.outcome === 'rejected';
  const summary = h(
    'dl',
    { class: 'summary' },
    h('dt', {}, 'Outcome'),
    h('dd', {}, h('span', { class: `badge outcome-${o.outcome}` }, o.outcome), ' ', time(o.at)),
    h('dt', {}, 'Business'),
    h('dd', {}, o.businessId ?? '—'),
    h('dt', {}, 'Recipient'),
    h('dd', {}, o.recipient ?? '—'),
    h('dt', {}, 'Type'),
    h('dd', {}, o.type ?? '—'),
    h('dt', {}, 'Attempts'),
    h(
      'dd',
      { class: 'send-summary' },
      o.attempts === 0 ? '0: the provider was not called' : `${o.attempts} attempt${o.attempts === 1 ? '' : 's'}`,
    ),
    h('dt', {}, 'Maybe sent'),
    h(
      'dd',
      { class: 'maybe-sent' },
      o.maybeSent
        ? 'yes: an attempt got no answer and may have created a message'
        : 'no: no attempt can have created a message',
    ),
    rejected
      ? null
      : [h('dt', {}, 'Expired'), h('dd', {}, 'at ', time(o.expiresAt), o.expiredBy ? ` (set by ${o.expiredBy})` : '')],
    h('dt', {}, 'Request id'),
    h('dd', { class: 'id' }, o.requestId, ' ', copyButton(o.requestId, 'Copy the request id')),
  );
  const deadLetter =
    rejected &&
    o.attempts === 0 &&
    o.error?.code?.startsWith('RELAY_') &&
    o.error.code !== 'RELAY_OUTSIDE_CONVERSATION_WINDOW';
  show(
    `Request ${o.outcome}`,
    h(
      'p',
      { class: o.maybeSent ? 'notice warn' : 'muted' },
      o.maybeSent
        ? 'No message was confirmed, but an attempt got no answer and may have created one (maybeSent): do not resend blindly; ask the provider with the recipient and the time.'
        : rejected
          ? 'No message was created: the request was rejected for good or for now. Resubmitting the same request id sends it again when the reason was temporary.'
          : 'No message was created: the request was past its time to live before it could be sent.',
    ),
    h(
      'section',
      { class: 'card', 'aria-labelledby': 'summary-title' },
      h('h2', { id: 'summary-title', class: 'visually-hidden' }, 'Summary'),
      summary,
    ),
    errorBlock(o.error),
    deadLetter
      ? h('p', {}, 'The request itself is on the dead-letter page: ', link('/console/?dlq=', 'Dead letters'), '.')
      : null,
    requestBlock(o.content, o.type),
  );
}

// ---- dead letters ----

async function dlqPage(topic) {
  const info = await api('/dlq');
  if (!info.available) return show('Dead letters', h('p', { class: 'notice' }, info.message));
  if (!topic) topic = info.topics[0];
  const tabs = h(
    'nav',
    { 'aria-label': 'Dead-letter topics', class: 'tabs' },
    h(
      'ul',
      {},
      info.topics.map((t) =>
        h('li', {}, link(consoleUrl({ dlq: t }), t, t === topic ? { 'aria-current': 'page' } : {})),
      ),
    ),
  );
  const filter = {
    code: params.get('code') ?? '',
    business: params.get('business') ?? '',
    since: params.get('since') ?? '',
    until: params.get('until') ?? '',
  };
  const page = await api(
    `/dlq/${encodeURIComponent(topic)}/records?${new URLSearchParams(Object.entries({ ...filter, max: '50', from: params.get('from') ?? '' }).filter(([, v]) => v !== ''))}`,
  );
  // The counts read the whole topic (a large one takes a while): the records show first.
  const counts = h('div', { 'aria-live': 'polite' }, h('p', { class: 'notice' }, `Counting the records of ${topic}…`));
  const form = filterForm(topic, filter);
  show(`Dead letters: ${topic}`, tabs, counts, form, recordsBlock(topic, filter, page), redriveBlock(topic, filter));
  api(`/dlq/${encodeURIComponent(topic)}/stats`).then(
    (stats) => {
      fill(counts, statsBlock(topic, stats));
      fill(
        form.querySelector('#codes'),
        Object.keys(stats.byCode).map((v) => h('option', { value: v })),
      );
      fill(
        form.querySelector('#businesses'),
        Object.keys(stats.byBusiness)
          .filter((b) => b !== '(none)')
          .map((v) => h('option', { value: v })),
      );
    },
    (error) =>
      fill(
        counts,
        h('p', { class: 'notice error' }, `The counts could not be read: ${error.message}. Reload to try again.`),
      ),
  );
}

function countTable(caption, entries, onePerRow) {
  return h(
    'table',
    { class: 'counts' },
    h('caption', {}, caption),
    h(
      'thead',
      {},
      h(
        'tr',
        {},
        h('th', { scope: 'col' }, onePerRow[0]),
        h('th', { scope: 'col', class: 'num' }, 'Records'),
        onePerRow[1] ? h('th', { scope: 'col' }, onePerRow[1]) : null,
      ),
    ),
    h(
      'tbody',
      {},
      entries.map(([name, count, extra]) =>
        h(
          'tr',
          {},
          h('th', { scope: 'row' }, name),
          h('td', { class: 'num' }, count.toLocaleString()),
          extra !== undefined ? h('td', {}, extra) : null,
        ),
      ),
    ),
  );
}

function statsBlock(topic, stats) {
  if (stats.records === 0)
    return h('p', { class: 'notice' }, `Nothing is dead-lettered on ${topic} (or retention removed it).`);
  const byCode = Object.entries(stats.byCode).map(([code, g]) => [
    code,
    g.count,
    Object.entries(g.businesses)
      .slice(0, 5)
      .map(([b, n]) => `${b} ${n}`)
      .join(', '),
  ]);
  const byBusiness = Object.entries(stats.byBusiness).map(([b, n]) => [b, n]);
  return h(
    'section',
    { class: 'card', 'aria-labelledby': 'stats-title' },
    h('h2', { id: 'stats-title' }, 'Counts'),
    h(
      'p',
      {},
      `${stats.records.toLocaleString()} record${stats.records === 1 ? '' : 's'} in ${stats.partitions} partition${stats.partitions === 1 ? '' : 's'}, oldest `,
      time(stats.oldest),
      ', newest ',
      time(stats.newest),
      '.',
    ),
    h(
      'div',
      { class: 'two' },
      countTable('By code', byCode, ['Code', 'Businesses']),
      countTable('By business', byBusiness, ['Business']),
    ),
    stats.redrives.length
      ? h(
          'p',
          { class: 'muted' },
          `Already redriven (produced again once, skipped by every redrive): ${stats.redriven.toLocaleString()}. Redrives: ${stats.redrives.map((r) => `${r.name} (${r.passed} passed)`).join(', ')}.`,
        )
      : h('p', { class: 'muted' }, 'No redrive yet.'),
  );
}

function filterForm(topic, filter) {
  const field = (name, label, attrs) =>
    h(
      'div',
      { class: 'field' },
      h('label', { for: `f-${name}` }, label),
      h('input', {
        id: `f-${name}`,
        name,
        type: 'text',
        value: filter[name],
        autocomplete: 'off',
        spellcheck: 'false',
        ...attrs,
      }),
    );
  const iso = {
    placeholder: '2026-11-20T10:00:00Z',
    pattern: '\\d{4}-\\d{2}-\\d{2}.*',
    title: 'an ISO time, e.g. 2026-11-20T10:00:00Z',
  };
  return h(
    'form',
    { class: 'card filters', method: 'get', action: '/console/', 'aria-label': 'Select dead letters' },
    h('input', { type: 'hidden', name: 'dlq', value: topic }),
    field('code', 'Code', { list: 'codes', placeholder: 'any' }),
    h('datalist', { id: 'codes' }),
    field('business', 'Business', { list: 'businesses', placeholder: 'any' }),
    h('datalist', { id: 'businesses' }),
    field('since', 'Since (ISO time)', iso),
    field('until', 'Until (ISO time)', iso),
    h('div', { class: 'field' }, h('button', { type: 'submit' }, 'Select')),
  );
}

function recordsBlock(topic, filter, page) {
  if (page.records.length === 0) return h('p', { class: 'notice' }, 'No record matches this selection.');
  const value = (r) =>
    r.value ?? (r.valueBase64 !== undefined ? `(binary, ${r.valueBase64.length} base64 characters)` : '(empty)');
  const rows = page.records.map((r) =>
    h(
      'tr',
      {},
      h('td', {}, time(r.timestamp)),
      h('td', { class: 'id' }, `${r.partition}/${r.offset}`),
      h('td', {}, r.business ?? '—'),
      h('td', {}, h('code', {}, r.code)),
      h(
        'td',
        { class: 'reason' },
        r.reason,
        h(
          'details',
          {},
          h('summary', {}, 'Record'),
          h('pre', {}, value(r)),
          h('pre', {}, JSON.stringify(r.headers, null, 2)),
        ),
      ),
    ),
  );
  return h(
    'section',
    { class: 'card', 'aria-labelledby': 'records-title' },
    h('h2', { id: 'records-title' }, 'Records'),
    h(
      'div',
      { class: 'scroll' },
      dataTable(undefined, ['Written', 'Partition/offset', 'Business', 'Code', 'Reason'], rows),
    ),
    page.next
      ? h('p', {}, link(consoleUrl({ dlq: topic, ...filter, from: page.next }), 'Next records →', { class: 'button' }))
      : h('p', { class: 'muted' }, 'End of the topic.'),
  );
}

function planText(plan) {
  const produced = Object.entries(plan.produced);
  const failing = Object.entries(plan.failing);
  return [
    h(
      'p',
      {},
      `${plan.dryRun ? 'Would produce' : 'Produced'} ${produced.reduce((n, [, c]) => n + c, 0).toLocaleString()} of ${plan.selected.toLocaleString()} selected records${produced.length ? `: ${produced.map(([t, n]) => `${n} → ${t}`).join(', ')}` : ''}.`,
    ),
    h(
      'p',
      {},
      `${plan.dryRun ? 'Would fail again' : 'Still failing'}: ${failing.reduce((n, [, c]) => n + c, 0).toLocaleString()}${failing.length ? ` (${failing.map(([c, n]) => `${c} ${n}`).join(', ')})` : ''}.`,
    ),
    plan.failures.length
      ? h('details', {}, h('summary', {}, 'Records that would fail again'), h('pre', {}, plan.failures.join('\n')))
      : null,
    plan.redriven
      ? h(
          'p',
          {},
          `Already redriven, skipped: ${plan.redriven.toLocaleString()} (each dead letter goes back once, whatever the selection).`,
        )
      : null,
    h(
      'p',
      { class: 'muted' },
      `Redrive name ${plan.name}${plan.resuming ? ' (resumes where it stopped)' : ''}: msgbridge dlq redrive with the same selection continues it.`,
    ),
  ];
}

function redriveBlock(topic, filter) {
  const section = h(
    'section',
    { class: 'card', 'aria-labelledby': 'redrive-title' },
    h('h2', { id: 'redrive-title' }, 'Redrive this selection'),
  );
  if (me?.role !== 'operator') {
    section.append(
      h(
        'p',
        { class: 'muted' },
        'A redrive needs a token of the operator role. You can read the records; ask an operator to redrive them.',
      ),
    );
    return section;
  }
  const out = h('div', { 'aria-live': 'polite' });
  const run = async (dryRun, button) => {
    button.disabled = true;
    fill(
      out,
      h('p', { class: 'notice' }, dryRun ? 'Checking each selected record as its role would now…' : 'Redriving…'),
    );
    try {
      const plan = await api(`/dlq/${encodeURIComponent(topic)}/redrive`, { method: 'POST', body: { filter, dryRun } });
      const produce = Object.values(plan.produced).reduce((n, c) => n + c, 0);
      const confirm =
        dryRun && produce > 0
          ? h(
              'button',
              { type: 'button', class: 'danger', onclick: (e) => run(false, e.target) },
              `Redrive ${produce.toLocaleString()} record${produce === 1 ? '' : 's'} to ${Object.keys(plan.produced).join(', ')}`,
            )
          : null;
      fill(
        out,
        h(
          'h3',
          {},
          dryRun
            ? 'Dry run: nothing written'
            : plan.stopped
              ? `Stopped (${plan.stopped}): what was committed stays`
              : 'Done',
        ),
        ...planText(plan),
        dryRun && produce === 0 ? h('p', {}, 'Nothing to produce.') : null,
        confirm,
      );
      (confirm ?? out).focus?.();
    } catch (error) {
      fill(
        out,
        h(
          'p',
          { class: 'notice error', role: 'alert' },
          error.status === 403 ? 'Your token does not allow a redrive (operator role needed).' : error.message,
        ),
      );
    } finally {
      button.disabled = false;
    }
  };
  section.append(
    h(
      'p',
      {},
      'Each selected record is checked again as the ingress or the sender would check it now; those that pass go back to their original topic, exactly once. A dry run comes first.',
    ),
    h('button', { type: 'button', onclick: (e) => run(true, e.target) }, 'Dry run'),
    out,
  );
  return section;
}

// ---- start ----

async function whoAmI() {
  me = await api('/me');
  document.getElementById('who-name').textContent =
    `${me.name} · ${me.role === 'operator' ? 'operator' : 'read only'}${me.masked ? ' · numbers masked' : ''}`;
  document.getElementById('who').hidden = false;
}

async function route() {
  const q = params.get('q')?.trim();
  const business = params.get('business')?.trim() || undefined;
  document.getElementById('q').value = q ?? '';
  document.getElementById('business').value = business ?? '';
  const section = params.has('dlq') ? 'dlq' : 'search';
  for (const a of document.querySelectorAll('[data-section]')) {
    if (a.dataset.section === section) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  document.getElementById('search').hidden = section === 'dlq';
  const what = section === 'dlq' ? 'Dead letters' : 'Search';
  try {
    await whoAmI();
    if (params.has('dlq')) return await dlqPage(params.get('dlq'));
    if (params.get('message')) return await message(params.get('message'));
    if (params.get('recipientOf'))
      return await recipientOf(params.get('recipientOf'), business, params.get('before') ?? undefined);
    if (q) return await search(q, business, params.get('before') ?? undefined);
    if (business) return await businessMessages(business, params.get('before') ?? undefined);
    show(
      'Find a message',
      h(
        'p',
        {},
        "Type a message id, the request id your system sent, or the phone number of the customer, then Search. A business id alone lists that business's messages.",
      ),
      h(
        'ul',
        { class: 'muted' },
        h('li', {}, 'Every page has its own address: copy it to share what you see.'),
        h('li', {}, 'Times are in your time zone; hover one for UTC.'),
      ),
    );
    document.getElementById('q').focus();
  } catch (error) {
    failure(error, what);
  }
}

document.getElementById('sign-out').addEventListener('click', () => {
  sessionStorage.removeItem(TOKEN_KEY);
  location.reload();
});
takeTokenFromFragment();
route();
