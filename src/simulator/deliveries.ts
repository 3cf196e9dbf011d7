import { EventEmitter } from 'node:events';
import { Pool } from 'undici';
import type { SimulatorConfig } from '../config/schema.js';
import { SIGNATURE_HEADER, type DeliveryStatus, type WebhookTopic } from '../contracts/index.js';
import { signBody } from '../contracts/signature.js';
import type { Logger } from '../platform/logger.js';
import { parseRetryAfter } from '../platform/retry-after.js';
import type { SimEvent } from './events.js';
import type { Faults } from './faults.js';
import type { CompiledBusiness } from './options.js';
import type { Registration, Registrations } from './registrations.js';
import { RingBuffer } from './ring-buffer.js';
import { retryDelayMs, withinBudget } from './retry-schedule.js';
import { Deque } from '../platform/deque.js';

export interface DeliveryAttempt {
  attempt: number;
  startedAt: string;
  /** Until the answer's status line and headers (or the error). */
  latencyMs: number;
  /** The receiver's HTTP status; null when the attempt failed without an answer. */
  status: number | null;
  error: string | null;
  badSignature: boolean;
}

export type DeliveryState =
  'scheduled' | 'in_flight' | 'retry_scheduled' | 'delivered' | 'failed' | 'dropped' | 'cancelled';

export interface DeliveryRecord {
  id: string;
  seq: number;
  eventId: string;
  businessId: string;
  topic: WebhookTopic;
  messageId: string | null;
  status: DeliveryStatus | null;
  registrationId: string;
  address: string;
  /** Set on a copy made by the duplicate fault: the id of the delivery it repeats. */
  duplicateOf: string | null;
  state: DeliveryState;
  createdAt: string;
  nextAttemptAt: string | null;
  attempts: DeliveryAttempt[];
  /** The exact body text delivered. */
  body: string;
}

export interface DeliveryFilter {
  businessId?: string;
  messageId?: string;
  eventId?: string;
  topic?: string;
  state?: string;
  address?: string;
  limit?: number;
}

interface Job {
  record: DeliveryRecord;
  bytes: Buffer;
  secret: string;
  origin: string;
  path: string;
  firstAttemptAt: number | undefined;
  timer: NodeJS.Timeout | undefined;
}

interface Origin {
  pool: Pool;
  inFlight: number;
  ready: Deque<Job>;
}

const HEADER_CONTENT_TYPE = 'text/plain; charset=utf-8';

/**
 * Delivers events to every address registered for their topic: signed with the business's
 * secret, over a keep-alive pool per receiving origin, one timeout per attempt. Only a 200
 * acknowledges; anything else is retried with exponential backoff until the attempt or time
 * budget runs out. Every attempt is recorded. Work in progress is bounded (`queueMax`), and
 * so are attempts in flight (overall and per origin).
 */
export class WebhookDeliveries {
  private readonly log: RingBuffer<DeliveryRecord>;
  private readonly origins = new Map<string, Origin>();
  private readonly scheduled = new Set<Job>();
  private readonly reorderBuffers = new Map<string, { jobs: Job[]; timer: NodeJS.Timeout }>();
  private readonly settled = new Set<Promise<void>>();
  private seq = 0;
  private pending = 0;
  private inFlight = 0;
  private closed = false;
  private readonly counters = { delivered: 0, failed: 0, dropped: 0, attempts: 0, duplicates: 0 };
  private lastDropWarning = 0;

  constructor(
    private readonly options: {
      delivery: SimulatorConfig['delivery'];
      historySize: number;
      faults: Faults;
      registrations: Registrations;
      businesses: Map<string, CompiledBusiness>;
      logger: Logger;
      now: () => number;
      random?: () => number;
    },
  ) {
    this.log = new RingBuffer(options.historySize);
  }

  /** Queues the event for every registration of its topic; returns the deliveries created. */
  enqueue(event: SimEvent): DeliveryRecord[] {
    const business = this.options.businesses.get(event.businessId);
    if (!business || this.closed) return [];
    const bytes = Buffer.from(event.body, 'utf8');
    return this.options.registrations
      .forTopic(event.businessId, event.topic)
      .map((registration) => this.createJob(event, bytes, business, registration, null));
  }

  list(filter: DeliveryFilter = {}): DeliveryRecord[] {
    const matches = this.log
      .toArray()
      .filter(
        (r) =>
          (filter.businessId === undefined || r.businessId === filter.businessId) &&
          (filter.messageId === undefined || r.messageId === filter.messageId) &&
          (filter.eventId === undefined || r.eventId === filter.eventId) &&
          (filter.topic === undefined || r.topic === filter.topic) &&
          (filter.state === undefined || r.state === filter.state) &&
          (filter.address === undefined || r.address === filter.address),
      );
    return filter.limit !== undefined ? matches.slice(-filter.limit) : matches;
  }

  clearHistory(): void {
    this.log.clear();
  }

  stats() {
    return { pending: this.pending, inFlight: this.inFlight, ...this.counters };
  }

  /** Deliveries not yet finished (waiting, in flight or between retries). */
  get pendingCount(): number {
    return this.pending;
  }

