import { z } from 'zod';

/**
 * The whole configuration. Every default lives in config/default.json (this schema repeats
 * none of them, so there is one place to read them); the schema says what is valid.
 * Each section belongs to one role; roles validate their own requirements at start.
 */
const port = z.number().int().min(0).max(65535);
const positiveInt = z.number().int().positive();
const secret = z.string().min(1);

export const kafkaTopicsSchema = z.strictObject({
  messages: z.string().min(1),
  deliveryStatus: z.string().min(1),
  webhooksDlq: z.string().min(1),
  sendRequests: z.string().min(1),
  sendResults: z.string().min(1),
  sendRequestsDlq: z.string().min(1),
});

export const kafkaSchema = z.strictObject({
  /** Empty = the embedded local broker, where a role supports it. */
  brokers: z.array(z.string().regex(/^[^\s:,]+:\d{1,5}$/, 'expected host:port')),
  clientId: z.string().min(1),
  ssl: z.union([
    z.boolean(),
    z.strictObject({
      rejectUnauthorized: z.boolean().optional(),
      ca: z.string().optional(),
      cert: z.string().optional(),
      key: z.string().optional(),
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
});

export const localKafkaSchema = z.strictObject({
  /** Where the Kafka jars are cached; null = ~/.cache/msgbridge. */
  cacheDir: z.string().min(1).nullable(),
  heapMb: z.number().int().min(128).max(8192),
  startTimeoutMs: positiveInt,
  partitions: positiveInt,
});

export const businessSchema = z.strictObject({
  id: z.string().regex(/^[A-Za-z0-9_.-]{1,128}$/, 'expected 1-128 letters, digits, _ . or -'),
  /** Every active webhook signing secret; several during a rotation. */
  signingSecrets: z.array(secret),
  apiKey: secret.nullable(),
});

export const providerSchema = z.strictObject({
  url: z.url({ protocol: /^https?$/ }),
  timeoutMs: positiveInt,
  connections: positiveInt,
});

export const ingressSchema = z.strictObject({
  host: z.string().min(1),
  port,
  maxBodyBytes: z.number().int().min(1024).max(64 * 1024 * 1024),
  publishTimeoutMs: positiveInt,
  queueMaxEvents: positiveInt,
  queueMaxBytes: positiveInt,
  batchMaxEvents: positiveInt,
  batchMaxBytes: positiveInt,
  retryAfterSeconds: positiveInt,
  idleTimeoutSeconds: z.number().int().min(8).max(3600),
  drainGraceMs: positiveInt,
});

export const senderSchema = z.strictObject({
  groupId: z.string().min(1),
  concurrency: positiveInt,
  maxBufferedRequests: positiveInt,
  maxAttempts: positiveInt,
  backoffInitialMs: positiveInt,
  backoffMaxMs: positiveInt,
  ratePerSecond: positiveInt,
  callTimeoutMs: positiveInt,
  completedRequestIdsMax: positiveInt,
  drainGraceMs: positiveInt,
});

export const simulatorSchema = z.looseObject({
  host: z.string().min(1),
  port,
  /** Where webhook registrations are kept across restarts; null = memory only. */
  registrationsFile: z.string().min(1).nullable(),
});

export const logSchema = z.strictObject({
  level: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']),
});

export const configSchema = z.strictObject({
  kafka: kafkaSchema,
  localKafka: localKafkaSchema,
  businesses: z.array(businessSchema).superRefine((list, ctx) => {
    const seen = new Set<string>();
    list.forEach((b, i) => {
      if (seen.has(b.id)) ctx.addIssue({ code: 'custom', path: [i, 'id'], message: `duplicate business id "${b.id}"` });
      seen.add(b.id);
    });
  }),
  provider: providerSchema,
  ingress: ingressSchema,
  sender: senderSchema,
  simulator: simulatorSchema,
  log: logSchema,
});

export type Config = z.infer<typeof configSchema>;
export type KafkaConfig = z.infer<typeof kafkaSchema>;
export type BusinessConfig = z.infer<typeof businessSchema>;
export type IngressConfig = z.infer<typeof ingressSchema>;
export type SenderConfig = z.infer<typeof senderSchema>;
export type SimulatorConfig = z.infer<typeof simulatorSchema>;
