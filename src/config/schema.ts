import { z } from 'zod';
import { recipientNumber } from '../contracts/common.js';
import { DIRECT, parseProxyUrl } from '../platform/proxy.js';

/**
 * The whole configuration. Every default lives in config/default.json (this schema repeats
 * none of them, so there is one place to read them); the schema says what is valid.
 * Each section belongs to one role; roles validate their own requirements at start.
 */
const portError = {
  error: (issue: { input?: unknown }) =>
    `expected a TCP port from 0 to 65535 (0 = any free one), got ${JSON.stringify(issue.input)}`,
};
const port = z.number(portError).int(portError).min(0, portError).max(65535, portError);
/**
 * Where a role serves /healthz, /readyz and /metrics (docs/deployment.md "Ports"): a port of its own, never
 * the public one, so probes and scrapes reach it and the provider's side of the network does not.
 */
const adminHost = z.string().min(1);
const positiveInt = z.number().int().positive();
const secret = z.string().min(1);

export const kafkaTopicsSchema = z.strictObject({
  messages: z.string().min(1),
  deliveryStatus: z.string().min(1),
  webhooksDlq: z.string().min(1),
  sendRequests: z.string().min(1),
  sendResults: z.string().min(1),
  sendRequestsDlq: z.string().min(1),
  /**
   * Compacted, written by the tracker: one state per message id (docs/topics.md, "Message state and conversation
   * windows").
   */
  messageState: z.string().min(1),
  /**
   * Compacted, written by the tracker: one window per business and customer (docs/topics.md, "Message state and
   * conversation windows").
   */
  conversations: z.string().min(1),
  /** Compacted, written by the tracker: the last rejected or expired result per request id (docs/topics.md). */
  requestOutcomes: z.string().min(1),
  /**
   * Compacted, written by the sender, co-partitioned with send-requests: the calls started and
   * the outcomes of the requests of each partition, its durable memory (src/sender/README.md "Sent once").
   */
  sendLedger: z.string().min(1),
  /**
   * Compacted, written by the tracker: each inbound message, bounded, for the customer's conversation (docs/topics.md).
   */
  inboundMessages: z.string().min(1),
});

export const kafkaSchema = z
  .strictObject({
    /** Empty = the embedded local broker, where a role supports it. */
    brokers: z.array(z.string().regex(/^[^\s:,]+:\d{1,5}$/, 'expected host:port')),
    clientId: z.string().min(1),
    /**
     * The Kafka client the ingress and the sender produce with, both behind the RecordProducer
     * port: @platformatic/kafka (the default: measured faster, docs/benchmarks.md) or kafkajs.
     * Topic creation and the consumers use kafkajs either way.
     */
    client: z.enum(['kafkajs', 'platformatic']),
    ssl: z.union([
      z.boolean(),
      z
        .strictObject({
          rejectUnauthorized: z.boolean().optional(),
          /** PEM texts... */
          ca: z.string().optional(),
          cert: z.string().optional(),
          key: z.string().optional(),
          /** ...or files holding them (KAFKA_SSL_CA_FILE, KAFKA_SSL_CERT_FILE, KAFKA_SSL_KEY_FILE). */
          caFile: z.string().min(1).optional(),
          certFile: z.string().min(1).optional(),
          keyFile: z.string().min(1).optional(),
        })
        .superRefine((tls, ctx) => {
          if (tls.ca !== undefined && tls.caFile !== undefined)
            ctx.addIssue({ code: 'custom', path: ['caFile'], message: 'set either ca or caFile, not both' });
          if (tls.cert !== undefined && tls.certFile !== undefined)
            ctx.addIssue({ code: 'custom', path: ['certFile'], message: 'set either cert or certFile, not both' });
          if (tls.key !== undefined && tls.keyFile !== undefined)
            ctx.addIssue({ code: 'custom', path: ['keyFile'], message: 'set either key or keyFile, not both' });
          const hasCert = tls.cert !== undefined || tls.certFile !== undefined;
          const hasKey = tls.key !== undefined || tls.keyFile !== undefined;
          if (hasCert !== hasKey)
            ctx.addIssue({
              code: 'custom',
              path: [hasCert ? 'keyFile' : 'certFile'],
              message: 'a client certificate needs its key, and a key its certificate (mutual TLS)',
            });
        }),
    ]),
    sasl: z
      .strictObject({
        mechanism: z.enum(['plain', 'scram-sha-256', 'scram-sha-512']),
        username: z.string().min(1),
        password: secret,
      })
      .nullable(),
    connectionTimeoutMs: positiveInt,
    requestTimeoutMs: positiveInt,
    topics: kafkaTopicsSchema,
    createTopics: z.boolean(),
    partitions: positiveInt,
    replicationFactor: positiveInt,
    /** min.insync.replicas of the topics created here; null = 2 when replicationFactor ≥ 3, else 1. */
    minInsyncReplicas: positiveInt.nullable(),
    /** retention.ms of the DLQ topics created here; -1 = kept for ever (an authentic body must be kept). */
    dlqRetentionMs: z.number().int().min(-1),
  })
  .superRefine((k, ctx) => {
    if (k.minInsyncReplicas !== null && k.minInsyncReplicas > k.replicationFactor) {
      ctx.addIssue({
        code: 'custom',
        path: ['minInsyncReplicas'],
        message: `must not exceed replicationFactor (${k.replicationFactor}): no write could ever be acknowledged`,
      });
    }
    if (k.dlqRetentionMs === 0)
      ctx.addIssue({
        code: 'custom',
        path: ['dlqRetentionMs'],
        message: 'expected -1 (for ever) or a positive number of milliseconds',
      });
  });