  /** Stops everything: timers cleared, attempts in flight aborted, connections closed. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const job of this.scheduled) {
      clearTimeout(job.timer);
      this.finish(job, 'cancelled');
    }
    this.scheduled.clear();
    for (const { jobs, timer } of this.reorderBuffers.values()) {
      clearTimeout(timer);
      for (const job of jobs) this.finish(job, 'cancelled');
    }
    this.reorderBuffers.clear();
    for (const origin of this.origins.values()) {
      let job: Job | undefined;
      while ((job = origin.ready.shift()) !== undefined) this.finish(job, 'cancelled');
    }
    // Destroying the pools fails the attempts in flight at once; they then finish as cancelled.
    const destroyed = Promise.allSettled([...this.origins.values()].map((o) => o.pool.destroy()));
    await Promise.allSettled([...this.settled]);
    await destroyed;
    this.origins.clear();
  }

  private createJob(
    event: SimEvent,
    bytes: Buffer,
    business: CompiledBusiness,
    registration: Registration,
    duplicateOf: string | null,
  ): DeliveryRecord {
    this.seq += 1;
    const url = new URL(registration.address);
    const record: DeliveryRecord = {
      id: `dlv_${this.seq}`,
      seq: this.seq,
      eventId: event.eventId,
      businessId: event.businessId,
      topic: event.topic,
      messageId: event.messageId,
      status: event.status,
      registrationId: registration.id,
      address: registration.address,
      duplicateOf,
      state: 'scheduled',
      createdAt: new Date(this.options.now()).toISOString(),
      nextAttemptAt: null,
      attempts: [],
      body: event.body,
    };
    this.log.push(record);
    if (this.pending >= this.options.delivery.queueMax) {
      record.state = 'dropped';
      this.counters.dropped += 1;
      const now = Date.now();
      if (now - this.lastDropWarning > 1000) {
        this.lastDropWarning = now;
        this.options.logger.warn(
          { queueMax: this.options.delivery.queueMax, dropped: this.counters.dropped },
          'webhook delivery queue full: dropping deliveries',
        );
      }
      return record;
    }
    this.pending += 1;
    if (duplicateOf !== null) this.counters.duplicates += 1;
    const job: Job = {
      record,
      bytes,
      secret: business.signingSecret,
      origin: url.origin,
      path: `${url.pathname}${url.search}`,
      firstAttemptAt: undefined,
      timer: undefined,
    };
    const release = () => {
      if (duplicateOf === null && this.options.faults.reorderDeliveries) this.holdForReorder(job);
      else this.makeReady(job);
    };
    const delay = this.options.faults.deliveryDelayMs;
    if (delay > 0) this.schedule(job, delay, release);
    else release();
    return record;
  }

  private schedule(job: Job, delayMs: number, then: () => void): void {
    job.record.nextAttemptAt = new Date(this.options.now() + delayMs).toISOString();
    this.scheduled.add(job);
    job.timer = setTimeout(() => {
      this.scheduled.delete(job);
      job.timer = undefined;
      then();
    }, delayMs);
  }

  private origin(key: string): Origin {
    let origin = this.origins.get(key);
    if (!origin) {
      const { connectionsPerOrigin, timeoutMs } = this.options.delivery;
      origin = {
        pool: new Pool(key, {
          connections: connectionsPerOrigin,
          pipelining: 1,
          connectTimeout: timeoutMs,
          keepAliveTimeout: 4_000,
        }),
        inFlight: 0,
        ready: new Deque<Job>(),
      };
      this.origins.set(key, origin);
    }
    return origin;
  }

  private makeReady(job: Job): void {
    if (this.closed) return this.finish(job, 'cancelled');
    this.origin(job.origin).ready.push(job);
    this.pump();
  }

  /** Starts attempts while there is room overall and per origin, taking origins in turn. */
  private pump(): void {
    const limit = this.options.delivery.concurrency;
    const perOrigin = this.options.delivery.connectionsPerOrigin;
    let progressed = true;
    while (progressed && this.inFlight < limit && !this.closed) {
      progressed = false;
      for (const origin of this.origins.values()) {
        if (this.inFlight >= limit) break;
        if (origin.inFlight >= perOrigin) continue;
        const job = origin.ready.shift();
        if (!job) continue;
        progressed = true;
        this.track(this.attempt(job));
      }
    }
  }

  private track(promise: Promise<void>): void {
    this.settled.add(promise);
    void promise.finally(() => this.settled.delete(promise));
  }

  /**
   * The reorder fault: deliveries to one address collected for a short window, then sent newest first, one after
   * another.
   */
  private holdForReorder(job: Job): void {
    const key = job.record.registrationId;
    const buffer = this.reorderBuffers.get(key);
    if (buffer) {
      buffer.jobs.push(job);
      if (buffer.jobs.length >= 100) this.flushReorder(key);
      return;
    }
    const timer = setTimeout(() => this.flushReorder(key), this.options.delivery.reorderWindowMs);
    this.reorderBuffers.set(key, { jobs: [job], timer });
  }

