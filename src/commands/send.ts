import { randomUUID } from 'node:crypto';
import { InvalidArgumentError, type Command } from 'commander';
import {
  CHANNEL,
  isSms,
  RELAY_RESULT_CODE,
  parseSendRequest,
  SendRequestInvalidError,
  sendRequestChannel,
  sendRequestRecord,
  sendResultSchema,
  deliveryStatusEventSchema,
  type SendRequest,
} from '../contracts/index.js';
import type { Config } from '../config/schema.js';
import { MsgbridgeError } from '../platform/errors.js';
import { createKafka, type KafkaPort } from '../kafka/client.js';
import { withAdmin } from '../kafka/admin.js';
import { createKafkajsProducer } from '../kafka/kafkajs-producer.js';
import { subscribeTopics, type TopicSubscription } from '../kafka/topic-subscription.js';
import { messageStateSchema, type MessageState } from '../contracts/message-state.js';
import { commandConfig, operatorBrokers } from './context.js';
import { parseIntegerOption } from './options.js';

/**
 * Exit codes of `msgbridge send`: read (an SMS: accepted) = 0; rejected (dead-lettered included), expired or
 * delivery_failed = 1; timeout = 3.
 */
export const SEND_EXIT = { done: 0, failed: 1, timeout: 3 } as const;

interface CommonOptions {
  business?: string;
  requestId?: string;
  timeout: number;
  follow: boolean;
}

export function registerSendCommand(program: Command): void {
  const send = program
    .command('send')
    .description('produce a send request to Kafka and follow it: the created message id, then each delivery status');

  const common = (command: Command) =>
    command
      .requiredOption('--to <number>', 'recipient phone number, international format (+15550002222)')
      .option('--business <id>', 'business id (optional when one business is configured)')
      .option('--request-id <id>', 'request id (default: a random one)')
      .option(
        '--timeout <seconds>',
        'give up following after this many seconds',
        parseIntegerOption('--timeout', 1, 3600),
        60,
      )
      .option('--no-follow', 'only produce the request, do not wait for its result');

  common(
    send
      .command('text')
      .description('send a free-form text (on WhatsApp it needs an open 24-hour window; on SMS it does not)'),
  )
    .requiredOption('--text <text>', 'the message text')
    .option(
      '--channel <channel>',
      'whatsapp or sms (an SMS has no 24-hour window and no delivery status: accepted is where it ends)',
      parseChannel,
      'whatsapp',
    )
    .option(
      '--fallback-template <name>',
      'a template the sender sends instead when the customer\'s 24-hour window is closed (with sender.conversationWindow "reject")',
    )
    .option(
      '-p, --param <name=value>',
      'a parameter of the fallback template (repeatable)',
      collectParam,
      [] as { name: string; value: string }[],
    )
    .option(
      '--ignore-conversation-window',
      'send the text whatever the sender knows of the conversation window (conversationWindow: "ignore")',
    )
    .action(
      async (
        opts: CommonOptions & {
          to: string;
          text: string;
          channel: string;
          fallbackTemplate?: string;
          param: { name: string; value: string }[];
          ignoreConversationWindow?: boolean;
        },
        command: Command,
      ) => {
        if (opts.param.length > 0 && opts.fallbackTemplate === undefined) {
          throw new MsgbridgeError(
            'INVALID_ARGUMENT',
            '--param sets a parameter of the fallback template: it needs --fallback-template <name>',
          );
        }
        if (opts.channel === CHANNEL.sms && opts.fallbackTemplate !== undefined) {
          throw new MsgbridgeError(
            'INVALID_ARGUMENT',
            '--fallback-template is a WhatsApp template for a closed 24-hour window: an SMS has no window, drop it or send on whatsapp',
          );
        }
        await runSend(command, opts, {
          requestId: opts.requestId ?? `cli-${randomUUID()}`,
          ...(opts.business ? { businessId: opts.business } : {}),
          type: 'text',
          recipient: { channelType: opts.channel, id: opts.to },
          message: { text: opts.text },
          ...(opts.fallbackTemplate !== undefined
            ? { fallbackTemplate: { templateName: opts.fallbackTemplate, parameters: opts.param } }
            : {}),
          ...(opts.ignoreConversationWindow ? { conversationWindow: 'ignore' } : {}),
        });
      },
    );

  common(send.command('template').description('send an approved WhatsApp template'))
    .requiredOption('--template <name>', 'the template name')
    .option(
      '-p, --param <name=value>',
      'a template parameter (repeatable)',
      collectParam,
      [] as { name: string; value: string }[],
    )
    .action(
      async (
        opts: CommonOptions & { to: string; template: string; param: { name: string; value: string }[] },
        command: Command,
      ) => {
        await runSend(command, opts, {
          requestId: opts.requestId ?? `cli-${randomUUID()}`,
          ...(opts.business ? { businessId: opts.business } : {}),
          type: 'template',
          number: opts.to,
          templateName: opts.template,
          parameters: opts.param,
        });
      },
    );
}

