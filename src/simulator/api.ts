import { createHash, timingSafeEqual } from 'node:crypto';
import { monotonicFactory } from 'ulid';
import { z } from 'zod';
import type { SimulatorFaults } from '../config/schema.js';
import {
  recipientNumber,
  SEND_PATH_SEGMENT,
  sendTemplateBodySchema,
  sendTextBodySchema,
  webhookRegistrationSchema,
  type ProviderError,
  type SendOperation,
} from '../contracts/index.js';
import { WebhookDeliveries, type DeliveryFilter, type DeliveryRecord } from './deliveries.js';
import { inboundMessageEvent, type SimEvent } from './events.js';
import { Faults } from './faults.js';
import { MessageLifecycle, type MessageRecord } from './lifecycle.js';
import type { CompiledBusiness, CompiledSimulatorOptions } from './options.js';
import { providerError, type ProviderErrorCode } from './provider-errors.js';
import { Registrations } from './registrations.js';
import { RingBuffer } from './ring-buffer.js';
import { errorMessage } from '../platform/errors.js';

/** A request as the HTTP adapter hands it over: everything copied out of the framework. */
export interface SimRequest {
  method: string;
  path: string;
  /** The raw query string, without `?`. */
  query: string;
  apiKey: string;
  contentType: string;
  body: Buffer;
}

export interface SimResponse {
  status: number;
  headers?: Record<string, string>;
  /** JSON text. */
  body: string;
}

export interface SendRecord {
  seq: number;
  businessId: string;
  operation: SendOperation;
  /** The HTTP status answered (or that would have been, when the caller gave up first). */
  status: number;
  messageId: string | null;
  /** The parsed JSON body; null when it was not JSON (or larger than 64 KiB). */
  body: unknown;
  errorCode: string | null;
  receivedAt: string;
}

export interface InboundInput {
  from: string;
  text: string;
  name?: string;
  /** A button reply: the text is the button's; its payload, when given, comes back in `callbackData`. */
  button?: { payload?: string };
}

export interface InboundResult {
  eventId: string;
  event: unknown;
  deliveries: number;
  windowOpenUntil: string;
}

const inboundSchema = z.strictObject({
  from: recipientNumber,
  text: z.string().min(1, 'text must not be empty').max(4096),
  name: z.string().min(1).max(256).optional(),
  button: z
    .strictObject(
      { payload: z.string().min(1, 'a button payload must not be empty').max(1024).optional() },
      { error: 'button must be an object, {} or {"payload": "..."}' },
    )
    .optional(),
});

/** The send path's last segment → its operation. */
const SEND_OPERATIONS: Record<string, SendOperation> = Object.fromEntries(
  (Object.entries(SEND_PATH_SEGMENT) as [SendOperation, string][]).map(([operation, segment]) => [segment, operation]),
);

const MAX_RECORDED_BODY_BYTES = 64 * 1024;

/**
 * The provider stand-in without any HTTP framework: the three operations of the spec, the
 * registration extensions, and the `/sim/` control endpoints. The uWebSockets.js adapter
 * (server.ts) only copies requests in and answers out.
 */
export class ProviderSimulator {
  readonly faults: Faults;
  readonly registrations: Registrations;
  readonly deliveries: WebhookDeliveries;
  readonly lifecycle: MessageLifecycle;
  private readonly sends: RingBuffer<SendRecord>;
  private readonly nextId = monotonicFactory();
  private readonly sleeping = new Map<NodeJS.Timeout, () => void>();
  private sendSeq = 0;
  private closed = false;
  private readonly keyDigests = new Map<string, Buffer>();

  constructor(private readonly options: CompiledSimulatorOptions) {
    this.faults = new Faults(options.faults);
    this.registrations = new Registrations({
      file: options.registrationsFile,
      maxPerBusiness: options.maxRegistrationsPerBusiness,
      now: options.now,
    });
    this.deliveries = new WebhookDeliveries({
      delivery: options.delivery,
      historySize: options.history.deliveries,
      faults: this.faults,
      registrations: this.registrations,
      businesses: options.businesses,
      logger: options.logger,
      now: options.now,
    });
    this.lifecycle = new MessageLifecycle({
      lifecycle: options.lifecycle,
      templates: options.templates,
      recipients: options.recipients,
      history: options.history,
      emit: (event) => this.emit(event),
      now: options.now,
    });
    this.sends = new RingBuffer(options.history.sends);
    for (const business of options.businesses.values()) this.keyDigests.set(business.id, digest(business.apiKey));
  }

