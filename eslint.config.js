import tseslint from 'typescript-eslint';
import noKafkaClientTypes from './eslint-rules/no-kafka-client-types.js';

// The rooms of src/ and what each may import (docs/design.md, "Layout"; each folder's README says the same).
// Roles import contracts, kafka, runtime, config and platform, never another role; only
// src/kafka knows a Kafka client library.
const ROLES = ['ingress', 'sender', 'tracker', 'simulator'];
const KAFKA_CLIENTS = ['kafkajs', '@platformatic/kafka'];
const ROOMS = {
  platform: { rooms: [], libraries: KAFKA_CLIENTS },
  contracts: { rooms: ['platform'], libraries: KAFKA_CLIENTS },
  config: { rooms: ['platform', 'contracts'], libraries: KAFKA_CLIENTS },
  kafka: { rooms: ['platform', 'contracts', 'config'], libraries: [] },
  // Development tooling: the embedded broker or cluster (Maven jars, a throw-away CA), never in production's Kafka
  // code.
  'local-kafka': { rooms: ['platform', 'config', 'kafka'], libraries: KAFKA_CLIENTS },
  runtime: { rooms: ['platform', 'contracts', 'config', 'kafka', 'local-kafka'], libraries: KAFKA_CLIENTS },
  ingress: { rooms: ['platform', 'contracts', 'config', 'kafka', 'runtime'], libraries: KAFKA_CLIENTS },
  sender: { rooms: ['platform', 'contracts', 'config', 'kafka', 'runtime'], libraries: KAFKA_CLIENTS },
  tracker: { rooms: ['platform', 'contracts', 'config', 'kafka', 'runtime'], libraries: KAFKA_CLIENTS },
  simulator: { rooms: ['platform', 'contracts', 'config', 'runtime'], libraries: KAFKA_CLIENTS },
  commands: {
    rooms: ['platform', 'contracts', 'config', 'kafka', 'local-kafka', 'runtime', ...ROLES],
    libraries: KAFKA_CLIENTS,
  },
  // The package's entries for producers (msgbridge/client, msgbridge/client/kafka): contracts,
  // and src/kafka's result follower for the Kafka entry only (test/client checks what loads).
  client: { rooms: ['platform', 'contracts', 'kafka'], libraries: KAFKA_CLIENTS },
};
const ALL_ROOMS = [...Object.keys(ROOMS)];

// What src/kafka exports that hands on a client library's object (a kafkajs client, admin,
// consumer or message): for src/kafka itself, tests and benchmarks; the roles and commands use
// the ports (KafkaPort, withAdmin from admin.ts, subscribeTopics, the group consumer).
const KAFKA_INTERNALS = {
  'client.js': [
    'kafkajsClient',
    'createKafkajsClient',
    'kafkaPort',
    'withKafkajsAdmin',
    'createConsumer',
    'consumedRecord',
  ],
  'topics.js': ['ensureTopics', 'checkWrittenTopics', 'prepareRoleTopics', 'topicSettings', 'partitionCounts'],
  'group-directory.js': ['groupDirectory'],
};
const kafkaInternals = (prefix) =>
  Object.entries(KAFKA_INTERNALS).map(([file, importNames]) => ({
    name: `${prefix}kafka/${file}`,
    importNames,
    message: 'a kafkajs object: outside src/kafka use its ports (admin.ts withAdmin, KafkaPort, subscribeTopics)',
  }));

// Pure logic stays framework-free: adapters live at the edge.
const PURE = [
  'src/contracts/**',
  'src/config/**',
  'src/ingress/handle-webhook.ts',
  'src/sender/keyed-runner.ts',
  'src/sender/retry-policy.ts',
  'src/sender/rate-limiter.ts',
  'src/sender/circuit-breaker.ts',
  'src/sender/conversation-guard.ts',
  'src/sender/requests.ts',
  'src/sender/result-records.ts',
  'src/sender/conversation-table.ts',
  'src/kafka/batching-publisher.ts',
  'src/kafka/publisher-lane.ts',
  'src/kafka/replaceable-producer.ts',
  'src/tracker/state-rules.ts',
  'src/tracker/window-rules.ts',
  'src/tracker/state-cache.ts',
  'src/tracker/tracker-logic.ts',
  'src/tracker/access.ts',
];
// Tracing reaches pure logic only as src/platform/tracing.ts's interface (README "Tracing").
const OTEL = [
  '@opentelemetry/api',
  '@opentelemetry/core',
  '@opentelemetry/sdk-trace-base',
  '@opentelemetry/resources',
  '@opentelemetry/semantic-conventions',
  '@opentelemetry/exporter-trace-otlp-http',
  '@opentelemetry/exporter-trace-otlp-proto',
];
const PURE_LIBRARIES = ['uWebSockets.js', 'kafkajs', '@platformatic/kafka', 'undici', ...OTEL];

