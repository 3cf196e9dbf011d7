import { errorMessage, MsgbridgeError } from '../platform/errors.js';
import { messageStateOf, type MessageState, type TrackedMessage } from '../contracts/message-state.js';
import { conversationKey, type ConversationWindow } from '../contracts/conversation-window.js';
import type { RequestOutcome } from '../contracts/request-outcome.js';
import { canonicalCustomerId } from '../contracts/customer-id.js';
import type { InboundMessageRecord } from '../contracts/inbound-message.js';
import { inboundSortKey } from './inbound-store.js';
import { FORWARDED_HEADER, forwardQuery, type ForwardAnswer } from './query-forwarding.js';
import { type GroupDirectory } from '../kafka/group-directory.js';
import { newestOutcomesFirst, type MessageList, type TrackerLogic } from './tracker-logic.js';

/**
 * The tracker's queries (README "Queries"), answered from the local stores in constant time:
 * a message id names its task, and the member that owns the task answers (another member
 * forwards to it); a request id or a recipient is looked up in every member's indexes at once.
 * No query reads a topic. A forwarded query carries the caller's credential (`credentials`):
 * every member checks it again, and the forwarded mark only stops a second forward.
 */
const MAX_ID_LENGTH = 512;
const MAX_PAGE = 100;

type Answer = { status: number; body: unknown };
/** The caller's credential headers, passed along to the member a query is forwarded to. */
type Credentials = Record<string, string>;

const notFound = (what: string, id: string): Answer => ({
  status: 404,
  body: { error: 'NOT_FOUND', message: `no state for ${what} ${id}` },
});
const badRequest = (message: string): Answer => ({ status: 400, body: { error: 'INVALID_ARGUMENT', message } });
const unavailable = (message: string): Answer => ({ status: 503, body: { error: 'UNAVAILABLE', message } });

interface Engine {
  ownedTasks(): number[];
}

/** A page of a recipient's or a business's messages, newest first; `next` is the cursor of the following page. */
export type MessagePage = ({ recipient: string } | { business: string }) & {
  messages: MessageState[];
  next: string | null;
  /** On a recipient's first page: its rejected or expired requests, newest first (at most the page size). */
  requests?: RequestOutcome[];
};

interface Sorted {
  sort: string;
  state: MessageState;
}

/** A page of a customer's inbound messages, newest first (`GET /inbound?customer=`). */
export interface InboundPage {
  customer: string;
  messages: InboundMessageRecord[];
  next: string | null;
}

/** One entry of a customer's conversation: what they wrote, or what was sent to them (its current state). */
export type ThreadItem =
  | { direction: 'inbound'; at: string; inbound: InboundMessageRecord }
  | { direction: 'outbound'; at: string; message: MessageState };

/**
 * A page of a customer's conversation, newest first (`GET /thread?customer=`); `requests` on the first page, as for a
 * recipient's messages.
 */
export interface ThreadPage {
  customer: string | null;
  items: ThreadItem[];
  next: string | null;
  requests?: RequestOutcome[];
}

export class QueryService {
  private engine: Engine | undefined;
  private directory: GroupDirectory | undefined;
  private selfUrl: string | undefined;
  private connect: Promise<void> | undefined;

  constructor(
    private readonly logic: TrackerLogic,
    private readonly timeoutMs: number,
  ) {}

  /** Called once the engine runs: until then every query answers 503. */
  attach(engine: Engine, directory: GroupDirectory, selfUrl: string | undefined, connect: () => Promise<void>): void {
    this.engine = engine;
    this.directory = directory;
    this.selfUrl = selfUrl;
    this.connect = connect().catch(() => undefined);
  }