  async handle(req: SimRequest): Promise<SimResponse> {
    const segments = req.path.split('/').filter((s) => s !== '');
    const method = req.method.toUpperCase();
    try {
      if (segments[0] === 'v1' && segments[1] === 'businesses' && segments[2] !== undefined) {
        return await this.handleProvider(method, decodeURIComponent(segments[2]), segments.slice(3), req);
      }
      if (segments[0] === 'sim') return this.handleSim(method, segments.slice(1), req);
      if (segments.length === 1 && segments[0] === 'healthz')
        return method === 'GET' ? json(200, { status: 'ok' }) : methodNotAllowed(['GET']);
      return errorAnswer(404, providerError('ERROR_CODE_NOT_FOUND', { message: `no route for ${method} ${req.path}` }));
    } catch (err) {
      if (err instanceof URIError)
        return errorAnswer(
          400,
          providerError('ERROR_CODE_REQUEST_FIELD_INVALID', { message: 'the path is not valid percent-encoding' }),
        );
      this.options.logger.error({ err, method, path: req.path }, 'simulator request failed');
      return errorAnswer(500, providerError('ERROR_CODE_INTERNAL'));
    }
  }

  /** A customer writes to the business: a `messages` event goes out and the window opens. */
  injectInbound(businessId: string, input: InboundInput): InboundResult {
    const business = this.options.businesses.get(businessId);
    if (!business) throw new Error(`unknown business "${businessId}"`);
    const at = this.options.now();
    const event = inboundMessageEvent({
      businessId,
      businessNumber: business.number,
      from: input.from,
      name: input.name,
      text: input.text,
      at,
      button: input.button,
    });
    this.lifecycle.recordInbound(businessId, input.from);
    const deliveries = this.emit(event);
    return {
      eventId: event.eventId,
      event: JSON.parse(event.body),
      deliveries: deliveries.length,
      windowOpenUntil: new Date(at + this.options.lifecycle.conversationWindowMs).toISOString(),
    };
  }

  listSends(filter: { since?: number; businessId?: string } = {}): SendRecord[] {
    return this.sends
      .toArray()
      .filter(
        (s) =>
          (filter.since === undefined || s.seq > filter.since) &&
          (filter.businessId === undefined || s.businessId === filter.businessId),
      );
  }

  clearSends(): void {
    this.sends.clear();
  }

  listDeliveries(filter: DeliveryFilter = {}): DeliveryRecord[] {
    return this.deliveries.list(filter);
  }

  message(id: string): MessageRecord | undefined {
    return this.lifecycle.get(id);
  }

  getFaults(): SimulatorFaults {
    return this.faults.get();
  }

  /** True when no status change and no webhook delivery is pending. */
  isIdle(): boolean {
    return this.lifecycle.pendingSteps === 0 && this.deliveries.pendingCount === 0;
  }