export const localKafkaSchema = z.strictObject({
  /** Where the Kafka jars are cached; null = ~/.cache/msgbridge. */
  cacheDir: z.string().min(1).nullable(),
  /** Where `msgbridge dev`'s embedded Kafka keeps its data between runs; null = <cacheDir>/dev-state/kafka. */
  devDataDir: z.string().min(1).nullable(),
  heapMb: z.number().int().min(128).max(8192),
  startTimeoutMs: positiveInt,
  partitions: positiveInt,
});

export const businessSchema = z.strictObject({
  id: z.string().regex(/^[A-Za-z0-9_.-]{1,128}$/, 'expected 1-128 letters, digits, _ . or -'),
  /** Every active webhook signing secret; several during a rotation. */
  signingSecrets: z.array(secret),
  /** Sent as the `X-API-Key` header: no control character (a line break would end the header). */
  apiKey: secret
    .refine(
      (key) => !/[\x00-\x08\x0a-\x1f\x7f]/.test(key),
      'an API key is sent as an HTTP header: it cannot hold a control character (line break, NUL…)',
    )
    .nullable(),
});

/** The businesses, ids unique: the configuration's list and the live businesses file alike. */
export const businessesSchema = z.array(businessSchema).superRefine((list, ctx) => {
  const seen = new Set<string>();
  list.forEach((b, i) => {
    if (seen.has(b.id)) ctx.addIssue({ code: 'custom', path: [i, 'id'], message: `duplicate business id "${b.id}"` });
    seen.add(b.id);
  });
});

export const providerSchema = z.strictObject({
  url: z.url({ protocol: /^https?$/ }),
  timeoutMs: positiveInt,
  /** Keep-alive connections of the sender's pool; null = one per provider call in flight (sender.concurrency). */
  connections: positiveInt.nullable(),
  /**
   * The HTTP proxy of provider calls: null = the environment's (HTTPS_PROXY, HTTP_PROXY,
   * ALL_PROXY, as curl reads them), "direct" = none, or an http:// URL. NO_PROXY applies to all
   * three (src/sender/README.md "Egress proxy"). The message never repeats a password.
   */
  proxy: z
    .string()
    .nullable()
    .superRefine((value, ctx) => {
      if (value === null || value.trim().toLowerCase() === DIRECT) return;
      const parsed = parseProxyUrl(value);
      if ('error' in parsed)
        ctx.addIssue({
          code: 'custom',
          message: `${parsed.error}; or "${DIRECT}" for none, or null for the environment's`,
        });
    }),
});