  async route(
    path: string,
    query: URLSearchParams,
    headers: Record<string, string | string[] | undefined>,
    credentials: Credentials = {},
  ): Promise<Answer | undefined> {
    const forwarded = headers[FORWARDED_HEADER] !== undefined;
    if (path === '/inbound') {
      const customer = customerParam(query, 'customer');
      if (customer === null) return badRequest("a customer's inbound messages: ?customer=<phone number or id>");
      return this.validId(customer) ?? this.inboundAnswer(customer, query, forwarded, credentials);
    }
    if (path === '/thread') {
      const of = query.get('recipientOf');
      if (of !== null) return this.validId(of) ?? this.threadOfAnswer(of, query, forwarded, credentials);
      const customer = customerParam(query, 'customer');
      if (customer === null)
        return badRequest("a customer's conversation: ?customer=<phone number or id> (or ?recipientOf=<message id>)");
      return this.validId(customer) ?? this.threadAnswer(customer, query, credentials);
    }
    if (path === '/messages') {
      const of = query.get('recipientOf');
      if (of !== null) return this.validId(of) ?? this.recipientOfAnswer(of, query, forwarded, credentials);
      const recipient = customerParam(query, 'recipient');
      if (recipient !== null) return this.listAnswer('recipient', recipient, query, forwarded, credentials);
      const business = query.get('business');
      if (business !== null) return this.listAnswer('business', business, query, forwarded, credentials);
      return badRequest(
        'search messages with ?recipient=<phone number> or ?business=<business id> (or ?recipientOf=<message id>)',
      );
    }
    const conversation = /^\/conversations\/([^/]+)\/([^/]+)$/.exec(path);
    if (conversation) {
      const [businessId, customer] = [decode(conversation[1]!), decode(conversation[2]!)];
      if (businessId === undefined || customer === undefined)
        return badRequest('the business id or the customer is not valid percent-encoding');
      return (
        this.validId(businessId) ??
        this.validId(customer) ??
        this.conversationAnswer(businessId, customer, forwarded, credentials)
      );
    }
    const match = /^\/(messages|requests)\/([^/]+)(\/conversation)?$/.exec(path);
    if (!match || (match[3] && match[1] !== 'messages')) return undefined;
    const id = decode(match[2]!);
    if (id === undefined) return badRequest('the id is not valid percent-encoding');
    const invalid = this.validId(id);
    if (invalid) return invalid;
    if (match[3]) return this.conversationOfAnswer(id, forwarded, credentials);
    return match[1] === 'messages'
      ? this.messageAnswer(id, forwarded, credentials)
      : this.requestAnswer(id, forwarded, credentials);
  }

  private validId(id: string): Answer | undefined {
    return id.length === 0 || id.length > MAX_ID_LENGTH
      ? badRequest(`an id has 1 to ${MAX_ID_LENGTH} characters`)
      : undefined;
  }

  /**
   * The state of a message, wherever it lives; undefined when unknown. Throws when the owner
   * cannot be asked. Another member checks `credentials` (the headers of a token it knows), as
   * for any forwarded query: without them only this member's own tasks can answer.
   */
  async message(id: string, credentials: Credentials = {}): Promise<MessageState | undefined> {
    return this.unwrap(await this.messageAnswer(id, false, credentials));
  }

  /** The message a request created, else its rejected or expired outcome (README "Queries"); undefined when unknown. */
  async request(id: string, credentials: Credentials = {}): Promise<MessageState | RequestOutcome | undefined> {
    return this.unwrap(await this.requestAnswer(id, false, credentials));
  }

  private unwrap<T = MessageState>(answer: Answer): T | undefined {
    if (answer.status === 200) return answer.body as T;
    if (answer.status === 404) return undefined;
    throw new MsgbridgeError(
      'KAFKA_UNAVAILABLE',
      (answer.body as { message?: string }).message ?? `query failed with ${answer.status}`,
    );
  }