function parseChannel(value: string): string {
  const channel = value.toLowerCase();
  if (channel !== CHANNEL.whatsapp && channel !== CHANNEL.sms)
    throw new InvalidArgumentError(`expected whatsapp or sms, got "${value}"`);
  return channel;
}

function collectParam(value: string, previous: { name: string; value: string }[]) {
  const eq = value.indexOf('=');
  if (eq <= 0) throw new InvalidArgumentError(`--param expects name=value, got "${value}"`);
  return [...previous, { name: value.slice(0, eq), value: value.slice(eq + 1) }];
}

function say(line: string) {
  process.stdout.write(`${line}\n`);
}

async function runSend(command: Command, opts: CommonOptions, raw: Record<string, unknown>): Promise<void> {
  let request: SendRequest;
  try {
    request = parseSendRequest(raw);
  } catch (err) {
    if (err instanceof SendRequestInvalidError) throw new MsgbridgeError('INVALID_ARGUMENT', err.message);
    throw err;
  }
  const config = commandConfig(command);
  if (
    request.businessId &&
    config.businesses.length > 0 &&
    !config.businesses.some((b) => b.id === request.businessId)
  ) {
    throw new MsgbridgeError(
      'INVALID_ARGUMENT',
      `unknown business "${request.businessId}"; configured: ${config.businesses.map((b) => b.id).join(', ')}`,
    );
  }
  const kafka = createKafka(config.kafka, { brokers: operatorBrokers(config), clientId: 'msgbridge-send' });
  const topics = config.kafka.topics;

  let subscription: TopicSubscription | undefined;
  let outcome: Promise<number> | undefined;
  if (opts.follow) {
    ({ subscription, outcome } = await follow(kafka, config, request, opts.timeout));
  }
  const record = sendRequestRecord(request, { topic: topics.sendRequests, headers: { traceparent: traceparent() } });
  // acks=all, no topic created by producing (the port's producer); one record, so not idempotent, as before.
  const producer = createKafkajsProducer(kafka, { idempotent: false });
  await producer.connect();
  await producer.send([
    { topic: record.topic, records: [{ key: record.key, value: record.value, headers: record.headers }] },
  ]);
  await producer.disconnect();
  say(`request ${request.requestId} → ${topics.sendRequests} (to ${record.key})`);
  if (!outcome || !subscription) return;
  try {
    process.exitCode = await outcome;
  } finally {
    await subscription.stop();
  }
}

const STATUS_AT = { sent: 'sentAt', delivered: 'deliveredAt', read: 'readAt', delivery_failed: 'failedAt' } as const;

function traceparent(): string {
  return `00-${randomUUID().replace(/-/g, '')}-${randomUUID().replace(/-/g, '').slice(0, 16)}-01`;
}

/**
 * Subscribes to send-results and the statuses, positioned at their current ends before the
 * request is produced, so nothing about it can be missed, then prints the result and every
 * status of the created message until a final one (read, delivery_failed) or timeout. When a
 * tracker runs (its message-state topic exists) the statuses come from the message's one
 * monotonic state, duplicates and late statuses already folded in; otherwise from
 * delivery_status as the provider sent them.
 */