/** `ingress.workers`: an integer from 1 to 256, or "auto" (the CLI's --workers parses with it too). */
const workersError = {
  error: (issue: { input?: unknown }) =>
    `expected an integer from 1 to 256 or "auto", got ${JSON.stringify(issue.input)}`,
};
export const ingressWorkersSchema = z.union(
  [
    z.number(workersError).int(workersError).min(1, workersError).max(256, workersError),
    z.literal('auto', workersError),
  ],
  workersError,
);

export const ingressSchema = z.strictObject({
  /** The webhook port: webhooks only (its health and metrics are on adminPort). */
  host: z.string().min(1),
  port,
  adminHost,
  adminPort: port,
  maxBodyBytes: z
    .number()
    .int()
    .min(1024)
    .max(64 * 1024 * 1024),
  publishTimeoutMs: positiveInt,
  queueMaxEvents: positiveInt,
  queueMaxBytes: positiveInt,
  batchMaxEvents: positiveInt,
  /**
   * Estimated bytes per produce request. Keep it below the topics' max.message.bytes (1 MB by
   * default): all records of one partition travel as one record batch.
   */
  batchMaxBytes: positiveInt,
  retryAfterSeconds: positiveInt,
  /**
   * Seconds a request may take to deliver its whole body before its connection is closed.
   * Idle keep-alive connections are closed by uWebSockets.js itself after 10 s without
   * traffic (a constant of the native build); this bounds slow bodies, which are not idle.
   */
  idleTimeoutSeconds: z.number().int().min(8).max(3600),
  drainGraceMs: positiveInt,
  /**
   * With no traffic an outage would only show at the next webhook: after this long without an
   * acknowledgement, the ingress asks Kafka for its topics' metadata (again every interval
   * while idle), and /readyz turns false when that fails. 0 turns it off.
   */
  kafkaProbeIntervalMs: z.number().int().min(0).max(3_600_000),
  /** Requests whose body is still arriving, all together: at the bound the slowest one is closed. */
  maxReceivingRequests: z.number().int().min(1).max(1_000_000),
  /** The same bound per remote address (behind a proxy, the proxy's: set it to maxReceivingRequests). */
  maxReceivingPerAddress: z.number().int().min(1).max(1_000_000),
  /** Accept Transfer-Encoding: chunked bodies; false refuses them (400) where no proxy normalises chunk framing. */
  chunkedBodies: z.boolean(),
  /**
   * Worker threads serving the port (src/ingress/workers.ts), each a whole ingress with its own
   * producer and its own limits; 1 = no worker thread; "auto" = the cores this process may use.
   */
  workers: ingressWorkersSchema,
});

const HOUR = 3_600_000;