  /**
   * The other messages of a message's recipient: asked of the member that owns the message (it
   * reads the number from its own store), so a caller that sees numbers masked can still follow
   * the link.
   */
  private recipientOfAnswer(
    id: string,
    query: URLSearchParams,
    forwarded: boolean,
    credentials: Credentials,
  ): Promise<Answer> {
    const rest = new URLSearchParams(query);
    rest.set('recipientOf', id);
    return this.atOwner(this.logic.taskOf(id), forwarded, credentials, `/messages?${rest.toString()}`, () => {
      const state = this.logic.message(id);
      if (!state) return notFound('message', id);
      if (state.recipient === null) return { status: 200, body: { recipient: null, messages: [], next: null } };
      return this.listAnswer('recipient', state.recipient, query, false, credentials);
    });
  }

  /** A customer's conversation window (docs/topics.md), from the member that owns the customer's task. */
  private conversationAnswer(
    businessId: string,
    customer: string,
    forwarded: boolean,
    credentials: Credentials,
  ): Promise<Answer> {
    // The customer's task is the partition of its canonical id (either form names it).
    return this.atOwner(
      this.logic.taskOfCustomer(customer),
      forwarded,
      credentials,
      `/conversations/${encodeURIComponent(businessId)}/${encodeURIComponent(customer)}`,
      () => {
        const window = this.logic.conversation(conversationKey(businessId, customer));
        return window
          ? { status: 200, body: window satisfies ConversationWindow }
          : {
              status: 404,
              body: {
                error: 'NOT_FOUND',
                message: `no inbound message from ${customer} to ${businessId} is known: no conversation window is open`,
              },
            };
      },
    );
  }

  /** The conversation window of a message's recipient, asked of the member that owns the message. */
  private conversationOfAnswer(id: string, forwarded: boolean, credentials: Credentials): Promise<Answer> {
    return this.atOwner(
      this.logic.taskOf(id),
      forwarded,
      credentials,
      `/messages/${encodeURIComponent(id)}/conversation`,
      () => {
        const state = this.logic.message(id);
        if (!state) return notFound('message', id);
        if (state.recipient === null)
          return { status: 404, body: { error: 'NOT_FOUND', message: `message ${id} has no known recipient yet` } };
        return this.conversationAnswer(state.businessId, state.recipient, false, credentials);
      },
    );
  }

  private messageAnswer(id: string, forwarded: boolean, credentials: Credentials = {}): Promise<Answer> {
    return this.atOwner(this.logic.taskOf(id), forwarded, credentials, `/messages/${encodeURIComponent(id)}`, () => {
      const state = this.logic.message(id);
      return state ? { status: 200, body: messageStateOf(state) } : notFound('message', id);
    });
  }

  /**
   * The answer of the member that owns `task`: this one (`local`), or the owner asked at `path`
   * with the caller's credential. A forwarded query is never forwarded again.
   */
  private async atOwner(
    task: number,
    forwarded: boolean,
    credentials: Credentials,
    path: string,
    local: () => Answer | Promise<Answer>,
  ): Promise<Answer> {
    if (this.ownsActive(task)) return local();
    if (forwarded) return unavailable(`this member does not run task ${task} (now): ask again`);
    const owner = (await this.owners())?.get(task);
    if (!owner || owner === this.selfUrl)
      return unavailable(`task ${task} is being restored or moved between members: ask again in a few seconds`);
    return this.forward(owner, path, credentials);
  }

