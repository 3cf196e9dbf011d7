import type { Command } from 'commander';
import { createKafka } from '../kafka/client.js';
import { withAdmin } from '../kafka/admin.js';
import { connectingToKafka } from '../kafka/failure.js';
import { messageStateOf, type MessageState } from '../contracts/message-state.js';
import { findMessageState, findRequestState } from '../tracker/query.js';
import { errorMessage, MsgbridgeError } from '../platform/errors.js';
import { commandConfig, operatorBrokers } from './context.js';
import { runRole } from '../runtime/foreground.js';

/**
 * `msgbridge tracker`: one monotonic state per message and the customers' conversation windows,
 * exactly once, on compacted topics (src/tracker/README.md). SIGTERM/SIGINT drain: exit 0 when
 * it left its group within tracker.drainGraceMs, 1 otherwise or when the Kafka client gives up.
 *
 * `msgbridge status <messageId|requestId>`: the current state, asked of a running tracker
 * (`--tracker`, MSGBRIDGE_TRACKER_URL, with the token of `--token` or MSGBRIDGE_TRACKER_TOKEN),
 * else read from message-state; exit 1 when unknown.
 */
export function registerTrackerCommand(program: Command): void {
  program
    .command('tracker')
    .description(
      'run the tracker: fold send results and delivery statuses into one state per message (message-state), and inbound messages into conversation windows (conversations), exactly once',
    )
    .action(async (_opts: unknown, command: Command) => {
      const config = commandConfig(command);
      const [{ checkStateDir, startTracker }, { createDlqPort }] = await Promise.all([
        import('../tracker/index.js'),
        import('./dlq-console.js'),
      ]);
      // Before any Kafka: a directory it cannot write is a configuration error.
      checkStateDir(config.tracker.stateDir);
      await runRole({
        name: 'tracker',
        config,
        drainGraceMs: config.tracker.drainGraceMs,
        unfinished: 'the tracker did not leave its group within tracker.drainGraceMs',
        // The console's dead-letter page runs `msgbridge dlq`'s code (src/tracker/dlq-port.ts).
        start: ({ logger, brokers, onFatal }) =>
          startTracker({ config, logger, brokers, onFatal, dlq: createDlqPort(config, brokers, logger) }),
        describe: (tracker) => ({
          tracker: {
            url: tracker.address ?? null,
            admin: tracker.adminAddress ?? null,
            groupId: config.tracker.groupId,
            topics: [
              config.kafka.topics.messageState,
              config.kafka.topics.conversations,
              config.kafka.topics.requestOutcomes,
              config.kafka.topics.inboundMessages,
            ],
          },
        }),
      });
    });

  program
    .command('status')
    .description(
      'print the current state of a message (by message id or request id; a request that created no message: its rejected or expired outcome, from a tracker): asked of a running tracker (--tracker or MSGBRIDGE_TRACKER_URL), else read from the message-state topic',
    )
    .argument('<id>', 'a message id, or the requestId of a send request')
    .option('--tracker <url>', 'a tracker member to ask (any member answers; default $MSGBRIDGE_TRACKER_URL)')
    .option(
      '--token <token>',
      "the tracker's access token (default $MSGBRIDGE_TRACKER_TOKEN; prefer the variable: a flag shows in the process list)",
    )
    .action(async (id: string, opts: { tracker?: string; token?: string }, command: Command) => {
      const config = commandConfig(command);
      if (id.trim() === '' || id.length > 512)
        throw new MsgbridgeError('INVALID_ARGUMENT', 'expected a message id or a request id (1 to 512 characters)');
      const trackerUrl = opts.tracker ?? (process.env.MSGBRIDGE_TRACKER_URL?.trim() || undefined);
      const token = opts.token ?? (process.env.MSGBRIDGE_TRACKER_TOKEN?.trim() || undefined);
      const state = trackerUrl
        ? await askTracker(trackerUrl, id, config.tracker.queryTimeoutMs, token)
        : await readStateTopic(config, id);
      if (!state) {
        process.stderr.write(
          `msgbridge: no state for ${id} (neither a message id nor a request id the tracker has seen)\n`,
        );
        process.exitCode = 1;
        return;
      }
      process.stdout.write(`${JSON.stringify(state, null, 2)}\n`);
    });
}

/** The state from a running tracker: by message id, then by request id; undefined when both are 404. */
async function askTracker(
  base: string,
  id: string,
  timeoutMs: number,
  token: string | undefined,
): Promise<MessageState | undefined> {
  let url: URL;
  try {
    url = new URL(base);
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new Error('not http');
  } catch {
    throw new MsgbridgeError(
      'INVALID_ARGUMENT',
      `--tracker / MSGBRIDGE_TRACKER_URL: expected the http(s) address of a tracker, e.g. http://127.0.0.1:8082, got ${JSON.stringify(base)}`,
    );
  }
  for (const kind of ['messages', 'requests']) {
    let response: Response;
    try {
      response = await fetch(new URL(`/${kind}/${encodeURIComponent(id)}`, url), {
        headers: token === undefined ? {} : { authorization: `Bearer ${token}` },
        signal: AbortSignal.timeout(timeoutMs + 1000),
      });
    } catch (error) {
      throw new MsgbridgeError(
        'KAFKA_UNAVAILABLE',
        `cannot reach the tracker at ${url.origin}: ${errorMessage(error instanceof Error && error.cause instanceof Error ? error.cause : error)}`,
      );
    }
    const body = (await response.json().catch(() => undefined)) as (MessageState & { message?: string }) | undefined;
    if (response.status === 200 && body) return body;
    if (response.status === 401) {
      throw new MsgbridgeError(
        'UNAUTHENTICATED',
        `the tracker at ${url.origin} wants a credential: ${token === undefined ? 'set MSGBRIDGE_TRACKER_TOKEN (or --token) to a token it knows' : 'the token given is not one it knows'} (${body?.message ?? 'no details'})`,
      );
    }
    if (response.status !== 404)
      throw new MsgbridgeError(
        'KAFKA_UNAVAILABLE',
        `the tracker at ${url.origin} answered ${response.status}: ${body?.message ?? 'no details'}`,
      );
  }
  return undefined;
}

/**
 * Without a tracker: message-state read from Kafka (a whole partition, or every one for a request id), with progress on
 * stderr.
 */
async function readStateTopic(config: ReturnType<typeof commandConfig>, id: string): Promise<MessageState | undefined> {
  const brokers = operatorBrokers(config);
  const kafka = createKafka(config.kafka, { brokers });
  const topic = config.kafka.topics.messageState;
  const partitions = await connectingToKafka(brokers, () =>
    withAdmin(kafka, async (admin) => {
      try {
        const count = (await admin.partitionCounts([topic])).get(topic);
        if (count === undefined) throw new Error(`no topic ${topic}`);
        return count;
      } catch {
        throw new MsgbridgeError(
          'INVALID_ARGUMENT',
          `topic ${topic} does not exist: is a tracker running (msgbridge tracker)?`,
        );
      }
    }),
  );
  process.stderr.write(
    `msgbridge: no tracker to ask (--tracker or MSGBRIDGE_TRACKER_URL): reading ${topic} from Kafka, which takes longer the more history it holds\n`,
  );
  const query = {
    kafka,
    topic,
    partitions,
    timeoutMs: config.tracker.queryTimeoutMs,
    onProgress: (records: number) =>
      process.stderr.write(`msgbridge: ${records.toLocaleString('en')} records of ${topic} read\n`),
  };
  const state = (await findMessageState(query, id)) ?? (await findRequestState(query, id));
  return state && messageStateOf(state);
}