export const senderSchema = z
  .strictObject({
    groupId: z.string().min(1),
    /** Provider calls in flight at once (all businesses together). */
    concurrency: positiveInt,
    /**
     * Calls made whose outcome is not yet in the request ledger: the most requests a kill -9 of
     * this process can send twice (src/sender/README.md "Sent once").
     */
    maxUnrecordedCalls: positiveInt,
    maxBufferedRequests: positiveInt,
    /** How long transient provider failures are retried, from a request's first attempt (src/sender/README.md). */
    retryBudgetMs: z
      .number()
      .int()
      .min(1000)
      .max(7 * 24 * HOUR),
    backoffInitialMs: positiveInt,
    backoffMaxMs: positiveInt,
    /** Consecutive failures (no answer, 408, 5xx) that open a business's circuit. */
    circuitFailureThreshold: z.number().int().min(1).max(1000),
    /** Longest wait between two probes of an open circuit. */
    circuitProbeMaxMs: z
      .number()
      .int()
      .min(100)
      .max(10 * 60_000),
    /**
     * After an attempt that may have created the message (lost answer): resend (at least once) or reject (at most
     * once).
     */
    retryMaybeSent: z.boolean(),
    /** Requests older than this (by record timestamp) are never sent: their result is `expired`. */
    maxRequestAgeMs: z
      .number()
      .int()
      .min(1000)
      .max(365 * 24 * HOUR),
    /** Per replica: replicas sharing a provider limit divide it between them. */
    ratePerSecond: positiveInt,
    callTimeoutMs: positiveInt,
    /**
     * Outcomes remembered on disk per member (src/sender/README.md "Sent once"), about 500 bytes
     * each; a partition's store keeps its share (this over the partitions of send-requests).
     */
    completedRequestIdsMax: positiveInt.max(100_000_000),
    /** A request id produced again within this time of its outcome gets that outcome again, never a second call. */
    idempotencyWindowMs: z
      .number()
      .int()
      .min(60_000)
      .max(30 * 24 * HOUR),
    /** Where each owned partition keeps its request ledger: `<stateDir>/<groupId>/partition-<p>/`. */
    stateDir: z.string().min(1),
    drainGraceMs: positiveInt,
    /** Consumer-group session: how long a member killed without leaving holds its partitions. */
    sessionTimeoutMs: z.number().int().min(3000).max(300_000),
    heartbeatIntervalMs: z.number().int().min(100).max(60_000),
    /** Where the sender serves /healthz, /readyz and /metrics (it serves nothing else); port 0 = any free port. */
    adminHost,
    adminPort: port,
    /**
     * The 24-hour conversation window guard (src/sender/README.md "Conversation window"): `off`
     * sends every text as it is; `reject` reads the tracker's `conversations` topic before
     * consuming and refuses a text whose window is known closed (or sends its fallbackTemplate).
     */
    conversationWindow: z.enum(['off', 'reject'], {
      error: 'expected "off" (send every text) or "reject" (refuse a text outside the 24-hour window)',
    }),
    /**
     * Open windows kept in memory (about 110 bytes of heap each, README); past it the least recently updated is
     * dropped.
     */
    conversationTableMaxEntries: z.number().int().min(1000).max(50_000_000),
    /** Longest start-up wait for the conversations topic to exist and be read to its end; past it the start fails. */
    conversationTableReadTimeoutMs: z.number().int().min(1000).max(3_600_000),
    /**
     * A text whose window is not known open, from a request younger than this, waits until the
     * request is this old (re-checking the window) before it is refused: the inbound message that
     * opens the window may still be on its way through the tracker. 0 = decide at once.
     */
    conversationWindowGraceMs: z.number().int().min(0).max(60_000),
  })
  .superRefine((s, ctx) => {
    if (s.backoffInitialMs > s.backoffMaxMs)
      ctx.addIssue({
        code: 'custom',
        path: ['backoffInitialMs'],
        message: `must not exceed backoffMaxMs (${s.backoffMaxMs})`,
      });
    if (s.heartbeatIntervalMs * 3 > s.sessionTimeoutMs)
      ctx.addIssue({
        code: 'custom',
        path: ['heartbeatIntervalMs'],
        message: `must be at most a third of sessionTimeoutMs (${s.sessionTimeoutMs})`,
      });
  });

const nonNegativeInt = z.number().int().min(0);
const rate = z.number().min(0).max(1);
const phoneNumber = recipientNumber;

/**
 * One credential of the tracker's queries and console (src/tracker/README.md, "Console and access"): its name (logged),
 * its role, the hex SHA-256 of the token.
 */
export const accessTokenSchema = z.strictObject({
  name: z
    .string()
    .regex(
      /^[A-Za-z0-9._@-]{1,100}$/,
      'expected 1-100 letters, digits, ".", "_", "@" or "-" (it names the holder in logs)',
    ),
  role: z.enum(['read', 'operator'], { error: 'expected "read" or "operator"' }),
  sha256: z
    .string()
    .regex(
      /^[0-9a-fA-F]{64}$/,
      'expected the hex SHA-256 of the token (64 hex digits: printf %s "$TOKEN" | sha256sum), never the token itself',
    )
    .transform((h) => h.toLowerCase()),
});