  /**
   * A request's message, wherever it lives (the latest updated when a maybeSent resend made
   * two); a request that created none answers its rejected or expired outcome, the latest of
   * those. A message wins over an outcome: a request rejected once and accepted when resubmitted
   * has its message. An outcome is told from a state by its `outcome` field.
   */
  private async requestAnswer(id: string, forwarded: boolean, credentials: Credentials = {}): Promise<Answer> {
    if (!this.engine) return unavailable('the tracker is starting');
    const local = this.logic.request(id);
    if (local) return { status: 200, body: messageStateOf(local) };
    if (!this.logic.indexesComplete())
      return unavailable(
        `this member is still indexing a restored task: request ${id} may be there; ask again in a moment`,
      );
    const localOutcome = this.logic.requestOutcome(id);
    if (forwarded) return localOutcome ? { status: 200, body: localOutcome } : notFound('request', id);
    const answers = await this.fanOut(`/requests/${encodeURIComponent(id)}`, credentials);
    const bodies = answers.filter((a) => a.status === 200).map((a) => a.body as TrackedMessage | RequestOutcome);
    const states = bodies.filter((b): b is TrackedMessage => !('outcome' in b));
    if (states.length > 0)
      return { status: 200, body: states.sort((a, b) => b.updatedAt.localeCompare(a.updatedAt))[0] };
    const failed = answers.filter((a) => a.status !== 404 && a.status !== 200);
    if (failed.length > 0 || !(await this.everyTaskServed()))
      return unavailable(
        `request ${id} is not on the members that answered, and some could not be asked (rebalancing?): ask again`,
      );
    const outcomes = [
      ...(localOutcome ? [localOutcome] : []),
      ...bodies.filter((b): b is RequestOutcome => 'outcome' in b),
    ];
    if (outcomes.length > 0) return { status: 200, body: outcomes.sort((a, b) => b.at.localeCompare(a.at))[0] };
    return notFound('request', id);
  }

  /** A page of a recipient's or a business's messages, merged from every member's tasks. */
  private async listAnswer(
    list: MessageList,
    value: string,
    query: URLSearchParams,
    forwarded: boolean,
    credentials: Credentials = {},
  ): Promise<Answer> {
    const merged = await this.mergedList(list, value, query, forwarded, credentials);
    if ('status' in merged) return merged;
    const body = {
      [list]: value,
      messages: merged.page.map((p) => p.state),
      next: merged.next,
      ...(merged.requests ? { requests: merged.requests } : {}),
    };
    return { status: 200, body: body as MessagePage };
  }

  /**
   * The page of a list merged from every member's tasks, with each entry's sort key; a forwarded
   * query answers this member's part (with the sort keys) for the asking member to merge.
   */
  private async mergedList(
    list: MessageList,
    value: string,
    query: URLSearchParams,
    forwarded: boolean,
    credentials: Credentials,
  ): Promise<Answer | { page: Sorted[]; next: string | null; requests?: RequestOutcome[] }> {
    if (value.length === 0 || value.length > MAX_ID_LENGTH)
      return badRequest(`a ${list} has 1 to ${MAX_ID_LENGTH} characters`);
    const paging = pageOf(query);
    if ('status' in paging) return paging;
    const { limit, before, cursor } = paging;
    if (!this.engine) return unavailable('the tracker is starting');
    if (!this.logic.indexesComplete())
      return unavailable('this member is still indexing a restored task: ask again in a moment');
    // A recipient in either form (with or without +) is one customer: the indexes hold the canonical one.
    const key = list === 'recipient' ? canonicalCustomerId(value) : value;
    const local: Sorted[] = this.logic
      .listedMessages(list, key, limit, cursor)
      .map(({ sort, state }) => ({ sort, state: messageStateOf(state) }));
    // A recipient's first page also names its requests that never became a message (rejected, expired).
    const withRequests = list === 'recipient' && before === undefined;
    const requests = withRequests ? this.logic.recipientOutcomes(key, limit) : [];
    if (forwarded)
      return {
        status: 200,
        body: {
          [list]: value,
          items: local.map((l) => ({ sort: encodeCursor(l.sort), state: l.state })),
          ...(withRequests ? { requests } : {}),
        },
      };
    const remote = await this.fanOut(
      `/messages?${new URLSearchParams({ [list]: value, limit: String(limit), ...(before ? { before } : {}) }).toString()}`,
      credentials,
    );
    if (remote.some((a) => a.status !== 200))
      return unavailable('some members could not be asked for their part of the list (rebalancing?): ask again');
    const all = [...local];
    // A source that filled its page may hold more: then so may the merged list.
    let mayHaveMore = local.length === limit;
    for (const a of remote) {
      const items = (a.body as { items?: { sort: string; state: MessageState }[] }).items ?? [];
      if (items.length === limit) mayHaveMore = true;
      for (const item of items) all.push({ sort: decodeCursor(item.sort) ?? '', state: item.state });
      requests.push(...((a.body as { requests?: RequestOutcome[] }).requests ?? []));
    }
    all.sort(newestSortFirst);
    const page = all.slice(0, limit);
    const next =
      page.length === limit && (mayHaveMore || all.length > limit) ? encodeCursor(page[page.length - 1]!.sort) : null;
    return { page, next, ...(withRequests ? { requests: newestOutcomesFirst(requests).slice(0, limit) } : {}) };
  }