  stats() {
    return {
      sends: { recorded: this.sends.size, total: this.sendSeq },
      lifecycle: { pendingSteps: this.lifecycle.pendingSteps },
      deliveries: this.deliveries.stats(),
      registrations: this.registrations.all().length,
    };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const [timer, wake] of this.sleeping) {
      clearTimeout(timer);
      wake();
    }
    this.sleeping.clear();
    this.lifecycle.close();
    await this.deliveries.close();
  }

  private emit(event: SimEvent): DeliveryRecord[] {
    return this.deliveries.enqueue(event);
  }

  private async handleProvider(
    method: string,
    businessId: string,
    rest: string[],
    req: SimRequest,
  ): Promise<SimResponse> {
    const [first, second, third] = rest;
    if (first === 'send' && second !== undefined && rest.length === 2 && SEND_OPERATIONS[second]) {
      if (method !== 'POST') return methodNotAllowed(['POST']);
      return this.send(businessId, SEND_OPERATIONS[second], req);
    }
    if (first === 'create' && second === 'webhooks' && rest.length === 2) {
      if (method !== 'POST') return methodNotAllowed(['POST']);
      return this.authenticated(businessId, req, (business) => this.createWebhook(business, req));
    }
    if (first === 'webhooks' && rest.length === 1) {
      if (method !== 'GET') return methodNotAllowed(['GET']);
      return this.authenticated(businessId, req, (business) =>
        json(200, { webhooks: this.registrations.list(business.id) }),
      );
    }
    if (first === 'webhooks' && third === undefined && second !== undefined) {
      if (method !== 'DELETE') return methodNotAllowed(['DELETE']);
      return this.authenticated(businessId, req, (business) => {
        const removed = this.registrations.delete(business.id, decodeURIComponent(second));
        if (!removed)
          return errorAnswer(
            404,
            providerError('ERROR_CODE_NOT_FOUND', { message: `no webhook registration "${second}" for this business` }),
          );
        this.options.logger.info(
          { businessId: business.id, registrationId: removed.id, topic: removed.topic },
          'webhook registration deleted',
        );
        return json(200, removed);
      });
    }
    return errorAnswer(404, providerError('ERROR_CODE_NOT_FOUND', { message: `no route for ${method} ${req.path}` }));
  }

  /**
   * Unknown business and wrong key get the same 401: a key can only be valid for a business
   * that exists, and the answer does not reveal which business ids do.
   */
  private authenticate(businessId: string, apiKey: string): { business: CompiledBusiness } | { error: ProviderError } {
    if (apiKey === '') return { error: providerError('ERROR_CODE_API_KEY_MISSING') };
    const business = this.options.businesses.get(businessId);
    const expected = this.keyDigests.get(businessId);
    const matches = expected !== undefined && timingSafeEqual(expected, digest(apiKey));
    if (!business || !matches) return { error: providerError('ERROR_CODE_API_KEY_INVALID') };
    return { business };
  }

  private authenticated(
    businessId: string,
    req: SimRequest,
    then: (business: CompiledBusiness) => SimResponse,
  ): SimResponse {
    const auth = this.authenticate(businessId, req.apiKey);
    if ('error' in auth) return errorAnswer(401, auth.error);
    return then(auth.business);
  }

  private async send(businessId: string, operation: SendOperation, req: SimRequest): Promise<SimResponse> {
    const receivedAt = new Date(this.options.now()).toISOString();
    let parsedBody: unknown = null;
    const bodyCheck = parseJsonBody(req);
    if (bodyCheck.ok && req.body.length <= MAX_RECORDED_BODY_BYTES) parsedBody = bodyCheck.value;
    const record = (answer: SimResponse, messageId: string | null = null): SimResponse => {
      this.sendSeq += 1;
      const code = answer.status >= 400 ? errorCodeOf(answer.body) : null;
      this.sends.push({
        seq: this.sendSeq,
        businessId,
        operation,
        status: answer.status,
        messageId,
        body: parsedBody,
        errorCode: code,
        receivedAt,
      });
      return answer;
    };

    const latency = this.faults.sendLatencyMs();
    if (latency > 0) await this.sleep(latency);
    if (this.closed)
      return record(
        errorAnswer(503, providerError('ERROR_CODE_UNAVAILABLE', { message: 'the simulator is shutting down' })),
      );

    const auth = this.authenticate(businessId, req.apiKey);
    if ('error' in auth) return record(errorAnswer(401, auth.error));
    const business = auth.business;

    const fault = this.faults.sendFault(`${business.id} ${operation}`);
    if (fault?.status === 429) {
      const headers: Record<string, string> =
        fault.retryAfterSeconds !== null ? { 'retry-after': String(fault.retryAfterSeconds) } : {};
      return record(errorAnswer(429, providerError('ERROR_CODE_BUSINESS_REACHED_LIMITS'), headers));
    }
    if (fault) {
      const code: ProviderErrorCode =
        fault.status === 504
          ? 'ERROR_CODE_UPSTREAM_TIMEOUT'
          : fault.status === 503
            ? 'ERROR_CODE_UNAVAILABLE'
            : 'ERROR_CODE_INTERNAL';
      return record(errorAnswer(fault.status, providerError(code)));
    }

    if (!bodyCheck.ok) return record(bodyCheck.answer);
    const input =
      operation === 'text'
        ? sendTextBodySchema.safeParse(bodyCheck.value)
        : sendTemplateBodySchema.safeParse(bodyCheck.value);
    if (!input.success) return record(validationAnswer(input.error));

    const id = this.nextId();
    if (operation === 'text') {
      const body = input.data as z.infer<typeof sendTextBodySchema>;
      if (body.message.text.trim() === '') {
        return record(
          errorAnswer(
            400,
            providerError('ERROR_CODE_MESSAGE_TEXT_EMPTY', {
              message: 'message.text: the message text is empty',
              details: { field: 'message.text' },
            }),
          ),
        );
      }
      this.lifecycle.create({
        id,
        business,
        operation,
        channelType: body.recipient.channelType,
        recipient: body.recipient.id,
        callbackData: body.callbackData,
      });
    } else {
      const body = input.data as z.infer<typeof sendTemplateBodySchema>;
      this.lifecycle.create({
        id,
        business,
        operation,
        channelType: 'whatsapp',
        recipient: body.number,
        templateName: body.templateName,
        parameters: body.parameters,
        callbackData: body.callbackData,
      });
    }
    return record(json(200, { id }), id);
  }

  private createWebhook(business: CompiledBusiness, req: SimRequest): SimResponse {
    const bodyCheck = parseJsonBody(req);
    if (!bodyCheck.ok) return bodyCheck.answer;
    const input = webhookRegistrationSchema.safeParse(bodyCheck.value);
    if (!input.success) return validationAnswer(input.error);
    const result = this.registrations.create(business.id, input.data.topic, input.data.address);
    if ('limitReached' in result) {
      return errorAnswer(
        400,
        providerError('ERROR_CODE_WEBHOOK_LIMIT_REACHED', {
          details: { max: this.options.maxRegistrationsPerBusiness },
        }),
      );
    }
    if (result.created) {
      this.options.logger.info(
        {
          businessId: business.id,
          registrationId: result.registration.id,
          topic: result.registration.topic,
          address: result.registration.address,
        },
        'webhook registered',
      );
    }
    return json(200, result.registration);
  }

  private handleSim(method: string, rest: string[], req: SimRequest): SimResponse {
    const [first, second, third] = rest;
    const query = new URLSearchParams(req.query);
    if (first === 'faults' && rest.length === 1) {
      if (method === 'GET') return json(200, this.faults.get());
      if (method === 'DELETE') return json(200, this.faults.reset());
      if (method === 'PUT' || method === 'PATCH') {
        const body = parseSimBody(req.body);
        if (!body.ok) return body.answer;
        const result = this.faults.patch(body.value);
        if (!result.ok) return json(400, { message: result.message, issues: result.issues });
        this.options.logger.info({ faults: result.faults }, 'faults changed');
        return json(200, result.faults);
      }
      return methodNotAllowed(['GET', 'PUT', 'DELETE']);
    }
    if (first === 'sends' && rest.length === 1) {
      if (method === 'DELETE') {
        this.clearSends();
        return json(200, { cleared: true });
      }
      if (method !== 'GET') return methodNotAllowed(['GET', 'DELETE']);
      const since = intParam(query, 'since');
      if (since === null) return simError(400, 'since must be a non-negative integer');
      return json(
        200,
        this.listSends({
          ...(since !== undefined ? { since } : {}),
          ...optional('businessId', query.get('businessId')),
        }),
      );
    }
    if (first === 'deliveries' && rest.length === 1) {
      if (method === 'DELETE') {
        this.deliveries.clearHistory();
        return json(200, { cleared: true });
      }
      if (method !== 'GET') return methodNotAllowed(['GET', 'DELETE']);
      const limit = intParam(query, 'limit');
      if (limit === null) return simError(400, 'limit must be a non-negative integer');
      const filter: DeliveryFilter = {};
      for (const key of ['businessId', 'messageId', 'eventId', 'topic', 'state', 'address'] as const) {
        const value = query.get(key);
        if (value !== null) filter[key] = value;
      }
      if (limit !== undefined) filter.limit = limit;
      return json(200, this.listDeliveries(filter));
    }
    if (first === 'messages' && rest.length <= 2) {
      if (method !== 'GET') return methodNotAllowed(['GET']);
      if (second === undefined) {
        const limit = intParam(query, 'limit');
        if (limit === null) return simError(400, 'limit must be a non-negative integer');
        return json(200, this.lifecycle.recent(limit ?? 100));
      }
      const message = this.message(decodeURIComponent(second));
      return message
        ? json(200, message)
        : simError(
            404,
            `no message "${second}" (unknown, or forgotten: the simulator keeps the newest ${this.options.history.messages})`,
          );
    }
    if (first === 'businesses' && second !== undefined && third === 'inbound' && rest.length === 3) {
      if (method !== 'POST') return methodNotAllowed(['POST']);
      const businessId = decodeURIComponent(second);
      if (!this.options.businesses.has(businessId)) return simError(404, `unknown business "${businessId}"`);
      const body = parseSimBody(req.body);
      if (!body.ok) return body.answer;
      const input = inboundSchema.safeParse(body.value);
      if (!input.success) {
        const issues = input.error.issues.map((i) => ({
          path: i.path.map(String).join('.') || '(body)',
          message: i.message,
        }));
        return json(400, {
          message: `invalid inbound message: ${issues.map((i) => `${i.path}: ${i.message}`).join('; ')}`,
          issues,
        });
      }
      return json(200, this.injectInbound(businessId, input.data));
    }
    if (first === 'stats' && rest.length === 1)
      return method === 'GET' ? json(200, this.stats()) : methodNotAllowed(['GET']);
    return simError(404, `no route for ${method} ${req.path}`);
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.sleeping.delete(timer);
        resolve();
      }, ms);
      this.sleeping.set(timer, resolve);
    });
  }
}