function uniqueTokenNames(tokens: { name: string }[], ctx: z.RefinementCtx): void {
  const seen = new Set<string>();
  tokens.forEach((t, i) => {
    if (seen.has(t.name))
      ctx.addIssue({
        code: 'custom',
        path: [i, 'name'],
        message: `"${t.name}" names two tokens: each holder needs its own name (redrives are logged by it)`,
      });
    seen.add(t.name);
  });
}

/** The tokens file (MSGBRIDGE_TRACKER_TOKENS_FILE): a JSON array of access tokens. */
export const accessTokensFileSchema = z.array(accessTokenSchema).superRefine(uniqueTokenNames);

/** Faults the simulator injects on demand (also settable at run time with `PUT /sim/faults`). */
export const trackerSchema = z
  .strictObject({
    groupId: z.string().min(1),
    /**
     * transactional.id of task p is `<prefix>-<p>`: the same on every member and across restarts
     * (src/tracker/README.md).
     */
    transactionalIdPrefix: z.string().min(1),
    /**
     * Message states kept in memory **per task** (above its local store, which holds them all): the recently used ones.
     */
    maxCachedMessages: z.number().int().min(100).max(10_000_000),
    /** Conversation windows kept in memory **per task**, bounded the same way. */
    maxCachedConversations: z.number().int().min(100).max(10_000_000),
    /**
     * Where each task keeps its persistent local store: `<stateDir>/<groupId>/task-<p>/`
     * (MSGBRIDGE_TRACKER_STATE_DIR). Put it on a volume that outlives the process: a restart
     * then reads only what changed since (src/tracker/README.md "Local store").
     */
    stateDir: z.string().min(1),
    /**
     * How long a message state is kept after its last update (default 30 days): message-state gets
     * `cleanup.policy=compact,delete` with this `retention.ms`, and the stores drop older states. A
     * status arriving later starts a new state (without its request).
     */
    stateRetentionMs: z
      .number()
      .int()
      .min(3_600_000)
      .max(3650 * 86_400_000),
    /**
     * The stores' pages this process may keep mapped (file-backed resident memory) before it
     * remaps them (default 64 MiB): LMDB reads through a memory map, and without a bound a
     * member's RSS would grow towards the size of its stores. Per member.
     */
    maxStoreResidentBytes: z
      .number()
      .int()
      .min(8 * 1024 * 1024)
      .max(64 * 1024 ** 3),
    /**
     * How long a conversation window is kept after its last inbound message (the 24-hour window plus a margin; default
     * 26 h).
     */
    conversationRetentionMs: z
      .number()
      .int()
      .min(86_400_000)
      .max(3650 * 86_400_000),
    /**
     * The base URL other members use to forward a query to this one (published through the group
     * protocol, like Kafka Streams' application.server). Unset: http://<hostname>:<port>.
     */
    advertisedUrl: z
      .url({
        protocol: /^https?$/,
        error: 'expected an http(s) URL other members can reach, e.g. http://tracker-0.tracker:8082',
      })
      .optional(),
    /** Records per transaction. */
    maxBatchRecords: z.number().int().min(1).max(10_000),
    /** The coordinator aborts a transaction open longer than this (below the broker's transaction.max.timeout.ms). */
    transactionTimeoutMs: z.number().int().min(1000).max(900_000),
    sessionTimeoutMs: z.number().int().min(3000).max(300_000),
    heartbeatIntervalMs: z.number().int().min(100).max(60_000),
    /** Longest a query (GET /messages/..., msgbridge status) may read message-state for an answer not in memory. */
    queryTimeoutMs: z.number().int().min(100).max(120_000),
    drainGraceMs: positiveInt,
    /** Where the tracker serves the queries and the console; port 0 = any free port. */
    host: z.string().min(1),
    port,
    /** Where it serves /healthz, /readyz and /metrics. */
    adminHost,
    adminPort: port,
    /**
     * Who may query the tracker and open its console (src/tracker/README.md "Console
     * and access"): the SHA-256 of each token, never the token. Merged with the tokens file.
     */
    accessTokens: z.array(accessTokenSchema).superRefine(uniqueTokenNames),
    /** A JSON file of more tokens in the same shape, reloaded live (MSGBRIDGE_TRACKER_TOKENS_FILE); null = none. */
    accessTokensFile: z.string().min(1).nullable(),
    /**
     * The request header a trusted SSO proxy (oauth2-proxy and the like) sets to the signed-in
     * user, e.g. `x-forwarded-user`; null = off. Only behind a proxy that strips the header from
     * every client request: anyone who can reach the port directly could otherwise claim any user.
     */
    trustedUserHeader: z
      .string()
      .regex(/^[A-Za-z0-9-]{1,100}$/, 'expected an HTTP header name, e.g. x-forwarded-user')
      .transform((h) => h.toLowerCase())
      .nullable(),
    /** Users (as the trusted header names them) with the operator role; every other user of the header reads only. */
    trustedUserOperators: z.array(z.string().min(1)),
    /** Phone numbers masked (last 4 digits kept) in every answer to the read-only role. */
    maskRecipients: z.boolean(),
  })
  .superRefine((t, ctx) => {
    if (t.heartbeatIntervalMs * 3 > t.sessionTimeoutMs)
      ctx.addIssue({
        code: 'custom',
        path: ['heartbeatIntervalMs'],
        message: `must be at most a third of sessionTimeoutMs (${t.sessionTimeoutMs})`,
      });
  });