  /**
   * A customer's inbound messages, newest first, from the member that owns the customer's task
   * (README "Conversations"); another member forwards the query there.
   */
  private async inboundAnswer(
    customer: string,
    query: URLSearchParams,
    forwarded: boolean,
    credentials: Credentials,
  ): Promise<Answer> {
    const page = pageOf(query);
    if ('status' in page) return page;
    const path = `/inbound?${new URLSearchParams({ customer, limit: String(page.limit), ...(page.before ? { before: page.before } : {}) }).toString()}`;
    return this.atOwner(this.logic.taskOfCustomer(customer), forwarded, credentials, path, () => {
      const found = this.logic.inboundOfCustomer(customer, page.limit + 1, page.cursor) ?? [];
      const shown = found.slice(0, page.limit);
      const next = found.length > page.limit ? encodeCursor(shown[shown.length - 1]!.sort) : null;
      return { status: 200, body: { customer, messages: shown.map((f) => f.record), next } satisfies InboundPage };
    });
  }

  /**
   * A customer's conversation, newest first: what they wrote (from the member that owns their
   * task) and what was sent to them with its current state (from every member's recipient
   * index), merged under one cursor: both lists are sorted by time then id, so a page is the
   * newest `limit` of the two, and the next page asks both for what is older than its last.
   */
  private async threadAnswer(customer: string, query: URLSearchParams, credentials: Credentials): Promise<Answer> {
    const page = pageOf(query);
    if ('status' in page) return page;
    const rest = new URLSearchParams({ limit: String(page.limit), ...(page.before ? { before: page.before } : {}) });
    const [inbound, sent] = await Promise.all([
      this.inboundAnswer(customer, rest, false, credentials),
      this.mergedList('recipient', customer, rest, false, credentials),
    ]);
    if (inbound.status !== 200) return inbound;
    if ('status' in sent) return sent;
    const wrote = inbound.body as InboundPage;
    const merged: { sort: string; item: ThreadItem }[] = [
      ...wrote.messages.map((m) => ({
        sort: inboundSortKey(m),
        item: { direction: 'inbound' as const, at: m.at, inbound: m },
      })),
      ...sent.page.map((m) => ({
        sort: m.sort,
        item: {
          direction: 'outbound' as const,
          at: new Date(Number(m.sort.slice(0, 15))).toISOString(),
          message: m.state,
        },
      })),
    ].sort(newestSortFirst);
    const shown = merged.slice(0, page.limit);
    const more = merged.length > page.limit || wrote.next !== null || sent.next !== null;
    const next = shown.length === page.limit && more ? encodeCursor(shown[shown.length - 1]!.sort) : null;
    return {
      status: 200,
      body: {
        customer,
        items: shown.map((s) => s.item),
        next,
        ...(sent.requests ? { requests: sent.requests } : {}),
      } satisfies ThreadPage,
    };
  }

