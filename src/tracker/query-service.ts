import { MsgbridgeError } from '../platform/errors.js';
import { messageStateOf, type MessageState, type TrackedMessage } from '../contracts/message-state.js';
import { conversationKey, type ConversationWindow } from '../contracts/conversation-window.js';
import type { RequestOutcome } from '../contracts/request-outcome.js';
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

const notFound = (what: string, id: string): Answer => ({ status: 404, body: { error: 'NOT_FOUND', message: `no state for ${what} ${id}` } });
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

  async route(path: string, query: URLSearchParams, headers: Record<string, string | string[] | undefined>, credentials: Credentials = {}): Promise<Answer | undefined> {
    const forwarded = headers[FORWARDED_HEADER] !== undefined;
    if (path === '/messages') {
      const of = query.get('recipientOf');
      if (of !== null) return this.validId(of) ?? this.recipientOfAnswer(of, query, forwarded, credentials);
      const recipient = query.get('recipient');
      if (recipient !== null) return this.listAnswer('recipient', recipient, query, forwarded, credentials);
      const business = query.get('business');
      if (business !== null) return this.listAnswer('business', business, query, forwarded, credentials);
      return badRequest('search messages with ?recipient=<phone number> or ?business=<business id> (or ?recipientOf=<message id>)');
    }
    const conversation = /^\/conversations\/([^/]+)\/([^/]+)$/.exec(path);
    if (conversation) {
      const [businessId, customer] = [decode(conversation[1]!), decode(conversation[2]!)];
      if (businessId === undefined || customer === undefined) return badRequest('the business id or the customer is not valid percent-encoding');
      return this.validId(businessId) ?? this.validId(customer) ?? this.conversationAnswer(businessId, customer, forwarded, credentials);
    }
    const match = /^\/(messages|requests)\/([^/]+)(\/conversation)?$/.exec(path);
    if (!match || (match[3] && match[1] !== 'messages')) return undefined;
    const id = decode(match[2]!);
    if (id === undefined) return badRequest('the id is not valid percent-encoding');
    const invalid = this.validId(id);
    if (invalid) return invalid;
    if (match[3]) return this.conversationOfAnswer(id, forwarded, credentials);
    return match[1] === 'messages' ? this.messageAnswer(id, forwarded, credentials) : this.requestAnswer(id, forwarded, credentials);
  }

  private validId(id: string): Answer | undefined {
    return id.length === 0 || id.length > MAX_ID_LENGTH ? badRequest(`an id has 1 to ${MAX_ID_LENGTH} characters`) : undefined;
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
    throw new MsgbridgeError('KAFKA_UNAVAILABLE', (answer.body as { message?: string }).message ?? `query failed with ${answer.status}`);
  }

  /**
   * The other messages of a message's recipient: asked of the member that owns the message (it
   * reads the number from its own store), so a caller that sees numbers masked can still follow
   * the link.
   */
  private async recipientOfAnswer(id: string, query: URLSearchParams, forwarded: boolean, credentials: Credentials): Promise<Answer> {
    const task = this.logic.taskOf(id);
    if (this.ownsActive(task)) {
      const state = this.logic.message(id);
      if (!state) return notFound('message', id);
      if (state.recipient === null) return { status: 200, body: { recipient: null, messages: [], next: null } };
      return this.listAnswer('recipient', state.recipient, query, false, credentials);
    }
    if (forwarded) return unavailable(`this member does not run task ${task} (now): ask again`);
    const owner = (await this.owners())?.get(task);
    if (!owner || owner === this.selfUrl) return unavailable(`task ${task} is being restored or moved between members: ask again in a few seconds`);
    const rest = new URLSearchParams(query);
    rest.set('recipientOf', id);
    return this.forward(owner, `/messages?${rest.toString()}`, credentials);
  }

  /** A customer's conversation window (DESIGN §1.6), from the member that owns the customer's task. */
  private async conversationAnswer(businessId: string, customer: string, forwarded: boolean, credentials: Credentials): Promise<Answer> {
    const task = this.logic.taskOf(customer);
    if (this.ownsActive(task)) {
      const window = this.logic.conversation(conversationKey(businessId, customer));
      return window
        ? { status: 200, body: window satisfies ConversationWindow }
        : { status: 404, body: { error: 'NOT_FOUND', message: `no inbound message from ${customer} to ${businessId} is known: no conversation window is open` } };
    }
    if (forwarded) return unavailable(`this member does not run task ${task} (now): ask again`);
    const owner = (await this.owners())?.get(task);
    if (!owner || owner === this.selfUrl) return unavailable(`task ${task} is being restored or moved between members: ask again in a few seconds`);
    return this.forward(owner, `/conversations/${encodeURIComponent(businessId)}/${encodeURIComponent(customer)}`, credentials);
  }

  /** The conversation window of a message's recipient, asked of the member that owns the message. */
  private async conversationOfAnswer(id: string, forwarded: boolean, credentials: Credentials): Promise<Answer> {
    const task = this.logic.taskOf(id);
    if (this.ownsActive(task)) {
      const state = this.logic.message(id);
      if (!state) return notFound('message', id);
      if (state.recipient === null) return { status: 404, body: { error: 'NOT_FOUND', message: `message ${id} has no known recipient yet` } };
      return this.conversationAnswer(state.businessId, state.recipient, false, credentials);
    }
    if (forwarded) return unavailable(`this member does not run task ${task} (now): ask again`);
    const owner = (await this.owners())?.get(task);
    if (!owner || owner === this.selfUrl) return unavailable(`task ${task} is being restored or moved between members: ask again in a few seconds`);
    return this.forward(owner, `/messages/${encodeURIComponent(id)}/conversation`, credentials);
  }

  private async messageAnswer(id: string, forwarded: boolean, credentials: Credentials = {}): Promise<Answer> {
    const task = this.logic.taskOf(id);
    if (this.ownsActive(task)) {
      const state = this.logic.message(id);
      return state ? { status: 200, body: messageStateOf(state) } : notFound('message', id);
    }
    if (forwarded) return unavailable(`this member does not run task ${task} (now): ask again`);
    const owner = (await this.owners())?.get(task);
    if (!owner || owner === this.selfUrl) return unavailable(`task ${task} is being restored or moved between members: ask again in a few seconds`);
    return this.forward(owner, `/messages/${encodeURIComponent(id)}`, credentials);
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
    if (!this.logic.indexesComplete()) return unavailable(`this member is still indexing a restored task: request ${id} may be there; ask again in a moment`);
    const localOutcome = this.logic.requestOutcome(id);
    if (forwarded) return localOutcome ? { status: 200, body: localOutcome } : notFound('request', id);
    const answers = await this.fanOut(`/requests/${encodeURIComponent(id)}`, credentials);
    const bodies = answers.filter((a) => a.status === 200).map((a) => a.body as TrackedMessage | RequestOutcome);
    const states = bodies.filter((b): b is TrackedMessage => !('outcome' in b));
    if (states.length > 0) return { status: 200, body: states.sort((a, b) => b.updatedAt.localeCompare(a.updatedAt))[0] };
    const failed = answers.filter((a) => a.status !== 404 && a.status !== 200);
    if (failed.length > 0 || !(await this.everyTaskServed())) return unavailable(`request ${id} is not on the members that answered, and some could not be asked (rebalancing?): ask again`);
    const outcomes = [...(localOutcome ? [localOutcome] : []), ...bodies.filter((b): b is RequestOutcome => 'outcome' in b)];
    if (outcomes.length > 0) return { status: 200, body: outcomes.sort((a, b) => b.at.localeCompare(a.at))[0] };
    return notFound('request', id);
  }

  /** A page of a recipient's or a business's messages, merged from every member's tasks. */
  private async listAnswer(list: MessageList, value: string, query: URLSearchParams, forwarded: boolean, credentials: Credentials = {}): Promise<Answer> {
    if (value.length === 0 || value.length > MAX_ID_LENGTH) return badRequest(`a ${list} has 1 to ${MAX_ID_LENGTH} characters`);
    const limit = query.get('limit') === null ? 20 : Number(query.get('limit'));
    if (!Number.isInteger(limit) || limit < 1 || limit > MAX_PAGE) return badRequest(`limit must be an integer from 1 to ${MAX_PAGE}`);
    const before = query.get('before') ?? undefined;
    const cursor = before === undefined ? undefined : decodeCursor(before);
    if (before !== undefined && cursor === undefined) return badRequest('before is not a cursor this tracker gave (take `next` of the previous page)');
    if (!this.engine) return unavailable('the tracker is starting');
    if (!this.logic.indexesComplete()) return unavailable('this member is still indexing a restored task: ask again in a moment');
    const local: Sorted[] = this.logic.listedMessages(list, value, limit, cursor).map(({ sort, state }) => ({ sort, state: messageStateOf(state) }));
    // A recipient's first page also names its requests that never became a message (rejected, expired).
    const withRequests = list === 'recipient' && before === undefined;
    const requests = withRequests ? this.logic.recipientOutcomes(value, limit) : [];
    if (forwarded) return { status: 200, body: { [list]: value, items: local.map((l) => ({ sort: encodeCursor(l.sort), state: l.state })), ...(withRequests ? { requests } : {}) } };
    const remote = await this.fanOut(`/messages?${new URLSearchParams({ [list]: value, limit: String(limit), ...(before ? { before } : {}) }).toString()}`, credentials);
    if (remote.some((a) => a.status !== 200)) return unavailable('some members could not be asked for their part of the list (rebalancing?): ask again');
    const all = [...local];
    // A source that filled its page may hold more: then so may the merged list.
    let mayHaveMore = local.length === limit;
    for (const a of remote) {
      const items = (a.body as { items?: { sort: string; state: MessageState }[] }).items ?? [];
      if (items.length === limit) mayHaveMore = true;
      for (const item of items) all.push({ sort: decodeCursor(item.sort) ?? '', state: item.state });
      requests.push(...((a.body as { requests?: RequestOutcome[] }).requests ?? []));
    }
    all.sort((a, b) => (a.sort < b.sort ? 1 : a.sort > b.sort ? -1 : 0));
    const page = all.slice(0, limit);
    const next = page.length === limit && (mayHaveMore || all.length > limit) ? encodeCursor(page[page.length - 1]!.sort) : null;
    const body = { [list]: value, messages: page.map((p) => p.state), next, ...(withRequests ? { requests: newestOutcomesFirst(requests).slice(0, limit) } : {}) };
    return { status: 200, body: body as MessagePage };
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
      if (answer.status === 401 || answer.status === 403) return unavailable(`member ${url} refused the credential this member accepted (are the tracker's tokens the same on every member?)`);
      return answer;
    } catch (error) {
      this.directory?.invalidate();
      return unavailable(`member ${url} did not answer: ${(error as Error)?.message ?? String(error)}`);
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

/** Recipient-page cursors: the store's sort key (time and message id), opaque to clients. */
function encodeCursor(sort: string): string {
  return Buffer.from(sort).toString('base64url');
}

function decodeCursor(cursor: string): string | undefined {
  if (!/^[A-Za-z0-9_-]{1,1400}$/.test(cursor)) return undefined;
  const sort = Buffer.from(cursor, 'base64url').toString();
  return /^\d{15}\u0000./.test(sort) ? sort : undefined;
}