export const simulatorFaultsSchema = z.strictObject({
  /** Extra latency before every answer of the send endpoints, uniform in [min, max]. */
  sendLatencyMs: z
    .strictObject({ min: nonNegativeInt.max(600_000), max: nonNegativeInt.max(600_000) })
    .refine((r) => r.min <= r.max, { message: 'min must not exceed max' }),
  send429Rate: rate,
  /** Retry-After seconds on those 429s; null = no Retry-After header. */
  send429RetryAfterSeconds: nonNegativeInt.max(86_400).nullable(),
  send5xxRate: rate,
  /** A token bucket per business and send operation answering 429 (Retry-After: 1) above it; null = unlimited. */
  sendRateLimitPerSecond: positiveInt.nullable(),
  /** Share of acknowledged webhook deliveries that are delivered once more. */
  duplicateDeliveryRate: rate,
  /** Collect deliveries per address for a short window and send them in reverse order. */
  reorderDeliveries: z.boolean(),
  /** Hold every webhook delivery this long before its first attempt. */
  deliveryDelayMs: nonNegativeInt.max(3_600_000),
  /** Share of webhook attempts signed with a wrong secret. */
  badSignatureRate: rate,
});

export const simulatorSchema = z.strictObject({
  host: z.string().min(1),
  port,
  /** Where webhook registrations are kept across restarts; null = memory only. */
  registrationsFile: z.string().min(1).nullable(),
  maxBodyBytes: z
    .number()
    .int()
    .min(1024)
    .max(64 * 1024 * 1024),
  /** The WhatsApp number of each business (sender of its status events); a stable one is derived when absent. */
  businessNumbers: z.record(z.string(), phoneNumber),
  /** Approved templates and the variables each declares. */
  templates: z.record(z.string().min(1), z.strictObject({ variables: z.array(z.string().min(1)) })),
  /** Recipient behaviours by number. */
  recipients: z.strictObject({
    notOnWhatsapp: z.array(phoneNumber),
    optedOut: z.array(phoneNumber),
    neverReads: z.array(phoneNumber),
    blocked: z.array(phoneNumber),
  }),
  lifecycle: z.strictObject({
    /** After creation: `sent` (or `delivery_failed`). */
    sentDelayMs: nonNegativeInt,
    /** After `sent`: `delivered`. */
    deliveredDelayMs: nonNegativeInt,
    /** After `delivered`: `read`. */
    readDelayMs: nonNegativeInt,
    /** How long an inbound message keeps the conversation open for texts (24 h on WhatsApp). */
    conversationWindowMs: positiveInt,
  }),
  delivery: z.strictObject({
    /** Per attempt, connection included. */
    timeoutMs: positiveInt,
    maxAttempts: positiveInt,
    /** Stop retrying once this long has passed since the first attempt. */
    maxRetryWindowMs: positiveInt,
    backoffInitialMs: positiveInt,
    backoffMaxMs: positiveInt,
    /** Attempts in flight at once, all addresses together. */
    concurrency: positiveInt,
    /** Keep-alive connections per receiving origin. */
    connectionsPerOrigin: positiveInt,
    /** Deliveries waiting, in flight or between retries; above it new ones are dropped (and recorded). */
    queueMax: positiveInt,
    /** With the reorderDeliveries fault: how long deliveries are collected before going out reversed. */
    reorderWindowMs: positiveInt,
  }),
  faults: simulatorFaultsSchema,
  /** Bounds of what the simulator remembers for `/sim/`. */
  history: z.strictObject({
    sends: positiveInt,
    deliveries: positiveInt,
    messages: positiveInt,
    conversations: positiveInt,
  }),
  maxRegistrationsPerBusiness: positiveInt,
});