function digest(value: string): Buffer {
  return createHash('sha256').update(value).digest();
}

export function json(status: number, value: unknown, headers?: Record<string, string>): SimResponse {
  return { status, body: JSON.stringify(value), ...(headers ? { headers } : {}) };
}

function errorAnswer(status: number, error: ProviderError, headers?: Record<string, string>): SimResponse {
  return json(status, error, headers);
}

function simError(status: number, message: string): SimResponse {
  return json(status, { message });
}

function methodNotAllowed(allowed: string[]): SimResponse {
  return json(405, providerError('ERROR_CODE_METHOD_NOT_ALLOWED', { details: { allowed } }), {
    allow: allowed.join(', '),
  });
}

function errorCodeOf(body: string): string | null {
  try {
    const value = JSON.parse(body) as { code?: unknown };
    return typeof value.code === 'string' ? value.code : null;
  } catch {
    return null;
  }
}

type BodyCheck = { ok: true; value: unknown } | { ok: false; answer: SimResponse };

/** The provider operations take JSON objects only, declared as such. */
function parseJsonBody(req: SimRequest): BodyCheck {
  if (!/^application\/([\w.+-]+\+)?json\s*(;|$)/i.test(req.contentType.trim())) {
    return {
      ok: false,
      answer: errorAnswer(
        415,
        providerError('ERROR_CODE_CONTENT_TYPE_UNSUPPORTED', {
          message: `the request body must be application/json, got ${req.contentType === '' ? 'no content-type' : `"${req.contentType}"`}`,
        }),
      ),
    };
  }
  try {
    const value: unknown = JSON.parse(req.body.toString('utf8'));
    if (typeof value !== 'object' || value === null || Array.isArray(value)) {
      return {
        ok: false,
        answer: errorAnswer(
          400,
          providerError('ERROR_CODE_REQUEST_BODY_INVALID', { message: 'the request body must be a JSON object' }),
        ),
      };
    }
    return { ok: true, value };
  } catch (err) {
    return {
      ok: false,
      answer: errorAnswer(
        400,
        providerError('ERROR_CODE_REQUEST_BODY_INVALID', {
          message: `the request body is not valid JSON: ${errorMessage(err)}`,
        }),
      ),
    };
  }
}