  private flushReorder(key: string): void {
    const buffer = this.reorderBuffers.get(key);
    if (!buffer) return;
    this.reorderBuffers.delete(key);
    clearTimeout(buffer.timer);
    const jobs = buffer.jobs.reverse();
    this.track(
      (async () => {
        for (const job of jobs) {
          if (this.closed) this.finish(job, 'cancelled');
          else await this.attempt(job);
        }
      })(),
    );
  }

  private async attempt(job: Job): Promise<void> {
    const origin = this.origin(job.origin);
    const { record } = job;
    const number = record.attempts.length + 1;
    const startedAt = this.options.now();
    job.firstAttemptAt ??= startedAt;
    const badSignature = this.options.faults.badSignature();
    const signature = signBody(badSignature ? `${job.secret}\u0000not-the-secret` : job.secret, job.bytes);
    record.state = 'in_flight';
    record.nextAttemptAt = null;
    this.inFlight += 1;
    origin.inFlight += 1;
    this.counters.attempts += 1;
    const t0 = performance.now();
    // One timer for the whole attempt (connection included). undici's own timeouts have a
    // resolution of about a second, too coarse for the short timeouts of tests.
    // An EventEmitter as the signal: far cheaper than an AbortController per request.
    const abort = new EventEmitter();
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      abort.emit('abort');
    }, this.options.delivery.timeoutMs);
    let status: number | null = null;
    let error: string | null = null;
    let retryAfterMs: number | undefined;
    try {
      const response = await origin.pool.request({
        path: job.path,
        method: 'POST',
        headers: {
          'content-type': HEADER_CONTENT_TYPE,
          'content-length': String(job.bytes.length),
          'accept-encoding': 'gzip',
          [SIGNATURE_HEADER]: signature,
        },
        body: job.bytes,
        signal: abort,
      });
      status = response.statusCode;
      retryAfterMs = parseRetryAfter(response.headers['retry-after'], Date.now());
      await response.body.dump();
    } catch (err) {
      error = timedOut ? `timeout after ${this.options.delivery.timeoutMs} ms` : describeError(err);
    } finally {
      clearTimeout(timer);
      this.inFlight -= 1;
      origin.inFlight -= 1;
    }
    record.attempts.push({
      attempt: number,
      startedAt: new Date(startedAt).toISOString(),
      latencyMs: Math.round((performance.now() - t0) * 100) / 100,
      status,
      error,
      badSignature,
    });
    if (this.closed) {
      this.finish(job, 'cancelled');
    } else if (status === 200) {
      this.finish(job, 'delivered');
      if (record.duplicateOf === null && this.options.faults.duplicateDelivery()) {
        const business = this.options.businesses.get(record.businessId);
        const registration = this.options.registrations
          .list(record.businessId)
          .find((r) => r.id === record.registrationId);
        if (business && registration) {
          const event: SimEvent = {
            businessId: record.businessId,
            topic: record.topic,
            body: record.body,
            eventId: record.eventId,
            messageId: record.messageId,
            status: record.status,
          };
          this.createJob(event, job.bytes, business, registration, record.id);
        }
      }
    } else {
      this.retryOrFail(job, number, retryAfterMs);
    }
    this.pump();
  }

  private retryOrFail(job: Job, attemptsMade: number, retryAfterMs: number | undefined): void {
    const { delivery } = this.options;
    const delay = retryDelayMs(
      attemptsMade,
      { initialMs: delivery.backoffInitialMs, maxMs: delivery.backoffMaxMs },
      { retryAfterMs, random: this.options.random },
    );
    const now = this.options.now();
    if (!withinBudget(attemptsMade, job.firstAttemptAt ?? now, now + delay, delivery)) {
      const last = job.record.attempts.at(-1);
      this.options.logger.warn(
        {
          deliveryId: job.record.id,
          eventId: job.record.eventId,
          address: job.record.address,
          attempts: attemptsMade,
          lastStatus: last?.status,
          lastError: last?.error,
        },
        'webhook delivery failed: retry budget exhausted',
      );
      this.finish(job, 'failed');
      return;
    }
    this.options.logger.debug(
      { deliveryId: job.record.id, attempt: attemptsMade, delayMs: delay },
      'webhook delivery will be retried',
    );
    job.record.state = 'retry_scheduled';
    this.schedule(job, delay, () => this.makeReady(job));
  }

  private finish(job: Job, state: 'delivered' | 'failed' | 'cancelled'): void {
    if (job.record.state === 'delivered' || job.record.state === 'failed' || job.record.state === 'cancelled') return;
    job.record.state = state;
    job.record.nextAttemptAt = null;
    this.pending -= 1;
    if (state === 'delivered') this.counters.delivered += 1;
    if (state === 'failed') this.counters.failed += 1;
  }
}

function describeError(err: unknown): string {
  const e = err as {
    name?: string;
    code?: string;
    message?: string;
    cause?: { name?: string; code?: string; message?: string };
  };
  if (e.code === 'UND_ERR_DESTROYED' || e.code === 'UND_ERR_ABORTED') return 'aborted';
  const code = e.code ?? e.cause?.code;
  const message = e.cause?.message ?? e.message ?? String(err);
  return code ? `${code}: ${message}` : message;
}