async function follow(kafka: KafkaPort, config: Config, request: SendRequest, timeoutSeconds: number) {
  const topics = config.kafka.topics;
  const ends = new Map<string, { partition: number; offset: string }[]>();
  const stateTopic = await withAdmin(kafka, async (admin) => {
    const existing = new Set(await admin.listTopics());
    for (const topic of [topics.sendRequests, topics.sendResults, topics.deliveryStatus]) {
      if (!existing.has(topic))
        throw new MsgbridgeError(
          'INVALID_ARGUMENT',
          `topic "${topic}" does not exist: is the relay (sender, ingress) running against this Kafka?`,
        );
    }
    const state = existing.has(topics.messageState) ? topics.messageState : undefined;
    for (const topic of [topics.sendResults, state ?? topics.deliveryStatus])
      ends.set(topic, await admin.topicEnds(topic));
    return state;
  });

  // read_committed (the factory's default): message-state is written in transactions. The
  // topics were checked to exist above, so no subscription has anything to create.
  let messageId: string | undefined;
  const early: { id: string; status: string; text: string }[] = [];
  let resolve: (code: number) => void = () => {};
  const outcome = new Promise<number>((r) => (resolve = r));
  const started = Date.now();
  const since = () => `+${((Date.now() - started) / 1000).toFixed(1)}s`;

  // From message-state: each status the state has reached, once, in their order; the outcome is
  // the state's own status (a read recorded after a failure does not make it a success).
  const printed = new Set<string>();
  const earlyStates = new Map<string, MessageState>();
  const onState = (state: MessageState) => {
    for (const status of ['sent', 'delivered', 'read', 'delivery_failed'] as const) {
      if (state[STATUS_AT[status]] === null || printed.has(status)) continue;
      printed.add(status);
      say(
        `${since()} ${status}${status === 'delivery_failed' && state.error ? `: ${state.error.code} ${state.error.message}` : ''}`,
      );
    }
    if (state.status === 'read') resolve(SEND_EXIT.done);
    if (state.status === 'delivery_failed') resolve(SEND_EXIT.failed);
  };
  const onStatus = (status: string, text: string) => {
    say(`${since()} ${status}${text}`);
    if (status === 'read') resolve(SEND_EXIT.done);
    if (status === 'delivery_failed') resolve(SEND_EXIT.failed);
  };

  const subscription = await subscribeTopics(kafka, {
    groupId: `msgbridge-send-${randomUUID()}`,
    topics: [topics.sendResults, stateTopic ?? topics.deliveryStatus],
    fromBeginning: false,
    maxWaitTimeInMs: 100,
    onRecord: ({ topic, value }) => {
      if (!value) return;
      let body: unknown;
      try {
        body = JSON.parse(value.toString());
      } catch {
        return;
      }
      if (topic === topics.sendResults) {
        const result = sendResultSchema.safeParse(body);
        if (!result.success || result.data.requestId !== request.requestId) return;
        const r = result.data;
        if (r.outcome === 'accepted') {
          messageId = r.messageId;
          const as =
            r.sentAs === 'template' && request.type === 'text'
              ? ` as the fallback template ${request.fallbackTemplate?.templateName ?? ''} (the conversation window is closed)`
              : '';
          say(
            `${since()} accepted${as}: message id ${messageId} (attempts ${r.attempts}${r.maybeSent ? '; an earlier attempt may also have created a message' : ''})`,
          );
          // The provider sends no delivery status for an SMS: accepted is its last state.
          if (isSms(r.channel ?? sendRequestChannel(request))) {
            say(
              `${since()} SMS: handed to the SMS network; the provider reports no delivery on this channel, so nothing more will come`,
            );
            resolve(SEND_EXIT.done);
            return;
          }
          for (const e of early.filter((x) => x.id === messageId)) onStatus(e.status, e.text);
          const earlyState = earlyStates.get(messageId);
          if (earlyState) onState(earlyState);
        } else if (r.outcome === 'expired') {
          say(
            `${since()} expired: not sent, past ${r.expiresAt} (set by ${r.expiredBy}) after ${r.attempts} attempt(s)${r.maybeSent ? '; an attempt may have created the message' : ''}`,
          );
          resolve(SEND_EXIT.failed);
        } else {
          const e = r.error;
          const where =
            r.attempts > 0
              ? `rejected after ${r.attempts} attempt(s)`
              : e.code === RELAY_RESULT_CODE.outsideConversationWindow
                ? 'rejected without a send (outside the conversation window)'
                : 'rejected without a send (dead-lettered)';
          say(`${since()} ${where}: ${e.code} ${e.message}${e.httpStatus ? ` (HTTP ${e.httpStatus})` : ''}`);
          resolve(SEND_EXIT.failed);
        }
        return;
      }
      if (topic === stateTopic) {
        const parsed = messageStateSchema.safeParse(body);
        if (!parsed.success) return;
        if (messageId === undefined) {
          if (earlyStates.size < 1000 || earlyStates.has(parsed.data.messageId))
            earlyStates.set(parsed.data.messageId, parsed.data);
        } else if (parsed.data.messageId === messageId) onState(parsed.data);
        return;
      }
      const event = deliveryStatusEventSchema.safeParse(body);
      if (!event.success) return;
      const update = event.data.statusUpdate;
      const text = update.error ? `: ${update.error.code} ${update.error.message}` : '';
      // Statuses can overtake the send result (different topics); keep a bounded few.
      if (messageId === undefined) {
        if (early.length < 1000) early.push({ id: update.id, status: update.status, text });
      } else if (update.id === messageId) onStatus(update.status, text);
    },
  });
  await subscription.joined;
  say(
    stateTopic
      ? `following ${stateTopic} (the tracker's one state per message)`
      : `following ${topics.deliveryStatus} (no tracker: statuses as the provider sends them)`,
  );
  for (const [topic, offsets] of ends)
    for (const { partition, offset } of offsets) subscription.seek(topic, partition, offset);
  const timer = setTimeout(() => {
    say(
      `${since()} no final status within ${timeoutSeconds} s${messageId ? '' : ' (no send result yet: is the sender running?)'}`,
    );
    resolve(SEND_EXIT.timeout);
  }, timeoutSeconds * 1000);
  void outcome.finally(() => clearTimeout(timer));
  return { subscription, outcome };
}