/** `/sim/` endpoints are lenient about the content type, strict about the JSON. */
function parseSimBody(body: Buffer): BodyCheck {
  try {
    const value: unknown = body.length === 0 ? {} : JSON.parse(body.toString('utf8'));
    if (typeof value !== 'object' || value === null || Array.isArray(value))
      return { ok: false, answer: simError(400, 'the body must be a JSON object') };
    return { ok: true, value };
  } catch (err) {
    return { ok: false, answer: simError(400, `the body is not valid JSON: ${errorMessage(err)}`) };
  }
}

/** 400 with the error object naming the first invalid field (all of them in details). */
function validationAnswer(error: z.ZodError): SimResponse {
  const issues = error.issues.map((i) => ({ field: i.path.map(String).join('.') || '(body)', message: i.message }));
  const first = issues[0]!;
  const firstIssue = error.issues[0]!;
  const phoneField = first.field === 'recipient.id' || first.field === 'number';
  const code: ProviderErrorCode =
    phoneField && firstIssue.code !== 'invalid_type'
      ? 'ERROR_CODE_PHONE_NUMBER_BAD_FORMAT'
      : 'ERROR_CODE_REQUEST_FIELD_INVALID';
  return errorAnswer(
    400,
    providerError(code, { message: `${first.field}: ${first.message}`, details: { field: first.field, issues } }),
  );
}

/** undefined when absent, null when present but not a non-negative integer. */
function intParam(query: URLSearchParams, name: string): number | undefined | null {
  const value = query.get(name);
  if (value === null) return undefined;
  return /^\d{1,12}$/.test(value) ? Number(value) : null;
}

function optional<K extends string>(key: K, value: string | null): { [P in K]?: string } {
  return (value === null ? {} : { [key]: value }) as { [P in K]?: string };
}