export const logSchema = z.strictObject({
  level: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']),
});

export const configSchema = z
  .strictObject({
    kafka: kafkaSchema,
    localKafka: localKafkaSchema,
    /**
     * A JSON file of the businesses (`[{id, signingSecrets, apiKey}]`), read at start instead of
     * `businesses` and watched while running: every role reloads it on change and on SIGHUP
     * (src/config/businesses-file.ts).
     */
    businessesFile: z.string().min(1).nullable(),
    businesses: businessesSchema,
    provider: providerSchema,
    ingress: ingressSchema,
    sender: senderSchema,
    tracker: trackerSchema,
    simulator: simulatorSchema,
    log: logSchema,
  })
  .superRefine((c, ctx) => {
    // One process, two servers: the same port twice cannot listen, and would put the metrics back on the public port.
    for (const [role, what] of [
      ['ingress', 'the webhook port'],
      ['tracker', 'the query and console port'],
    ] as const) {
      const { port: publicPort, adminPort } = c[role];
      if (adminPort !== 0 && adminPort === publicPort) {
        ctx.addIssue({
          code: 'custom',
          path: [role, 'adminPort'],
          message: `must differ from ${role}.port (${publicPort}, ${what}): /metrics and the health checks get a private port of their own`,
        });
      }
    }
    // A drain waits for what was admitted: at most one publish timeout (a batch unanswered by then
    // is given up), then each producer's close, bounded by the connection timeout. Less grace
    // than that, and a drain during a stalled broker would be cut off and exit 1.
    const needed = c.ingress.publishTimeoutMs + c.kafka.connectionTimeoutMs + 1000;
    if (c.ingress.drainGraceMs < needed) {
      ctx.addIssue({
        code: 'custom',
        path: ['ingress', 'drainGraceMs'],
        message: `must be at least ingress.publishTimeoutMs + kafka.connectionTimeoutMs + 1000 (${needed}): a drain during a stalled broker waits that long`,
      });
    }
  });

export type Config = z.infer<typeof configSchema>;
export type KafkaConfig = z.infer<typeof kafkaSchema>;
export type BusinessConfig = z.infer<typeof businessSchema>;
export type SimulatorConfig = z.infer<typeof simulatorSchema>;
export type TrackerConfig = z.infer<typeof trackerSchema>;
export type AccessTokenConfig = z.infer<typeof accessTokenSchema>;
export type SimulatorFaults = z.infer<typeof simulatorFaultsSchema>;