/** What a room may not import: other rooms, and libraries (more of them for pure files). */
function restricted(room, pure) {
  const { rooms, libraries } = ROOMS[room];
  return {
    rooms,
    forbidden: ALL_ROOMS.filter((r) => r !== room && !rooms.includes(r)),
    libraries: [...new Set([...libraries, ...(pure ? PURE_LIBRARIES : [])])],
  };
}

/** One no-restricted-imports rule for a room (flat config replaces a rule, so pure files get the union). */
function boundary(room, pure) {
  const { rooms, forbidden, libraries } = restricted(room, pure);
  const paths = libraries.map((name) => ({
    name,
    message: pure
      ? 'pure logic imports no framework or client library: adapters live at the edge'
      : 'only src/kafka knows a Kafka client library',
  }));
  const internals = room === 'kafka' ? [] : kafkaInternals('../');
  const patterns = forbidden.length
    ? [
        {
          group: forbidden.map((r) => `../${r}/**`),
          message: `src/${room} may import only ${rooms.join(', ') || 'its own files'} (see its README)`,
        },
      ]
    : [];
  // A library's own files (`kafkajs/src/...`) are the library too.
  const deep = paths.map((p) => `${p.name}/**`);
  if (deep.length) patterns.push({ group: deep, message: paths[0].message });
  return ['error', { paths: [...paths, ...internals], patterns }];
}

/** The same boundary for `import('...')` expressions, which no-restricted-imports does not see. */
function dynamicBoundary(room, pure) {
  const { forbidden, libraries } = restricted(room, pure);
  const names = libraries.map((n) => n.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&'));
  // esquery ends a selector's regular expression at any '/': \\x2F stands for it.
  const alternatives = [...names.map((n) => `${n}(/.*)?`), ...forbidden.map((r) => `\\.\\./${r}/.*`)].map((a) =>
    a.replace(/\\?\//g, '\\x2F'),
  );
  if (alternatives.length === 0) return ['off'];
  return [
    'error',
    {
      selector: `ImportExpression[source.value=/^(${alternatives.join('|')})$/]`,
      message: `src/${room} may not import this dynamically either (see its README)`,
    },
  ];
}

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', '.cache/**', 'schemas/**', 'vendor/**'] },
  ...tseslint.configs.recommended,
  {
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      'no-restricted-imports': 'off',
    },
  },
  ...Object.keys(ROOMS).map((room) => ({
    files: [`src/${room}/**/*.ts`],
    rules: { 'no-restricted-imports': boundary(room, false), 'no-restricted-syntax': dynamicBoundary(room, false) },
  })),
  ...Object.keys(ROOMS)
    .map((room) => ({
      files: PURE.filter((glob) => glob.startsWith(`src/${room}/`)),
      rules: { 'no-restricted-imports': boundary(room, true), 'no-restricted-syntax': dynamicBoundary(room, true) },
    }))
    .filter((c) => c.files.length > 0),
  // src/cli.ts: no room of its own, no Kafka client library either.
  {
    files: ['src/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          paths: [
            ...KAFKA_CLIENTS.map((name) => ({ name, message: 'only src/kafka knows a Kafka client library' })),
            ...kafkaInternals('./'),
          ],
          patterns: [
            { group: KAFKA_CLIENTS.map((n) => `${n}/**`), message: 'only src/kafka knows a Kafka client library' },
          ],
        },
      ],
    },
  },
  // Types too: no value outside src/kafka has a client library's type, imported or handed on (eslint-rules/).
  {
    files: ['src/**/*.ts'],
    ignores: ['src/kafka/**'],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    plugins: { msgbridge: { rules: { 'no-kafka-client-types': noKafkaClientTypes } } },
    rules: { 'msgbridge/no-kafka-client-types': 'error' },
  },
  // Functions a reader can hold in view, declarative tables included (split them by section).
  {
    files: ['src/**/*.ts'],
    rules: { 'max-lines-per-function': ['error', { max: 150, skipBlankLines: true, skipComments: true }] },
  },
);