  /**
   * The conversation of a message's recipient, asked of the member that owns the message (it reads the number from its
   * store).
   */
  private threadOfAnswer(
    id: string,
    query: URLSearchParams,
    forwarded: boolean,
    credentials: Credentials,
  ): Promise<Answer> {
    const rest = new URLSearchParams(query);
    rest.set('recipientOf', id);
    return this.atOwner(this.logic.taskOf(id), forwarded, credentials, `/thread?${rest.toString()}`, () => {
      const state = this.logic.message(id);
      if (!state) return notFound('message', id);
      if (state.recipient === null)
        return { status: 200, body: { customer: null, items: [], next: null } satisfies ThreadPage };
      return this.threadAnswer(state.recipient, query, credentials);
    });
  }

  private ownsActive(task: number): boolean {
    return this.logic.ownsTask(task) && (this.engine?.ownedTasks().includes(task) ?? false);
  }

  private async owners(): Promise<Map<number, string> | undefined> {
    if (!this.directory) return undefined;
    await this.connect;
    return this.directory.owners().catch(() => undefined);
  }

  /** Whether every task has an owner that published an address (so a miss everywhere means unknown). */
  private async everyTaskServed(): Promise<boolean> {
    const owners = await this.owners();
    return owners !== undefined && owners.size >= this.logic.taskCount;
  }

  /** The same query to every other member, each answering from its own tasks. */
  private async fanOut(pathAndQuery: string, credentials: Credentials): Promise<ForwardAnswer[]> {
    if (!this.directory) return [];
    await this.connect;
    const members = (await this.directory.members().catch(() => [] as string[])).filter((url) => url !== this.selfUrl);
    return Promise.all(members.map((url) => this.forward(url, pathAndQuery, credentials)));
  }

  private async forward(url: string, pathAndQuery: string, credentials: Credentials): Promise<Answer> {
    try {
      const answer = await forwardQuery(url, pathAndQuery, this.timeoutMs, credentials);
      // The members disagree on the credentials (a tokens file not yet rolled out everywhere): say so, not "unknown".
      if (answer.status === 401 || answer.status === 403)
        return unavailable(
          `member ${url} refused the credential this member accepted (are the tracker's tokens the same on every member?)`,
        );
      return answer;
    } catch (error) {
      this.directory?.invalidate();
      return unavailable(`member ${url} did not answer: ${errorMessage(error)}`);
    }
  }
}

function decode(text: string): string | undefined {
  try {
    return decodeURIComponent(text);
  } catch {
    return undefined;
  }
}

/**
 * A customer id of a query string, trimmed: `?recipient=+1555…` typed without encoding the `+`
 * arrives as a space, and either form names the customer.
 */
function customerParam(query: URLSearchParams, name: string): string | null {
  const value = query.get(name);
  return value === null ? null : value.trim();
}

/** Newest first by sort key (time, then id): the order of every list and of a thread. */
const newestSortFirst = (a: { sort: string }, b: { sort: string }) => (a.sort < b.sort ? 1 : a.sort > b.sort ? -1 : 0);

/** The page size and cursor of a list query; a 400 answer when either is not valid. */
function pageOf(
  query: URLSearchParams,
): { limit: number; before: string | undefined; cursor: string | undefined } | Answer {
  const limit = query.get('limit') === null ? 20 : Number(query.get('limit'));
  if (!Number.isInteger(limit) || limit < 1 || limit > MAX_PAGE)
    return badRequest(`limit must be an integer from 1 to ${MAX_PAGE}`);
  const before = query.get('before') ?? undefined;
  const cursor = before === undefined ? undefined : decodeCursor(before);
  if (before !== undefined && cursor === undefined)
    return badRequest('before is not a cursor this tracker gave (take `next` of the previous page)');
  return { limit, before, cursor };
}

/** Recipient-page cursors: the store's sort key (time and message id), opaque to clients. */
function encodeCursor(sort: string): string {
  return Buffer.from(sort).toString('base64url');
}

function decodeCursor(cursor: string): string | undefined {
  if (!/^[A-Za-z0-9_-]{1,1400}$/.test(cursor)) return undefined;
  const sort = Buffer.from(cursor, 'base64url').toString();
  return /^\d{15}\u0000./.test(sort) ? sort : undefined;
}
